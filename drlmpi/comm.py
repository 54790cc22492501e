"""Communication primitives shared by every topology.

Nothing here decides *who* talks to whom (that is the topologies' job); this module holds the
pieces every topology needs:

* :class:`FlatParams` keeps a network's parameters (and gradients) in ONE contiguous float32
  buffer, so a weight broadcast or a gradient all-reduce is one message that writes straight into
  the model.
* :class:`ExperienceLayout` is the column layout of packed experience: one 2-D float32 array per
  message, known to both ends.
* :class:`TimedComm` wraps an mpi4py communicator: EVERY MPI call a topology makes goes through
  it, so the wall time spent inside MPI (the "MPI wait share" of the run summary) and the
  messages and bytes moved, by payload kind, are measured, never hand-counted. It also tells the
  rank's watchdog (:mod:`drlmpi.watchdog`) what the rank waits in and when an operation completed.
* :class:`Tag` names the point-to-point message tags, and the ``IntEnum`` wire formats below
  (:class:`Control`, :class:`RoundCounts`, :class:`ChunkHeader`, :class:`WeightsHeader`,
  :class:`CreditMessage`) name the fields of every small integer message and header, so code
  reads ``control[Control.STOP]``, never ``control[0]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import torch
from torch import nn

from drlmpi.watchdog import PROGRESS, ProgressClock


class Tag(IntEnum):
    """Point-to-point message tags (one per message kind, so a stray message never matches)."""

    EXPERIENCE = 12
    WEIGHTS = 21
    CONTROL = 22
    DONE = 41


# -- wire formats: the fields of int64 messages and headers ------------------------------------
class Control(IntEnum):
    """The learner's round message to simulators / workers (int64, ``Tag.CONTROL`` or ``Bcast``).

    ``N_UPDATES`` is the number of updates every worker runs this round (parameter server);
    0 elsewhere. ``CHECKPOINT``: every rank holding learning state saves its part of a
    checkpoint at the end of this round (collective topologies; see drlmpi.checkpoint).
    """

    STOP = 0
    ENV_STEPS = 1  # job-wide environment steps so far (drives exploration schedules)
    UPDATES = 2  # learner updates so far
    N_UPDATES = 3
    CHECKPOINT = 4


class RoundCounts(IntEnum):
    """One row per rank of a data-parallel round's ``Allgather`` (int64)."""

    NEW_STEPS = 0  # environment steps this rank collected this round
    UPDATES_DUE = 1  # updates this rank's stored data entitles (all ranks run the minimum)
    EPISODES = 2  # episodes this rank finished this round


class ChunkHeader(IntEnum):
    """Header of an asynchronous experience chunk (int64, before the float32 rows)."""

    POLICY_VERSION = 0  # learner updates of the weights that acted
    ROWS = 1  # valid rows in the fixed-size payload
    SEQUENCE = 2  # chunks this simulator sent before this one
    SIMULATOR_STEPS = 3  # this simulator's own environment steps so far


class WeightsHeader(IntEnum):
    """Header of an asynchronous weights publication (int64, before the float32 parameters)."""

    ENV_STEPS = 0  # job-wide environment steps at publication
    VERSION = 1  # learner updates at publication (the chunk header's POLICY_VERSION)


class CreditMessage(IntEnum):
    """The asynchronous learner's control message to one simulator (int64)."""

    KIND = 0  # CREDIT or STOP below
    VALUE = 1  # CREDIT: chunks the simulator may have sent in total; STOP: weights messages sent


CREDIT, STOP = 1, 2  # CreditMessage.KIND values


