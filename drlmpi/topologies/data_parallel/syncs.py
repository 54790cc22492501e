"""Gradient exchanges of the data-parallel topologies, and the parameter checks they share.

Each :data:`~drlmpi.algos.sync.GradSync` here moves ONE flat buffer per network per update:

* :class:`AllreduceSync` - ``Allreduce(SUM)`` of the flat gradients, divide by N, step locally.
* :class:`AllgatherSync` - ``Allgather`` every rank's gradients, sum them in rank order, divide by
  N, step locally. Every rank adds the same numbers in the same order, so parameters stay
  bit-identical whatever order the MPI library reduces in (the TD3 slides' proposal).
* :class:`ParameterServerSync` - a worker's side: ``Reduce(SUM)`` gradients to the server, then
  receive the server's parameters with ``Bcast``; the worker's optimizer never steps.
* :class:`ServerSync` - the server's side: ``Reduce(SUM)`` the workers' gradients, average,
  step, ``Bcast`` the parameters. The server computes no gradients: it runs
  :meth:`~drlmpi.roles.learner.Learner.apply_remote_updates`, which follows the algorithm's
  ``sync_schedule`` (and runs its after-update hooks: target networks).
"""

from __future__ import annotations

import numpy as np

from drlmpi.algos.base import Algorithm
from drlmpi.algos.params import ParamGroup
from drlmpi.mpi.timed import TimedComm


class ExchangeSync:
    """A :data:`~drlmpi.algos.base.GradSync` in two parts: :meth:`exchange` moves data through
    MPI (host buffers; it can never be inside a captured CUDA graph), then, if
    :attr:`steps_locally`, the group's own optimizer steps (device work, which a captured update
    records in the segment after the exchange: see :class:`~drlmpi.device.capture.CapturedUpdate`)."""

    #: whether the local optimizer steps after :meth:`exchange` (False: the exchange brought
    #: the new parameters themselves).
    steps_locally = True

    def __init__(self, comm: TimedComm) -> None:
        self.comm = comm

    def exchange(self, name: str, group: ParamGroup) -> None:
        raise NotImplementedError

    def __call__(self, name: str, group: ParamGroup) -> None:
        self.exchange(name, group)
        if self.steps_locally:
            group.apply_gradients()


class AllreduceSync(ExchangeSync):
    """Average gradients with one ``Allreduce`` per network, then step on every rank."""

    def exchange(self, name: str, group: ParamGroup) -> None:
        from mpi4py import MPI

        grads = group.flat.grads_numpy()
        self.comm.Allreduce(MPI.IN_PLACE, grads, op=MPI.SUM, kind="gradients")
        grads /= self.comm.size
        group.flat.load_grads(grads)


class AllgatherSync(ExchangeSync):
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


class ParameterServerSync(ExchangeSync):
    """A worker's sync: send gradients to the server, receive the parameters it computed."""

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


class ServerSync:
    """The parameter server's sync: sum the workers' gradients (``Reduce``), average, step,
    broadcast the new parameters."""

    def __init__(self, comm: TimedComm, workers: int) -> None:
        self.comm = comm
        self.workers = workers

    def __call__(self, name: str, group: ParamGroup) -> None:
        from mpi4py import MPI

        grads = group.flat.grads_numpy()
        grads[:] = 0.0
        self.comm.Reduce(MPI.IN_PLACE, grads, op=MPI.SUM, root=self.comm.rank, kind="gradients")
        grads /= self.workers
        group.flat.load_grads(grads)
        group.apply_gradients()
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
