"""Copying experience to the learner's device: :class:`Staging` moves numpy rows arriving from the
wire to a device tensor once per chunk (through a pinned host buffer with a ``non_blocking``
copy on CUDA, directly on the CPU); :func:`synchronize` waits for the device; :class:`DeviceSpan`
times queued work on it.
"""

from __future__ import annotations

import numpy as np
import torch


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DeviceSpan:
    """The device time of work queued between its construction and :meth:`end` (CUDA events,
    read once it is done: :meth:`seconds` waits for it). What a learner that goes on while its updates
    run (:meth:`~drlmpi.roles.learner.Learner.train` with ``settle=False``) counts as their time."""

    def __init__(self, device: torch.device) -> None:
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._start.record(torch.cuda.current_stream(device))
        self.device = device

    def end(self) -> DeviceSpan:
        self._end.record(torch.cuda.current_stream(self.device))
        return self

    def done(self) -> bool:
        """Whether the span's work has finished (a query: never waits)."""
        return self._end.query()

    def seconds(self) -> float:
        """Wait for the span's work; its seconds on the device, from the first queued operation's
        start to the last one's end."""
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3


class Staging:
    """Copies numpy rows to a device tensor, once per chunk.

    On CUDA the rows go through a pinned host buffer (grown to the largest chunk seen) with a
    ``non_blocking`` copy; an event guards the buffer, so the next chunk waits for the previous
    copy to leave it rather than overwrite it in flight. On the CPU the rows are copied
    directly (no pinned memory is ever allocated: :attr:`pinned` stays ``None``).
    """

    def __init__(self, width: int, device: torch.device) -> None:
        self.width = width
        self.device = device
        self.pinned: torch.Tensor | None = None
        self._event: torch.cuda.Event | None = None
        self._stream: torch.cuda.Stream | None = None  # to_device's copies (CUDA)

    def host_rows(self, n: int) -> np.ndarray:
        """A host array for ``n`` rows that :meth:`copy` sends as it is: on CUDA a view of the
        pinned buffer (once the previous copy has left it), so rows built in it are copied to
        the device without another host copy. Fill it, then pass it (or parts of it) to
        :meth:`copy` before asking for it again."""
        if self.device.type != "cuda":
            return np.empty((n, self.width), dtype=np.float32)
        return self._pinned(n)[:n].numpy()

    def _pinned(self, n: int) -> torch.Tensor:
        """The pinned buffer, at least ``n`` rows, free of copies in flight."""
        if self._event is not None:
            self._event.synchronize()  # the previous chunk's copy has left the buffer
        if self.pinned is None or self.pinned.shape[0] < n:
            self.pinned = torch.empty((max(n, 1024), self.width), dtype=torch.float32, pin_memory=True)
            self._event = torch.cuda.Event()
        return self.pinned

    def copy(self, dst: torch.Tensor, rows: np.ndarray) -> None:
        """``dst[:] = rows`` (``dst`` a ``(n, width)`` tensor on the device, ``rows`` numpy; rows
        of :meth:`host_rows` go to the device from where they are)."""
        n = rows.shape[0]
        if n == 0:
            return
        if self.device.type != "cuda":
            dst.copy_(torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)))
            return
        pinned = self.pinned
        if pinned is not None and np.may_share_memory(rows, pinned.numpy()):
            first = (rows.__array_interface__["data"][0] - pinned.data_ptr()) // (4 * self.width)
            source = pinned[first : first + n]
        else:
            source = self._pinned(n)[:n]
            source.copy_(torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)))
        dst.copy_(source, non_blocking=True)
        self._event.record(torch.cuda.current_stream(self.device))

    def to_device(self, rows: np.ndarray) -> torch.Tensor:
        """A new ``(n, width)`` device tensor holding ``rows``. On CUDA the copy runs on a stream
        of its own, so it does not wait behind the updates queued on the current stream (which
        waits for the copy before any later use of the tensor): the pinned buffer is free again
        as soon as the rows have crossed."""
        shape = (rows.shape[0], self.width)
        if self.device.type != "cuda" or rows.shape[0] == 0:
            out = torch.empty(shape, dtype=torch.float32, device=self.device)
            self.copy(out, rows)
            return out
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        current = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self._stream):  # allocated for the copy stream, used by the current one
            out = torch.empty(shape, dtype=torch.float32, device=self.device)
            self.copy(out, rows)  # records the buffer's event on the copy stream
        current.wait_event(self._event)
        out.record_stream(current)
        return out