def int64_message(fields: type[IntEnum], **values: int) -> np.ndarray:
    """A zeroed int64 message with one slot per field of ``fields``, ``values`` filled in by
    lower-case field name (``int64_message(Control, stop=1)``)."""
    out = np.zeros(len(fields), dtype=np.int64)
    for name, value in values.items():
        out[fields[name.upper()]] = int(value)
    return out


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
        self.numel = total
        self._host: dict[str, torch.Tensor] = {}  # pinned host mirrors (device buffers only)

    def _to_host(self, name: str, tensor: torch.Tensor) -> np.ndarray:
        """One device-to-host copy of ``tensor`` into a preallocated pinned buffer, returned as
        numpy (the same array every call: read or copy it before the next call)."""
        host = self._host.get(name)
        if host is None:
            host = self._host[name] = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor.detach())  # blocking: the values are there when this returns
        return host.numpy()

    def zero_grad(self) -> None:
        """Zero the flat gradient buffer (keeps the views; never sets ``p.grad = None``)."""
        self.grads.zero_()

    def params_numpy(self) -> np.ndarray:
        """The parameters as a float32 numpy array: a view on the CPU; from an accelerator, one
        copy into a preallocated pinned host buffer (reused by every call, no allocation)."""
        if self.params.device.type == "cpu":
            return self.params.numpy()
        return self._to_host("params", self.params)

    def grads_numpy(self) -> np.ndarray:
        """The gradients as a float32 numpy array: a view on the CPU; from an accelerator, one
        copy into a preallocated pinned host buffer (reused by every call)."""
        if self.grads.device.type == "cpu":
            return self.grads.numpy()
        return self._to_host("grads", self.grads)

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

    Image observations (``obs_dtype="uint8"``, ``obs_shape`` the image's shape) are stored as
    their bytes: the ``obs`` and ``next_obs`` columns hold ``ceil(pixels / 4)`` float32 slots
    whose bit patterns ARE the uint8 pixels (zero-padded to a whole slot), so an 84x84x4 frame
    stack costs 28,224 bytes per column instead of 112,896 as floats. Rows are only ever
    copied (wire, replay, rollouts: ``np.concatenate``, MPI, ``index_select``, ``torch.cat``),
    never computed on as floats, so every bit survives; :meth:`put_obs` packs,
    :meth:`obs_array` and :meth:`obs_tensor` unpack (uint8, shaped), and image encoders
    (:mod:`drlmpi.algos.encoders`) convert to float on the learner's device.
    """

    obs_dim: int
    action_dim: int
    extras: tuple[tuple[str, int], ...] = ()
    obs_shape: tuple[int, ...] = ()
    obs_dtype: str = "float32"
    slices: dict[str, slice] = field(init=False, compare=False, repr=False)
    width: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.obs_dtype not in ("float32", "uint8"):
            raise ValueError(f"obs_dtype must be float32 or uint8, got {self.obs_dtype!r}")
        if not self.obs_shape:
            object.__setattr__(self, "obs_shape", (int(self.obs_dim),))
        obs_width = self.obs_slots
        widths = [
            ("obs", obs_width),
            ("action", self.action_dim),
            ("reward", 1),
            ("next_obs", obs_width),
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

    @property
    def packed(self) -> bool:
        """Whether observations are stored as packed uint8 bytes."""
        return self.obs_dtype == "uint8"

    @property
    def obs_slots(self) -> int:
        """float32 slots one observation column takes."""
        return -(-self.obs_dim // 4) if self.packed else self.obs_dim

    @property
    def row_bytes(self) -> int:
        """Bytes of one packed row (on the wire and in storage)."""
        return 4 * self.width

    def column(self, rows: np.ndarray, name: str) -> np.ndarray:
        """The columns of ``name`` in ``rows`` (shape ``(n, width_of_name)``, a view)."""
        return rows[:, self.slices[name]]

    def empty(self, n: int) -> np.ndarray:
        """A zeroed ``(n, width)`` float32 array."""
        return np.zeros((n, self.width), dtype=np.float32)

    def put_obs(self, rows: np.ndarray, name: str, obs: np.ndarray) -> None:
        """Write observations ``(n, *obs_shape)`` into column ``name`` (``obs``/``next_obs``) of
        ``rows`` ``(n, width)``: as floats, or as their bytes for images."""
        cols = rows[:, self.slices[name]]
        flat = np.asarray(obs).reshape(rows.shape[0], -1)
        if self.packed:
            cols.view(np.uint8)[:, : self.obs_dim] = flat
        else:
            cols[:] = flat

    def obs_array(self, rows: np.ndarray, name: str = "obs") -> np.ndarray:
        """Column ``name``'s observations ``(n, *obs_shape)``: float32, or uint8 images (a
        view where the layout allows it)."""
        cols = rows[:, self.slices[name]]
        if self.packed:
            cols = cols.view(np.uint8)[:, : self.obs_dim]
        return cols.reshape(rows.shape[0], *self.obs_shape)

    def obs_tensor(self, rows: torch.Tensor, name: str = "obs") -> torch.Tensor:
        """:meth:`obs_array` for a tensor of rows, on its device (no host synchronisation)."""
        return unpack_obs(rows[:, self.slices[name]], self)


def unpack_obs(cols: torch.Tensor, layout: ExperienceLayout) -> torch.Tensor:
    """Observation columns (``(n, obs_slots)`` float32 as stored) as ``(n, *obs_shape)``:
    unchanged for float observations, the uint8 pixels (a view of the same memory as far as
    strides allow) for images. Already unpacked uint8 input is only reshaped."""
    n = cols.shape[0]
    if layout.packed and cols.dtype != torch.uint8:
        cols = cols.view(torch.uint8)[:, : layout.obs_dim]
    return cols.reshape(n, *layout.obs_shape)


class PackedMessage:
    """An int64 header and a float32 payload in ONE contiguous byte buffer: one message.

    Used where a receive must be posted before the sender's counts are known (the asynchronous
    topology's pre-posted ``Irecv``): the layout is fixed, the header (named by an ``IntEnum``
    wire format) says what the payload is.
    """

    def __init__(self, header: type[IntEnum], payload_shape: tuple[int, ...]) -> None:
        header_bytes = 8 * len(header)
        payload_len = int(np.prod(payload_shape))
        self.buffer = np.zeros(header_bytes + 4 * payload_len, dtype=np.uint8)
        self.header = self.buffer[:header_bytes].view(np.int64)
        self.payload = self.buffer[header_bytes:].view(np.float32).reshape(payload_shape)


class Request:
    """A nonblocking operation started through :class:`TimedComm` (``Isend`` / ``Irecv``).

    Complete it only through the communicator (``wait``, ``test``, ``testsome``, ``waitany``,
    ``cancel``), which times the call and, for a receive, counts the bytes that arrived.
    """

    __slots__ = ("mpi", "kind", "receive", "buffer", "peer")

    def __init__(self, mpi_request: Any, kind: str, receive: bool, buffer: np.ndarray,
                 peer: int = -1) -> None:
        self.mpi = mpi_request
        self.kind = kind
        self.receive = receive
        self.buffer = buffer
        self.peer = peer

    def __str__(self) -> str:
        return (f"Irecv {self.kind} from rank {self.peer}" if self.receive
                else f"Isend {self.kind} to rank {self.peer}")


class _Requests:
    """Several requests, described only if the watchdog reports them (``2 x Irecv ...``)."""

    __slots__ = ("requests",)

    def __init__(self, requests: list[Request]) -> None:
        self.requests = requests

    def __str__(self) -> str:
        counts: dict[str, int] = {}
        for request in self.requests:
            text = str(request)
            counts[text] = counts.get(text, 0) + 1
        return ", ".join(text if n == 1 else f"{n} x {text}" for text, n in counts.items())


class TimedComm:
    """An mpi4py communicator whose every call is timed and counted, for the run summary.

    Topologies make ALL their MPI calls through this class (buffer methods on the hot path,
    the pickling ``gather_objects`` once per run). ``wait_s`` is the wall time spent inside
    MPI calls, which for blocking calls is mostly waiting for the peer; ``calls`` holds
    ``[count, seconds]`` per MPI function. Every call names the ``kind`` of payload
    (``"experience"``, ``"weights"``, ``"control"``, ``"gradients"``...) so the summary can say
    exactly what crossed the wire: ``sent[kind]`` / ``received[kind]`` hold ``[messages, bytes]``
    as seen by this rank. Receives count the bytes that actually arrived (the status of the
    message), sends the bytes handed to MPI.

    ``progress`` is the rank's :class:`~drlmpi.watchdog.ProgressClock`: a call that may wait for
    other ranks shows as waiting in it while it runs and is progress when it returns; a poll
    (``test``, ``testsome``) is progress only when it completed a request.
    """

    def __init__(self, comm: Any, progress: ProgressClock = PROGRESS) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm
        self.progress = progress  # the watchdog's view of this rank (drlmpi.watchdog)
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self.wait_s = 0.0
        self.calls: dict[str, list[float]] = {}
        self.sent: dict[str, list[int]] = {}
        self.received: dict[str, list[int]] = {}
        self._status = MPI.Status()

    # -- bookkeeping ------------------------------------------------------------------------
    def _timed(self, name: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            dt = time.perf_counter() - t0
            self.wait_s += dt
            entry = self.calls.get(name)
            if entry is None:
                self.calls[name] = [1, dt]
            else:
                entry[0] += 1
                entry[1] += dt

    def _blocking(self, what: tuple[Any, ...], name: str, fn, *args, **kwargs):
        """A call that may wait for other ranks: the progress clock shows it as waiting in
        ``what`` (a ``%``-format and its arguments) and records progress when it returns."""
        progress = self.progress
        progress.wait(*what)
        result = self._timed(name, fn, *args, **kwargs)
        progress.done()
        return result

    def _count(self, table: dict[str, list[int]], kind: str, nbytes: int, messages: int) -> None:
        entry = table.get(kind)
        if entry is None:
            table[kind] = [messages, int(nbytes)]
        else:
            entry[0] += messages
            entry[1] += int(nbytes)

    def _received_bytes(self, status: Any) -> int:
        return status.Get_count(self._MPI.BYTE)

    # -- blocking point-to-point --------------------------------------------------------------
    def Send(self, buf: np.ndarray, dest: int, tag: int, kind: str) -> None:  # noqa: N802 (MPI name)
        self._count(self.sent, kind, buf.nbytes, 1)
        self._blocking(("Send %s to rank %d", kind, dest), "Send", self.comm.Send, buf, dest=dest, tag=tag)

    def Recv(self, buf: np.ndarray, source: int, tag: int, kind: str) -> None:  # noqa: N802
        self._blocking(("Recv %s from rank %d", kind, source), "Recv", self.comm.Recv, buf, source=source,
                       tag=tag, status=self._status)
        self._count(self.received, kind, self._received_bytes(self._status), 1)

    def probe_count(self, source: int, tag: int, itemsize: int) -> int:
        """Block until a message from ``source`` with ``tag`` is ready; its size in items of
        ``itemsize`` bytes (the receive itself is counted by :meth:`Recv`)."""
        self._blocking(("Probe for tag %d from rank %d", tag, source), "Probe", self.comm.Probe,
                       source=source, tag=tag, status=self._status)
        nbytes = self._received_bytes(self._status)
        if nbytes % itemsize:
            raise RuntimeError(f"a message of {nbytes} bytes is not a whole number of "
                               f"{itemsize}-byte items (tag {tag} from rank {source})")
        return nbytes // itemsize

    # -- collectives --------------------------------------------------------------------------
    def Bcast(self, buf: np.ndarray, root: int, kind: str) -> None:  # noqa: N802
        self._blocking(("Bcast %s (root %d)", kind, root), "Bcast", self.comm.Bcast, buf, root=root)
        if self.rank == root:
            self._count(self.sent, kind, buf.nbytes * (self.size - 1), self.size - 1)
        else:
            self._count(self.received, kind, buf.nbytes, 1)

    def Gather(self, sendbuf: np.ndarray, recvbuf: np.ndarray | None, root: int, kind: str) -> None:  # noqa: N802
        self._blocking(("Gather %s (root %d)", kind, root), "Gather", self.comm.Gather, sendbuf, recvbuf,
                       root=root)
        if self.rank == root:
            self._count(self.received, kind, sendbuf.nbytes * (self.size - 1), self.size - 1)
        else:
            self._count(self.sent, kind, sendbuf.nbytes, 1)

    def Gatherv(self, sendbuf: np.ndarray, recvspec: Any, root: int, kind: str) -> None:  # noqa: N802
        self._blocking(("Gatherv %s (root %d)", kind, root), "Gatherv", self.comm.Gatherv, sendbuf, recvspec,
                       root=root)
        if self.rank == root:
            itemsize = np.asarray(recvspec[0]).itemsize
            total = int(np.asarray(recvspec[1]).sum()) * itemsize - sendbuf.nbytes
            self._count(self.received, kind, total, self.size - 1)
        else:
            self._count(self.sent, kind, sendbuf.nbytes, 1)

    def Allreduce(self, sendbuf: Any, recvbuf: np.ndarray, op: Any, kind: str) -> None:  # noqa: N802
        self._blocking(("Allreduce %s", kind), "Allreduce", self.comm.Allreduce, sendbuf, recvbuf, op=op)
        self._count(self.sent, kind, recvbuf.nbytes, 1)
        self._count(self.received, kind, recvbuf.nbytes, 1)

    def Allgather(self, sendbuf: np.ndarray, recvbuf: np.ndarray, kind: str) -> None:  # noqa: N802
        self._blocking(("Allgather %s", kind), "Allgather", self.comm.Allgather, sendbuf, recvbuf)
        self._count(self.sent, kind, sendbuf.nbytes, 1)
        self._count(self.received, kind, recvbuf.nbytes - sendbuf.nbytes, self.size - 1)

    def Reduce(self, sendbuf: Any, recvbuf: np.ndarray | None, op: Any, root: int, kind: str) -> None:  # noqa: N802
        self._blocking(("Reduce %s (root %d)", kind, root), "Reduce", self.comm.Reduce, sendbuf, recvbuf,
                       op=op, root=root)
        if self.rank == root:
            self._count(self.received, kind, recvbuf.nbytes * (self.size - 1), self.size - 1)
        else:
            self._count(self.sent, kind, np.asarray(sendbuf).nbytes, 1)

    def Split(self, color: int, key: int) -> Any:  # noqa: N802
        """``Comm.Split`` (a collective): the raw communicator of this rank's part, or
        ``MPI.COMM_NULL`` for ``color=MPI.UNDEFINED``; wrap it in a :class:`TimedComm`."""
        return self._blocking(("Split (color %s)", color), "Split", self.comm.Split, color, key)

    def split_node(self) -> Any:
        """``Comm.Split_type(COMM_TYPE_SHARED)`` (a collective): the raw communicator of this
        rank's node."""
        return self._blocking(("Split_type (node)",), "Split_type", self.comm.Split_type,
                              self._MPI.COMM_TYPE_SHARED)

    def gather_objects(self, obj: Any, root: int, kind: str) -> list[Any] | None:
        """Pickling ``gather`` of small Python objects (once per run: per-rank reports)."""
        return self._blocking(("gather %s (root %d)", kind, root), "gather", self.comm.gather, obj, root=root)

    # -- nonblocking point-to-point -----------------------------------------------------------
    def Isend(self, buf: np.ndarray, dest: int, tag: int, kind: str) -> Request:  # noqa: N802
        self._count(self.sent, kind, buf.nbytes, 1)
        return Request(self._timed("Isend", self.comm.Isend, buf, dest=dest, tag=tag), kind, False, buf,
                       dest)

    def Irecv(self, buf: np.ndarray, source: int, tag: int, kind: str) -> Request:  # noqa: N802
        """Post a receive; its bytes are counted when it completes (``wait``/``test``/...)."""
        return Request(self._timed("Irecv", self.comm.Irecv, buf, source=source, tag=tag), kind, True, buf,
                       source)

    def _completed(self, request: Request, status: Any) -> None:
        if request.receive and not status.Is_cancelled():
            self._count(self.received, request.kind, self._received_bytes(status), 1)

    def wait(self, request: Request) -> None:
        """Block until ``request`` completes."""
        self._blocking(("Wait (%s)", request), "Wait", request.mpi.Wait, self._status)
        self._completed(request, self._status)

    def test(self, request: Request) -> bool:
        """Whether ``request`` has completed (a completed request is not tested again).

        Polls are shown to the watchdog as waiting; only one that completed is progress."""
        self.progress.wait("Test (%s)", request)
        done = self._timed("Test", request.mpi.Test, self._status)
        if done:
            self.progress.done()
            self._completed(request, self._status)
        return done

    def testsome(self, requests: list[Request]) -> list[int]:
        """Indices of the ``requests`` that completed now (the others stay pending)."""
        statuses: list[Any] = []
        self.progress.wait("Testsome (%s)", _Requests(requests))
        done = self._timed("Testsome", self._MPI.Request.Testsome, [r.mpi for r in requests], statuses)
        if not done:  # None (no active request) or []: not progress
            return []
        self.progress.done()
        for index, status in zip(done, statuses):
            self._completed(requests[index], status)
        return list(done)

    def waitany(self, requests: list[Request]) -> int:
        """Block until one of ``requests`` completes; its index."""
        index = self._blocking(("Waitany (%s)", _Requests(requests)), "Waitany", self._MPI.Request.Waitany,
                               [r.mpi for r in requests], self._status)
        if index == self._MPI.UNDEFINED:
            raise RuntimeError("waitany on requests none of which is active")
        self._completed(requests[index], self._status)
        return index

    def cancel(self, request: Request) -> None:
        """Cancel a pending request and complete it (a cancelled receive counts no bytes; one
        that completed first is counted)."""
        self._timed("Cancel", request.mpi.Cancel)
        self.wait(request)

    def free(self) -> None:
        """Free the underlying communicator (end of the run)."""
        self.comm.Free()

    def stats(self) -> dict[str, Any]:
        """Counters for the run summary."""
        return {"mpi_wait_s": self.wait_s, "sent": self.sent, "received": self.received,
                "mpi_calls": {k: [int(v[0]), round(v[1], 6)] for k, v in sorted(self.calls.items())}}
