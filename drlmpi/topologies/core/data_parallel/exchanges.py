"""Gradient exchanges of the data-parallel topologies, and the parameter checks they share.

Each :class:`~drlmpi.algos.exchange.GradientExchange` here moves ONE flat buffer per network per
update; the topology hands it to the learner, and every update calls it between the network's
backward and its step:

* :class:`AllreduceExchange` - ``Allreduce(SUM)`` of the flat gradients, divide by N, step locally.
* :class:`AllgatherExchange` - ``Allgather`` every rank's gradients, sum them in rank order,
  divide by N, step locally. Every rank adds the same numbers in the same order, so parameters
  stay bit-identical whatever order the MPI library reduces in (the TD3 slides' proposal).
* :class:`WorkerExchange` - a parameter server's worker: ``Reduce(SUM)`` gradients to the
  server, then receive the server's parameters with ``Bcast``; the worker's optimizer never steps.
* :class:`ServerExchange` - the server: ``Reduce(SUM)`` the workers' gradients, average, step,
  ``Bcast`` the parameters. The server computes no gradients (its updates follow the
  algorithm's ``sync_schedule`` and run its target-network hooks:
  :meth:`~drlmpi.algos.base.Algorithm.run_updates`).

NCCL and gloo averaging (:class:`~drlmpi.topologies.core.data_parallel.backend.DistExchange`) is
in :mod:`~drlmpi.topologies.core.data_parallel.backend`.
"""

from __future__ import annotations

import numpy as np

from drlmpi.algos.base import Algorithm
from drlmpi.algos.exchange import GradientExchange
from drlmpi.algos.params import ParamGroup
from drlmpi.mpi.timed import TimedComm
from drlmpi.roles.stopping import TrainingClock


class MPIExchange(GradientExchange):
    """An exchange through this run's (timed) MPI communicator."""

    def __init__(self, comm: TimedComm) -> None:
        self.comm = comm


class AllreduceExchange(MPIExchange):
    """Average gradients with one ``Allreduce`` per network, then step on every rank."""

    def exchange(self, name: str, group: ParamGroup) -> None:
        from mpi4py import MPI

        grads = group.flat.grads_numpy()
        self.comm.Allreduce(MPI.IN_PLACE, grads, op=MPI.SUM, kind="gradients")
        grads /= self.comm.size
        group.flat.load_grads(grads)


class AllgatherExchange(MPIExchange):
    """Gather every rank's gradients with one ``Allgather`` per network, average in rank order."""

    def __init__(self, comm: TimedComm) -> None:
        super().__init__(comm)
        self._buffers: dict[str, np.ndarray] = {}

    def exchange(self, name: str, group: ParamGroup) -> None:
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


class WorkerExchange(MPIExchange):
    """A parameter server's worker: send gradients to the server, receive the parameters it
    computed."""

    steps_locally = False

    def __init__(self, comm: TimedComm, server: int = 0) -> None:
        super().__init__(comm)
        self.server = server

    def exchange(self, name: str, group: ParamGroup) -> None:
        from mpi4py import MPI

        self.comm.Reduce(group.flat.grads_numpy(), None, op=MPI.SUM, root=self.server,
                         kind="gradients")
        params = group.flat.params_numpy()
        self.comm.Bcast(params, root=self.server, kind="weights")
        group.flat.load_params(params)


class ServerExchange(MPIExchange):
    """The parameter server: sum the workers' gradients (``Reduce``), average, step, broadcast
    the new parameters."""

    computes_gradients = False

    def __init__(self, comm: TimedComm, workers: int) -> None:
        super().__init__(comm)
        self.workers = workers

    def exchange(self, name: str, group: ParamGroup) -> None:
        from mpi4py import MPI

        grads = group.flat.grads_numpy()
        grads[:] = 0.0
        self.comm.Reduce(MPI.IN_PLACE, grads, op=MPI.SUM, root=self.comm.rank, kind="gradients")
        grads /= self.workers
        group.flat.load_grads(grads)

    def after_step(self, name: str, group: ParamGroup) -> None:
        self.comm.Bcast(group.flat.params_numpy(), root=self.comm.rank, kind="weights")


def broadcast_all_params(comm: TimedComm, algo: Algorithm, root: int = 0) -> None:
    """Make every group's parameters equal to ``root``'s (start of a data-parallel run).

    Data-parallel ranks build their networks from the same seed, so this is a guarantee rather
    than a correction (target networks, built from the same seed, match as well).
    """
    for group in algo.groups.values():
        params = group.flat.params_numpy()
        comm.Bcast(params, root=root, kind="weights")
        group.flat.load_params(params)


def start_together(comm: TimedComm, algo: Algorithm, clock: TrainingClock, root: int = 0) -> None:
    """The start of a data-parallel run: every rank takes ``root``'s parameters
    (:func:`broadcast_all_params`), then all meet once - an all-reduce of one number, since a
    broadcast's root may leave before the others arrive - and training starts there
    (``clock.starts_now()``): the wait for the
    slowest rank to build its network is start-up. On one GPU, sixteen ranks make their CUDA
    contexts one after another."""
    from mpi4py import MPI

    broadcast_all_params(comm, algo, root=root)
    comm.Allreduce(MPI.IN_PLACE, np.zeros(1), op=MPI.SUM, kind="start")
    clock.starts_now()


def param_checksums(algo: Algorithm) -> np.ndarray:
    """One float64 checksum per network of ``algo`` (its flat parameters)."""
    return np.array([g.flat.checksum() for g in algo.groups.values()], dtype=np.float64)


def verify_identical(table: np.ndarray, algo: Algorithm) -> np.ndarray:
    """``table`` (one row of :func:`param_checksums` per rank), after raising ``RuntimeError`` if
    any row differs from the first."""
    if not np.all(table == table[0]):
        raise RuntimeError(f"parameters diverged across ranks after {algo.updates} updates: checksums "
                           f"per rank {table.tolist()}")
    return table


def check_identical_params(comm: TimedComm, algo: Algorithm) -> np.ndarray:
    """Raise ``RuntimeError`` on every rank if any rank's parameters differ from the others'.

    Returns the ``(size, groups)`` table of checksums (identical rows), gathered through MPI.
    """
    local = param_checksums(algo)
    gathered = np.empty((comm.size, local.size), dtype=np.float64)
    comm.Allgather(local, gathered, kind="checksums")
    return verify_identical(gathered, algo)
