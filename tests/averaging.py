"""Several ranks in one process, for tests of gradient averaging: each rank is a thread.

* :class:`ThreadComm` - the mpi4py buffer calls the exchanges make (``Allreduce``,
  ``Allgather``, ``Bcast``, ``Reduce``, ``Split``, ``Split_type``) among the threads of one
  :class:`ThreadWorld`; wrap it in :class:`~drlmpi.mpi.timed.TimedComm` as a rank's ``MPI.COMM_WORLD``
  would be. Reductions apply the MPI op itself (``Op.Reduce_local``), folded in rank order.
* :class:`ThreadedDist` - ``torch.distributed``'s default process group, one per thread: a real
  gloo group whose members are the threads (installed with pytest's ``monkeypatch``).
* :func:`run_ranks` - call ``fn(rank)`` on ``size`` threads, return the results in rank order and
  re-raise the first failure; a collective that some rank never enters times out instead of
  hanging the test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

TIMEOUT_S = 10.0


class ThreadWorld:
    """The shared state of one communicator's ranks (threads)."""

    def __init__(self, size: int, timeout: float = TIMEOUT_S) -> None:
        self.size = size
        self.barrier = threading.Barrier(size, timeout=timeout)
        self.slots: list[Any] = [None] * size
        self.lock = threading.Lock()
        self.children: dict[tuple[int, Any], ThreadWorld] = {}  # (split call, color) -> world
        self.timeout = timeout

    def comms(self) -> list[ThreadComm]:
        return [ThreadComm(self, rank) for rank in range(self.size)]


class ThreadComm:
    """Rank ``rank`` of ``world``, with mpi4py's signatures."""

    def __init__(self, world: ThreadWorld, rank: int) -> None:
        self.world = world
        self.rank = rank
        self.splits = 0

    def Get_rank(self) -> int:  # noqa: N802 (mpi4py's names)
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.world.size

    def Free(self) -> None:  # noqa: N802
        """Nothing to free."""

    def _everyone(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order (a collective)."""
        world = self.world
        world.slots[self.rank] = value
        world.barrier.wait()
        values = list(world.slots)
        world.barrier.wait()  # all have read before the slots are reused
        return values

    @staticmethod
    def _reduce(values: list[np.ndarray], op: Any) -> np.ndarray:
        total = values[0].copy()
        for value in values[1:]:
            op.Reduce_local(value, total)  # total = value op total
        return total

    def Allreduce(self, sendbuf: Any, recvbuf: np.ndarray, op: Any = MPI.SUM) -> None:  # noqa: N802
        mine = np.array(recvbuf if sendbuf is MPI.IN_PLACE else sendbuf, copy=True)
        recvbuf[...] = self._reduce(self._everyone(mine), op)

    def Allgather(self, sendbuf: np.ndarray, recvbuf: np.ndarray) -> None:  # noqa: N802
        rows = self._everyone(np.array(sendbuf, copy=True).reshape(-1))
        recvbuf.reshape(self.world.size, -1)[...] = np.stack(rows)

    def Bcast(self, buf: np.ndarray, root: int = 0) -> None:  # noqa: N802
        buf[...] = self._everyone(np.array(buf, copy=True))[root]

    def Reduce(self, sendbuf: Any, recvbuf: np.ndarray | None, op: Any = MPI.SUM, root: int = 0) -> None:  # noqa: N802
        mine = np.array(recvbuf if sendbuf is MPI.IN_PLACE else sendbuf, copy=True)
        values = self._everyone(mine)
        if self.rank == root:
            recvbuf[...] = self._reduce(values, op)

    def Split(self, color: Any, key: int = 0) -> Any:  # noqa: N802
        """The communicator of the ranks of this ``color`` ordered by ``(key, rank)``;
        ``MPI.COMM_NULL`` for ``MPI.UNDEFINED``."""
        self.splits += 1
        entries = self._everyone((color, key))
        if color == MPI.UNDEFINED:
            return MPI.COMM_NULL
        members = sorted((k, r) for r, (c, k) in enumerate(entries) if c == color)
        with self.world.lock:
            child = self.world.children.setdefault(
                (self.splits, color), ThreadWorld(len(members), self.world.timeout))
        return ThreadComm(child, [r for _, r in members].index(self.rank))

    def Split_type(self, split_type: Any, key: int = 0) -> Any:  # noqa: N802
        """Every rank on one node."""
        return self.Split(0, self.rank)


class ThreadedDist:
    """``torch.distributed``'s default process group per thread: ``init_process_group`` (gloo,
    with the store it is given) builds a real ``ProcessGroupGloo`` for the calling thread, and
    ``all_reduce`` / ``broadcast`` / ``all_gather`` run on the calling thread's group."""

    def __init__(self) -> None:
        self.local = threading.local()

    def install(self, monkeypatch: Any) -> ThreadedDist:
        for name in ("init_process_group", "all_reduce", "broadcast", "all_gather"):
            monkeypatch.setattr(dist, name, getattr(self, name))
        return self

    def init_process_group(self, backend: str, *, store: Any, rank: int, world_size: int,
                           timeout: timedelta = timedelta(seconds=TIMEOUT_S), **kwargs: Any) -> None:
        assert backend == "gloo", backend
        self.local.group = dist.ProcessGroupGloo(dist.PrefixStore("threads", store), rank, world_size,
                                                 timeout)

    def all_reduce(self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None,
                   async_op: bool = False) -> None:
        options = dist.AllreduceOptions()
        options.reduceOp = op
        self.local.group.allreduce([tensor], options).wait()

    def broadcast(self, tensor: torch.Tensor, src: int, group: Any = None, async_op: bool = False) -> None:
        options = dist.BroadcastOptions()
        options.rootRank, options.rootTensor = src, 0
        self.local.group.broadcast([tensor], options).wait()

    def all_gather(self, tensor_list: list[torch.Tensor], tensor: torch.Tensor, group: Any = None,
                   async_op: bool = False) -> None:
        self.local.group.allgather([tensor_list], [tensor]).wait()


