"""How an update's gradients reach the optimizer: a :class:`GradientExchange`, handed by the
topology to the learner and by the learner to every update (:meth:`Algorithm.run_updates`).

An algorithm never imports MPI. Between ``backward`` and the optimizer step of each network it
trains, an update calls ``exchange(name, group)``: the exchange moves what has to cross ranks
(:meth:`~GradientExchange.exchange`: gradients averaged by ``Allreduce`` or NCCL, a parameter
server's round trip), then the group's optimizer steps (if :attr:`~GradientExchange.steps_locally`).
A single learner uses :data:`LOCAL`, which exchanges nothing. The topologies' exchanges live in
:mod:`drlmpi.topologies.core.data_parallel.exchanges`.

Every update is checked against the algorithm's ``sync_schedule`` by a
:class:`CheckedExchange` (see :meth:`Algorithm.run_updates`): ranks that reduce gradients
together must enter the same collectives in the same order, and a stray update raises
:class:`SyncScheduleError` before the collective that would hang.
"""

from __future__ import annotations

from collections.abc import Callable

from drlmpi.algos.params import ParamGroup


class SyncScheduleError(RuntimeError):
    """An update synced other networks than its ``sync_schedule`` promised."""


class GradientExchange:
    """One network's gradients, from ``backward`` to the stepped parameters.

    ``exchange(name, group)`` is the part that crosses ranks (host buffers through MPI, or a
    device collective): it can never be inside a captured CUDA graph, so a captured update is
    cut into segments around it (:class:`~drlmpi.device.capture.CapturedUpdate`). Calling the
    exchange runs the whole step: :meth:`exchange`, the local optimizer step if
    :attr:`steps_locally`, then :meth:`after_step`.
    """

    #: whether the group's own optimizer steps after :meth:`exchange` (False: the exchange
    #: brought the new parameters themselves, as a parameter server's worker receives them).
    steps_locally: bool = True
    #: whether :meth:`exchange` talks to other ranks (False: the whole update, steps included,
    #: can be captured as one graph, and several updates as one: ``algo.updates_per_graph``).
    crosses_ranks: bool = True
    #: whether the updates compute gradients here (False: a parameter server, whose gradients
    #: come from its workers: its updates only exchange, step and follow with the target networks).
    computes_gradients: bool = True

    def exchange(self, name: str, group: ParamGroup) -> None:
        """Move ``group``'s gradients (or parameters) across ranks."""
        raise NotImplementedError

    def after_step(self, name: str, group: ParamGroup) -> None:
        """Work after the local step (a parameter server broadcasts the new parameters)."""

    def end_update(self) -> None:
        """Called by the update path after each update (:class:`CheckedExchange` checks the
        update's schedule here)."""

    def __call__(self, name: str, group: ParamGroup) -> None:
        self.exchange(name, group)
        if self.steps_locally:
            group.apply_gradients()
        self.after_step(name, group)


class LocalExchange(GradientExchange):
    """A single learner's exchange: nothing crosses ranks; the group steps with its own gradients."""

    crosses_ranks = False

    def exchange(self, name: str, group: ParamGroup) -> None:
        """Nothing to exchange."""


#: the exchange of a learner that averages with nobody
LOCAL = LocalExchange()


class CheckedExchange(GradientExchange):
    """``inner``, checking that the updates ``first, first + 1, ...`` sync exactly the groups of
    their ``schedules``, in order: the first stray sync raises before ``inner`` is entered, and
    :meth:`end_update` raises for an update that returned with a sync missing."""

    def __init__(self, inner: GradientExchange, first: int, schedules: tuple[tuple[str, ...], ...],
                 mismatch: Callable[[int, tuple[str, ...], tuple[str, ...]], str]) -> None:
        self.inner, self.first, self.schedules, self.mismatch = inner, first, schedules, mismatch
        self.steps_locally = inner.steps_locally
        self.crosses_ranks = inner.crosses_ranks
        self.computes_gradients = inner.computes_gradients
        self.update = 0  # index into schedules
        self.seen: list[str] = []

    def _expected(self) -> tuple[str, ...]:
        return self.schedules[self.update] if self.update < len(self.schedules) else ()

    def _check(self, name: str) -> None:
        expected = self._expected()
        if len(self.seen) >= len(expected) or expected[len(self.seen)] != name:
            raise SyncScheduleError(self.mismatch(self.first + self.update, expected, (*self.seen, name)))
        self.seen.append(name)

    def exchange(self, name: str, group: ParamGroup) -> None:
        self._check(name)
        self.inner.exchange(name, group)

    def __call__(self, name: str, group: ParamGroup) -> None:
        self._check(name)
        self.inner(name, group)

    def end_update(self) -> None:
        expected = self._expected()
        if tuple(self.seen) != expected:
            raise SyncScheduleError(self.mismatch(self.first + self.update, expected, tuple(self.seen)))
        self.update += 1
        self.seen = []

    def finish(self) -> None:
        """Raise unless every scheduled update ended (:meth:`end_update`)."""
        while self.update < len(self.schedules):
            self.end_update()
