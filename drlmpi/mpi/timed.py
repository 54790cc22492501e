""":class:`TimedComm` wraps an mpi4py communicator: EVERY MPI call a topology makes goes through it,
so the wall time spent inside MPI (the "MPI wait share" of the run summary) and the messages
and bytes moved, by payload kind, are measured, never hand-counted. It also tells the rank's
watchdog (:mod:`drlmpi.job_control.watchdog`) what the rank waits in and when an operation completed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from drlmpi.job_control.progress import PROGRESS, ProgressClock


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

    ``progress`` is the rank's :class:`~drlmpi.job_control.progress.ProgressClock`: a call that may wait for
    other ranks shows as waiting in it while it runs and is progress when it returns; a poll
    (``test``, ``testsome``) is progress only when it completed a request.
    """

    def __init__(self, comm: Any, progress: ProgressClock = PROGRESS) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm
        self.progress = progress  # the watchdog's view of this rank (drlmpi.job_control.watchdog)
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

    def allgather_objects(self, obj: Any, kind: str) -> list[Any]:
        """Pickling ``allgather`` of small Python objects (once per run)."""
        return self._blocking(("allgather %s", kind), "allgather", self.comm.allgather, obj)

    def bcast_object(self, obj: Any, root: int, kind: str) -> Any:
        """Pickling ``bcast`` of a small Python object (once per run)."""
        return self._blocking(("bcast %s (root %d)", kind, root), "bcast", self.comm.bcast, obj, root=root)

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

    def add_wait(self, seconds: float) -> None:
        """Count ``seconds`` of waiting this rank did on its other communicators (a group's, the
        learners') as this one's: a rank's MPI wait is over all of them."""
        self.wait_s += seconds

    def stats(self) -> dict[str, Any]:
        """Counters for the run summary."""
        return {"mpi_wait_s": self.wait_s, "sent": self.sent, "received": self.received,
                "mpi_calls": {k: [int(v[0]), round(v[1], 6)] for k, v in sorted(self.calls.items())}}
