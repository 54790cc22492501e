"""Gradient synchronisation and data-parallel rounds shared by ``allgather`` and star's
parameter-server mode (``topology.payload=gradients``).

Each :data:`~drlmpi.algos.base.GradSync` here moves ONE flat buffer per network per update:

* :class:`AllreduceSync` - ``Allreduce(SUM)`` of the flat gradients, divide by N, step locally.
* :class:`AllgatherSync` - ``Allgather`` every rank's gradients, sum them in rank order, divide by
  N, step locally. Every rank adds the same numbers in the same order, so parameters stay
  bit-identical whatever order the MPI library reduces in (the TD3 slides' proposal).
* :class:`ParameterServerSync` - a worker's side: ``Reduce(SUM)`` gradients to the server, then
  receive the server's parameters with ``Bcast``; the worker's optimizer never steps.
  :func:`serve_updates` is the server's side.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from drlmpi.algos.base import Algorithm, ParamGroup
from drlmpi.comm import TimedComm
from drlmpi.roles import Learner, episode_stats


class AllreduceSync:
    """Average gradients with one ``Allreduce`` per network, then step on every rank."""

    def __init__(self, comm: TimedComm) -> None:
        self.comm = comm

    def __call__(self, name: str, group: ParamGroup) -> None:
        from mpi4py import MPI

        grads = group.flat.grads_numpy()
        self.comm.Allreduce(MPI.IN_PLACE, grads, op=MPI.SUM, kind="gradients")
        grads /= self.comm.size
        group.flat.load_grads(grads)
        group.apply_gradients()


class AllgatherSync:
    """Gather every rank's gradients with one ``Allgather`` per network, average in rank order."""

    def __init__(self, comm: TimedComm) -> None:
        self.comm = comm
        self._buffers: dict[str, np.ndarray] = {}

    def __call__(self, name: str, group: ParamGroup) -> None:
        grads = group.flat.grads_numpy()
        gathered = self._buffers.get(name)
        if gathered is None:
            gathered = self._buffers[name] = np.empty((self.comm.size, grads.size), np.float32)
        self.comm.Allgather(grads, gathered, kind="gradients")
        total = gathered[0].copy()
        for row in gathered[1:]:  # fixed order: identical result on every rank
            total += row
        total /= self.comm.size
        group.flat.load_grads(total)
        group.apply_gradients()


class ParameterServerSync:
    """A worker's sync: send gradients to the server, receive the parameters it computed."""

    def __init__(self, comm: TimedComm, server: int = 0) -> None:
        self.comm = comm
        self.server = server

    def __call__(self, name: str, group: ParamGroup) -> None:
        from mpi4py import MPI

        self.comm.Reduce(group.flat.grads_numpy(), None, op=MPI.SUM, root=self.server,
                         kind="gradients")
        params = group.flat.params_numpy()
        self.comm.Bcast(params, root=self.server, kind="weights")
        group.flat.load_params(params)


def serve_updates(comm: TimedComm, algo: Algorithm, n_updates: int, workers: int) -> None:
    """The server's side of ``n_updates`` parameter-server updates.

    For every group an update of the workers syncs (``algo.sync_schedule``), receive the summed
    gradients, average them, step, broadcast the parameters. The server computes no gradients.
    """
    from mpi4py import MPI

    for _ in range(n_updates):
        for name in algo.sync_schedule(algo.updates):
            group = algo.groups[name]
            grads = group.flat.grads_numpy()
            grads[:] = 0.0
            comm.Reduce(MPI.IN_PLACE, grads, op=MPI.SUM, root=comm.rank, kind="gradients")
            grads /= workers
            group.flat.load_grads(grads)
            group.apply_gradients()
            comm.Bcast(group.flat.params_numpy(), root=comm.rank, kind="weights")
        algo.updates += 1


def broadcast_all_params(comm: TimedComm, algo: Algorithm, root: int = 0) -> None:
    """Make every group's parameters equal to ``root``'s (start of a data-parallel run).

    Data-parallel ranks build their networks from the same seed, so this is a guarantee rather
    than a correction (target networks, built from the same seed, match as well).
    """
    for group in algo.groups.values():
        params = group.flat.params_numpy()
        comm.Bcast(params, root=root, kind="weights")
        group.flat.load_params(params)


def check_identical_params(comm: TimedComm, algo: Algorithm) -> np.ndarray:
    """Raise ``RuntimeError`` on every rank if any rank's parameters differ from the others'.

    Returns the ``(size, groups)`` table of checksums (identical rows).
    """
    local = np.array([g.flat.checksum() for g in algo.groups.values()], dtype=np.float64)
    gathered = np.empty((comm.size, local.size), dtype=np.float64)
    comm.Allgather(local, gathered, kind="checksums")
    if not np.all(gathered == gathered[0]):
        raise RuntimeError(
            f"parameters diverged across ranks after {algo.updates} updates: checksums per rank "
            f"{gathered.tolist()}"
        )
    return gathered


def exchange_round_counts(comm: TimedComm, new_steps: int, due: int, episodes: int) -> np.ndarray:
    """``Allgather`` of ``[new_steps, updates_due, episodes]`` from every rank: ``(size, 3)``."""
    local = np.array([new_steps, due, episodes], dtype=np.int64)
    table = np.empty((comm.size, 3), dtype=np.int64)
    comm.Allgather(local, table, kind="counts")
    return table


def gather_episodes(comm: TimedComm, actor_rows: np.ndarray | None, layout: Any, counts: np.ndarray,
                    root: int, learner: Learner | None) -> None:
    """``Gatherv`` the ``[return, length]`` of episodes finished on other ranks to ``root``,
    which logs them with the rank that ran them. ``counts[r]`` = episodes rank r finished."""
    from mpi4py import MPI

    if counts.sum() == 0:
        return
    local = (episode_stats(actor_rows, layout) if actor_rows is not None and comm.rank != root
             else np.empty((0, 2), np.float32))
    if comm.rank != root:
        comm.Gatherv(local, None, root=root, kind="episodes")
        return
    sizes = counts.astype(np.int64) * 2
    sizes[root] = 0
    stats = np.empty((int(sizes.sum()) // 2, 2), dtype=np.float32)
    displacements = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    comm.Gatherv(local, [stats, sizes, displacements, MPI.FLOAT], root=root, kind="episodes")
    start = 0
    for rank, size in enumerate(sizes // 2):
        for ret, length in stats[start : start + size]:
            learner.record_episode(float(ret), int(length), rank)
        start += size
