"""How an update's gradients reach the optimizer (a :data:`GradSync`) and the check that every
update syncs exactly the networks its schedule promised (:class:`CheckedSync`).

An algorithm never imports MPI: where a topology needs gradients reduced across ranks it passes
a sync into :meth:`~drlmpi.algos.base.Algorithm.update`, and the algorithm calls it between
``backward`` and the optimizer step of each network it trains.
"""

from __future__ import annotations

from collections.abc import Callable

from drlmpi.algos.params import ParamGroup


class SyncScheduleError(RuntimeError):
    """An update synced other networks than its ``sync_schedule`` promised (see
    :meth:`Algorithm.checked_update`)."""


GradSync = Callable[[str, ParamGroup], None]


def local_sync(name: str, group: ParamGroup) -> None:
    """The single-process :data:`GradSync`: step with this rank's own gradients."""
    group.apply_gradients()


class CheckedSync:
    """A :data:`GradSync` wrapper that verifies the networks synced against a schedule (see
    :meth:`Algorithm.checked_update`). It keeps the wrapped sync's host part
    (``exchange``/``steps_locally``, :func:`~drlmpi.device.capture.exchange_of`), so an update whose
    collectives sit between captured segments is checked at each exchange, before it runs."""

    def __init__(self, sync: GradSync, index: int, expected: tuple[str, ...],
                 mismatch: Callable[[int, tuple[str, ...], tuple[str, ...]], str]) -> None:
        self.sync, self.index, self.expected, self.mismatch = sync, index, expected, mismatch
        self.seen: list[str] = []
        self.steps_locally = getattr(sync, "steps_locally", None)

    def _check(self, name: str) -> None:
        if len(self.seen) >= len(self.expected) or self.expected[len(self.seen)] != name:
            raise SyncScheduleError(self.mismatch(self.index, self.expected, (*self.seen, name)))
        self.seen.append(name)

    def __call__(self, name: str, group: ParamGroup) -> None:
        self._check(name)
        self.sync(name, group)

    def exchange(self, name: str, group: ParamGroup) -> None:
        self._check(name)
        self.sync.exchange(name, group)

    def finish(self) -> None:
        """Raise if the update returned with a scheduled sync missing."""
        if len(self.seen) != len(self.expected):
            raise SyncScheduleError(self.mismatch(self.index, self.expected, tuple(self.seen)))
