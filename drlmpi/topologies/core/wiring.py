"""How one learner and its simulators are wired inside a group of ``topology=groups``
(``topology.group_wiring``): the interface a wiring offers groups, and the one groups offers it.

A :class:`GroupWiring` is a topology's own code, run over a group's communicator: its simulator
side (:meth:`~GroupWiring.simulate`, the topology's simulator loop unchanged), its learner side
(:meth:`~GroupWiring.learn`, which receives the group's experience and hands it to the learners'
meeting through a :class:`GroupLearner`), the fields it reads inside a group (:attr:`GroupWiring.fields`,
a mixin of groups' settings class) and the rank rules and refusals a group's plan must pass (its
topology's). Star's is
:class:`~drlmpi.topologies.star.StarWiring`, async's
:class:`~drlmpi.topologies.asynchronous.group.AsyncWiring`; groups composes them through this
interface alone (:mod:`drlmpi.topologies.groups`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from drlmpi.config.scopes import TopologySettings
from drlmpi.config.settings import Settings
from drlmpi.roles.learner import Learner
from drlmpi.topologies.core.base import SyncFields, Topology
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.pace import Probe
from drlmpi.topologies.core.reports import RankReport

if TYPE_CHECKING:
    from drlmpi.topologies.core.context import RunPlan


class GroupLearner(Protocol):
    """What a group's learner offers its wiring's learner side: the group's context and the
    topology's settings, the learner, and the steps of a meeting of the learners."""

    #: the group's context: its communicator (the learner is rank 0 of it), the job rank kept
    sub: RunContext
    #: groups' settings, typed: an instance of every wiring's :attr:`GroupWiring.fields`
    cfg: TopologySettings
    learner: Learner

    def store(self, source: int, rows: np.ndarray) -> int:
        """Store rows from the group's rank ``source`` (credited to its job rank); the updates
        they entitle."""

    def meet(self, parts: list[tuple[int, np.ndarray]]) -> tuple[int, np.ndarray]:
        """Meet the other learners with the rows stored since the last meeting (``(group rank,
        rows)``, discarded ones too: their steps and episodes count); returns (the updates every
        learner runs now, the control message: stop, checkpoint)."""

    def train(self, updates: int) -> None:
        """Run ``updates`` updates, each averaging the learners' gradients."""

    def after_round(self, control: np.ndarray) -> None:
        """What follows a meeting that did not stop: a collective checkpoint, progress."""


class GroupWiring(ABC):
    """One way a group's simulators feed its learner; a class, never instantiated."""

    #: its ``topology.group_wiring`` value
    name: ClassVar[str]
    #: the topology whose rank rules and refusals a group's plan (its world: one group) passes
    topology: ClassVar[type[Topology]]
    #: the fields it reads inside a group (``sync_every`` and ``sync_unit``, and any of its own):
    #: a mixin of groups' settings class, so groups' settings are an instance of it
    fields: ClassVar[type[Settings]] = SyncFields
    #: per-learner stats the job's report sums over the learners
    summed_stats: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check(cls, plan: RunPlan, settings: Settings) -> None:
        """Refuse what a group of this wiring cannot run (``plan``: one group's world;
        ``settings``: groups' settings): by default its topology's rank rules."""
        cls.topology.check_world(plan)

    @classmethod
    def serving(cls, p: Probe, settings: Settings, sims: int, f: float) -> tuple[float, float] | None:
        """For the planner: where the group's learner acts for its ``sims`` simulators, (their
        seconds per step they make together, the learner's serving seconds per row) from probe
        ``p`` at slowdown ``f``; ``None`` (the default) where the simulators act themselves."""
        return None

    @classmethod
    @abstractmethod
    def simulate(cls, ctx: RunContext, settings: Settings) -> RankReport:
        """A simulator of a group (``ctx``: the group's context, ``settings``: groups'); its report."""

    @classmethod
    @abstractmethod
    def learn(cls, group: GroupLearner) -> dict[str, Any]:
        """The learner's side until a meeting decides to stop; its stats for the report."""


def wiring_table(*wirings: type[GroupWiring]) -> dict[str, type[GroupWiring]]:
    """The wirings by name (a name given twice is a mistake in the code)."""
    table = {wiring.name: wiring for wiring in wirings}
    if len(table) != len(wirings):
        raise ValueError(f"two group wirings share a name: {[w.name for w in wirings]}")
    return table