def run_ranks(size: int, fn: Callable[[int], Any], timeout: float = TIMEOUT_S) -> list[Any]:
    """``[fn(0), ..., fn(size - 1)]``, each called on a thread of its own."""
    results: list[Any] = [None] * size
    errors: list[tuple[int, BaseException]] = []

    def target(rank: int) -> None:
        try:
            results[rank] = fn(rank)
        except BaseException as exc:  # noqa: BLE001 (re-raised below, with its rank)
            errors.append((rank, exc))

    threads = [threading.Thread(target=target, args=(r,), daemon=True) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    if errors:
        rank, exc = min(errors, key=lambda e: isinstance(e[1], threading.BrokenBarrierError))
        raise AssertionError(f"rank {rank} failed: {exc!r}") from exc
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    assert not stuck, f"rank(s) {stuck} still running after {timeout} s"
    return results


def rank_gradients(size: int, n: int, seed: int = 0) -> np.ndarray:
    """``(size, n)`` float32 gradients, one row per rank: row r is ``(r + 1)**2 * base + r * offset``
    with random ``base`` and ``offset``, so the mean is no rank's row and differs from the sum,
    the first row and the last row in every element."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 1.5, n) * rng.choice([-1.0, 1.0], n)
    offset = rng.uniform(0.1, 0.3, n)
    rows = np.stack([(r + 1) ** 2 * base + r * offset for r in range(size)]).astype(np.float32)
    mean = rows.astype(np.float64).mean(axis=0)
    for other in (rows.astype(np.float64).sum(axis=0), *rows.astype(np.float64)):
        assert np.all(np.abs(other - mean) > 1e-3 * np.abs(mean)), "rows too close to their mean"
    return rows
