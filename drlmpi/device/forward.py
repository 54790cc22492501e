"""A batched forward pass replayed from CUDA graphs at padded batch sizes
(:class:`CapturedForward`): a central learner acting for its simulators. Nothing here knows an
algorithm; on ``device=cpu`` the pass runs as it is."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

from drlmpi.device.capture import first_line, on_side_stream


class CapturedForward:
    """A batched forward pass ``fn(x)`` (``x`` a ``(n, *shape)`` tensor on ``device``, the result
    ``(n, k)``) for batches of any size up to ``max_rows``, returned on the host as numpy.

    ``mode="graph"`` (CUDA): the batch is padded to a bucket size (:meth:`bucket`) and the
    pass is replayed from a CUDA graph captured once per bucket - input copied in through a
    pinned buffer, output copied out through another, one wait per call (:meth:`finish`); the padding
    rows are computed on stale input and dropped. Random draws inside ``fn`` come from torch's
    default CUDA generator, which every replay advances. A failed capture warns once; later calls
    run eagerly. ``mode="off"`` (the CPU, or no capture): ``fn`` on the batch as it is. ``stream``:
    every pass runs on that CUDA stream (acting beside queued updates: :mod:`drlmpi.device.acting`)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...], dtype: torch.dtype,
                 device: torch.device, max_rows: int, mode: str, name: str, warmup: int = 2,
                 stream: torch.cuda.Stream | None = None) -> None:
        self.fn, self.shape, self.dtype, self.device = fn, tuple(shape), dtype, torch.device(device)
        self.max_rows, self.name, self.warmup = int(max_rows), name, warmup
        self.mode = mode if self.device.type == "cuda" else "off"
        #: the CUDA stream every pass runs on (``None``: the current one)
        self.stream = stream
        self.failure: str | None = None
        #: bucket size -> (graph, device input, device output, pinned input, pinned output)
        self.slots: dict[int, tuple[Any, ...]] = {}
        #: the memory pool the graphs :meth:`prepare` captures share (``None``: one each)
        self.pool: Any = None

    @staticmethod
    def bucket(n: int) -> int:
        """The padded size of ``n`` rows: 8, then four sizes an octave (multiples of 8 to 64, of
        16 to 128, ...): padding under a quarter past 32 rows, where a power of two doubles."""
        n = max(8, int(n))
        step = max(8, 1 << ((n - 1).bit_length() - 3))
        return -(-n // step) * step

    def sizes(self) -> list[int]:
        """Every bucket size a batch of 1 to ``max_rows`` rows is padded to."""
        out, n = [], 1
        while n <= self.max_rows:
            out.append(self.bucket(n))
            n = out[-1] + 1
        return out

    def prepare(self) -> int:
        """Capture the pass at every bucket size now (:meth:`sizes`), so that no capture - and its
        device-wide synchronisation, which waits for every queued update - happens once the
        run serves; the graphs share one memory pool (they never run at once: a pass is
        finished, :meth:`finish`, before the next one starts). Returns the number of graphs
        captured (0: nothing to capture)."""
        if self.mode != "graph" or self.failure is not None:
            return 0
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        with self._on_stream():
            if any(self._slot(size) is None for size in self.sizes()):
                return 0
        return len(self.slots)

    def _on_stream(self) -> Any:
        return nullcontext() if self.stream is None else torch.cuda.stream(self.stream)

    def _slot(self, size: int) -> tuple[Any, ...] | None:
        """The captured pass at bucket ``size``, captured now if it was not; ``None`` when the
        capture failed (one warning; every later pass runs eagerly, never a crash)."""
        slot = self.slots.get(size)
        if slot is None:
            try:
                slot = self.slots[size] = self._capture(size)
            except Exception as exc:  # noqa: BLE001 (any failure: eager from now on)
                self.failure = first_line(exc)
                warnings.warn(f"drlmpi: capturing the forward pass of {self.name} failed ({self.failure}); "
                              f"acting eagerly", stacklevel=4)
        return slot

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        return self.finish(self.start(batch))

    def start(self, batch: np.ndarray) -> Any:
        """Queue the pass over ``batch``; :meth:`finish` waits for it and returns its output. A
        captured pass queues the copy in, the replay and the copy out, and records an event
        (the host goes on meanwhile); an eager one runs at once. One pass at a time: the next
        :meth:`start` of the same size reuses this one's pinned buffers, so :meth:`finish` first."""
        with self._on_stream():
            return self._start(batch)

    @staticmethod
    def finish(started: Any) -> np.ndarray:
        """The output of the pass :meth:`start` queued, once it is done."""
        if isinstance(started, np.ndarray):
            return started
        event, host_out, n = started
        event.synchronize()
        return host_out.numpy()[:n].copy()

    def _start(self, batch: np.ndarray) -> Any:
        n = batch.shape[0]
        if self.mode != "graph" or self.failure is not None or n > self.max_rows:
            return self._eager(batch)
        slot = self._slot(self.bucket(n))
        if slot is None:
            return self._eager(batch)
        graph, dev_in, dev_out, host_in, host_out = slot
        host_in[:n].copy_(torch.from_numpy(np.ascontiguousarray(batch)))
        dev_in.copy_(host_in, non_blocking=True)
        graph.replay()
        host_out.copy_(dev_out, non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.device))
        return done, host_out, n

    def _eager(self, batch: np.ndarray) -> np.ndarray:
        return self.fn(torch.as_tensor(batch, dtype=self.dtype, device=self.device)).float().cpu().numpy()

    def _capture(self, size: int) -> tuple[Any, ...]:
        dev_in = torch.zeros((size, *self.shape), dtype=self.dtype, device=self.device)
        with torch.no_grad():
            for _ in range(self.warmup):
                on_side_stream(self.device, lambda: self.fn(dev_in))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                dev_out = self.fn(dev_in).float()
        host_in = torch.empty(dev_in.shape, dtype=self.dtype, pin_memory=True)
        host_out = torch.empty(dev_out.shape, dtype=torch.float32, pin_memory=True)
        return graph, dev_in, dev_out, host_in, host_out
