"""Communication primitives shared by every topology.

Nothing here decides *who* talks to whom (that is the topologies' job); this module holds the
pieces every topology needs:

* :class:`FlatParams` keeps a network's parameters (and gradients) in ONE contiguous float32
  buffer, so a weight broadcast or a gradient all-reduce is one message that writes straight into
  the model.
* :class:`ExperienceLayout` is the column layout of packed experience: one 2-D float32 array per
  message, known to both ends.
* :class:`TimedComm` wraps an mpi4py communicator and accumulates the wall time spent inside MPI
  calls, which becomes the "MPI wait share" of the run summary.
* :data:`Tag` names the point-to-point message tags.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import torch
from torch import nn


class Tag(IntEnum):
    """Point-to-point message tags (one per message kind, so a stray message never matches)."""

    EXPERIENCE = 12
    WEIGHTS = 21
    CONTROL = 22
    DONE = 41


class FlatParams:
    """A module's parameters re-seated as views into one contiguous float32 buffer.

    After construction ``p.data`` of every parameter is a view into :attr:`params` and
    ``p.grad`` a view into :attr:`grads`, so writing into :attr:`params` (an MPI receive)
    updates the model and one collective on :attr:`grads` reduces every gradient at once.
    Build the optimizer *after* this, or at least do not rely on ``p.data`` identity before.
    """

    def __init__(self, module: nn.Module) -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        device = params[0].device if params else torch.device("cpu")
        total = sum(p.numel() for p in params)
        self.params = torch.zeros(total, dtype=torch.float32, device=device)
        self.grads = torch.zeros(total, dtype=torch.float32, device=device)
        offset = 0
        for p in params:
            n = p.numel()
            self.params[offset : offset + n].copy_(p.data.reshape(-1))
            p.data = self.params[offset : offset + n].view_as(p)
            p.grad = self.grads[offset : offset + n].view_as(p)
            offset += n
        self._modules_params = params
        self.numel = total

    def zero_grad(self) -> None:
        """Zero the flat gradient buffer (keeps the views; never sets ``p.grad = None``)."""
        self.grads.zero_()

    def params_numpy(self) -> np.ndarray:
        """The parameters as a float32 numpy array (a view on CPU, a copy on an accelerator)."""
        if self.params.device.type == "cpu":
            return self.params.numpy()
        return self.params.detach().cpu().numpy()

    def grads_numpy(self) -> np.ndarray:
        """The gradients as a float32 numpy array (a view on CPU, a copy on an accelerator)."""
        if self.grads.device.type == "cpu":
            return self.grads.numpy()
        return self.grads.detach().cpu().numpy()

    def load_params(self, flat: np.ndarray) -> None:
        """Copy a flat float32 array into the parameters (no-op when it is already the view)."""
        if self.params.device.type == "cpu" and np.shares_memory(flat, self.params.numpy()):
            return
        with torch.no_grad():
            self.params.copy_(torch.from_numpy(np.ascontiguousarray(flat)))

    def load_grads(self, flat: np.ndarray) -> None:
        """Copy a flat float32 array into the gradient buffer (no-op when it is the view)."""
        if self.grads.device.type == "cpu" and np.shares_memory(flat, self.grads.numpy()):
            return
        self.grads.copy_(torch.from_numpy(np.ascontiguousarray(flat)))

    def checksum(self) -> float:
        """A cheap fingerprint of the parameters (float64 sum of values and of squares)."""
        p = self.params.detach().double()
        return float(p.sum() + (p * p).sum())


@dataclass(frozen=True)
class ExperienceLayout:
    """Column layout of packed experience rows (float32, one row per environment step).

    Base columns: ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``, ``truncated``,
    ``stream`` (an id unique to one environment instance in the whole job, so an on-policy
    learner can rebuild per-environment sequences), ``episode_return`` and ``episode_length``
    (non-zero only on the row that ends an episode). Algorithms add their own columns through
    ``extras`` (for example PPO's behaviour ``log_prob``).
    """

    obs_dim: int
    action_dim: int
    extras: tuple[tuple[str, int], ...] = ()
    slices: dict[str, slice] = field(init=False, compare=False, repr=False)
    width: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        widths = [
            ("obs", self.obs_dim),
            ("action", self.action_dim),
            ("reward", 1),
            ("next_obs", self.obs_dim),
            ("terminated", 1),
            ("truncated", 1),
            ("stream", 1),
            ("episode_return", 1),
            ("episode_length", 1),
            *self.extras,
        ]
        slices: dict[str, slice] = {}
        offset = 0
        for name, width in widths:
            if name in slices:
                raise ValueError(f"duplicate experience column {name!r}")
            slices[name] = slice(offset, offset + width)
            offset += width
        object.__setattr__(self, "slices", slices)
        object.__setattr__(self, "width", offset)

    def column(self, rows: np.ndarray, name: str) -> np.ndarray:
        """The columns of ``name`` in ``rows`` (shape ``(n, width_of_name)``, a view)."""
        return rows[:, self.slices[name]]

    def empty(self, n: int) -> np.ndarray:
        """A zeroed ``(n, width)`` float32 array."""
        return np.zeros((n, self.width), dtype=np.float32)


class PackedMessage:
    """An int64 header and a float32 payload in ONE contiguous byte buffer: one message.

    Used where a receive must be posted before the sender's counts are known (the asynchronous
    topology's pre-posted ``Irecv``): the layout is fixed, the header says what the payload is.
    """

    def __init__(self, header_len: int, payload_shape: tuple[int, ...]) -> None:
        header_bytes = 8 * header_len
        payload_len = int(np.prod(payload_shape))
        self.buffer = np.zeros(header_bytes + 4 * payload_len, dtype=np.uint8)
        self.header = self.buffer[:header_bytes].view(np.int64)
        self.payload = self.buffer[header_bytes:].view(np.float32).reshape(payload_shape)


class TimedComm:
    """An mpi4py communicator whose calls are timed and counted, for the run summary.

    Only the buffer (uppercase) methods that the topologies use are wrapped; anything else is
    reached through :attr:`comm`. ``wait_s`` is the wall time spent inside MPI calls, which for
    blocking calls is mostly waiting for the peer. Every call names the ``kind`` of payload
    (``"experience"``, ``"weights"``, ``"control"``, ``"gradients"``...) so the summary can say
    exactly what crossed the wire: ``sent[kind]`` / ``received[kind]`` hold ``[messages, bytes]``
    as seen by this rank.
    """

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self.wait_s = 0.0
        self.sent: dict[str, list[int]] = {}
        self.received: dict[str, list[int]] = {}

    def _timed(self, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.wait_s += time.perf_counter() - t0

    def count_sent(self, kind: str, nbytes: int, messages: int = 1) -> None:
        """Record ``messages`` outgoing messages of ``nbytes`` bytes in total."""
        entry = self.sent.setdefault(kind, [0, 0])
        entry[0] += messages
        entry[1] += int(nbytes)

    def count_received(self, kind: str, nbytes: int, messages: int = 1) -> None:
        """Record ``messages`` incoming messages of ``nbytes`` bytes in total."""
        entry = self.received.setdefault(kind, [0, 0])
        entry[0] += messages
        entry[1] += int(nbytes)

    def Send(self, buf: np.ndarray, dest: int, tag: int, kind: str) -> None:  # noqa: N802 (MPI name)
        self.count_sent(kind, buf.nbytes)
        self._timed(self.comm.Send, buf, dest=dest, tag=tag)

    def Recv(self, buf: np.ndarray, source: int, tag: int, kind: str) -> None:  # noqa: N802
        self._timed(self.comm.Recv, buf, source=source, tag=tag)
        self.count_received(kind, buf.nbytes)

    def Bcast(self, buf: np.ndarray, root: int, kind: str) -> None:  # noqa: N802
        self._timed(self.comm.Bcast, buf, root=root)
        if self.rank == root:
            self.count_sent(kind, buf.nbytes * (self.size - 1), self.size - 1)
        else:
            self.count_received(kind, buf.nbytes)

    def Gather(self, sendbuf: np.ndarray, recvbuf: np.ndarray | None, root: int, kind: str) -> None:  # noqa: N802
        self._timed(self.comm.Gather, sendbuf, recvbuf, root=root)
        if self.rank == root:
            self.count_received(kind, sendbuf.nbytes * (self.size - 1), self.size - 1)
        else:
            self.count_sent(kind, sendbuf.nbytes)

    def Gatherv(self, sendbuf: np.ndarray, recvspec: Any, root: int, kind: str) -> None:  # noqa: N802
        self._timed(self.comm.Gatherv, sendbuf, recvspec, root=root)
        if self.rank == root:
            itemsize = np.asarray(recvspec[0]).itemsize
            total = int(np.asarray(recvspec[1]).sum()) * itemsize - sendbuf.nbytes
            self.count_received(kind, total, self.size - 1)
        else:
            self.count_sent(kind, sendbuf.nbytes)

    def Allreduce(self, sendbuf: Any, recvbuf: np.ndarray, op: Any, kind: str) -> None:  # noqa: N802
        self._timed(self.comm.Allreduce, sendbuf, recvbuf, op=op)
        self.count_sent(kind, recvbuf.nbytes)
        self.count_received(kind, recvbuf.nbytes)

    def Allgather(self, sendbuf: np.ndarray, recvbuf: np.ndarray, kind: str) -> None:  # noqa: N802
        self._timed(self.comm.Allgather, sendbuf, recvbuf)
        self.count_sent(kind, sendbuf.nbytes)
        self.count_received(kind, recvbuf.nbytes - sendbuf.nbytes)

    def Reduce(self, sendbuf: Any, recvbuf: np.ndarray | None, op: Any, root: int, kind: str) -> None:  # noqa: N802
        self._timed(self.comm.Reduce, sendbuf, recvbuf, op=op, root=root)
        if self.rank == root:
            self.count_received(kind, recvbuf.nbytes * (self.size - 1), self.size - 1)
        else:
            self.count_sent(kind, np.asarray(sendbuf).nbytes)

    def Barrier(self) -> None:  # noqa: N802
        self._timed(self.comm.Barrier)

    def wait(self, request: Any) -> Any:
        """Complete one nonblocking request, timing the wait."""
        return self._timed(request.Wait)

    def waitany(self, requests: list[Any]) -> int:
        """Block until one of ``requests`` completes; its index (timed as MPI wait)."""
        from mpi4py import MPI

        return self._timed(MPI.Request.Waitany, requests)

    def stats(self) -> dict[str, Any]:
        """Counters for the run summary."""
        return {"mpi_wait_s": self.wait_s, "sent": self.sent, "received": self.received}
