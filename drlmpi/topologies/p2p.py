"""Two-process point-to-point topology (the DQN paper, section III.B).

Rank 1 simulates, rank 0 learns, concurrently. Every ``sync_every`` steps (or episodes) the
simulator sends its experience (one ``Send`` of a packed float32 array; the receiver sizes it
with a timed ``Probe``) and receives the :class:`~drlmpi.mpi.wire.Control` message and fresh weights
(``Recv`` straight into its flat parameter buffer). The learner answers with the weights
*before* training on the chunk it just received, so simulation of chunk k+1 overlaps training
on chunk k (a policy lag of one chunk), which is where the paper's speedup of up to 2 comes
from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from drlmpi.config.scopes import TopologySettings, label, target
from drlmpi.config.settings import integer
from drlmpi.topologies.core.base import SyncFields, Topology, check_ramp, ramp_from, whole_rounds
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.pace import Pace, Probe, star_pace
from drlmpi.topologies.core.reports import RankReport
from drlmpi.topologies.core.rounds import LEARNER_RANK, PointToPointLink, learner_rounds, simulator_rounds


@dataclass(frozen=True)
class PointToPointSettings(SyncFields, TopologySettings):
    scope: ClassVar[str] = "topology/p2p"
    _target_: str = target("drlmpi.topologies.p2p.PointToPoint")
    name: str = label("p2p", "topology")
    sync_every: int = integer(256, "experience the simulator collects between exchanges")
    ramp_from: int | None = ramp_from()


class PointToPoint(Topology):
    """One learner rank (0) and one simulator rank (1) exchanging Send/Recv messages."""

    name = "p2p"
    settings_class = PointToPointSettings
    cfg: PointToPointSettings
    min_ranks = 2
    max_ranks = 2
    report_order = 10
    evaluates_on_simulators = True

    @classmethod
    def check(cls, plan) -> None:
        super().check(plan)
        settings = cls.settings_of(plan.cfg.topology)
        check_ramp(cls.name, settings.ramp_from, settings.sync_unit)

    @classmethod
    def paper_label(cls, world_size: int) -> str | None:
        return "2 Processes"

    @classmethod
    def pace(cls, ranks: int, p: Probe, settings: PointToPointSettings) -> Pace:
        """Star's model with one simulator: max(s, c + rho u) + a round's messages per row."""
        return star_pace(1, p, settings.sync_every, p.slowdown_at(ranks), whole_rounds(settings))

    def run(self, ctx: RunContext) -> RankReport:
        link = PointToPointLink(ctx.comm)
        if ctx.comm.rank == LEARNER_RANK:
            return learner_rounds(ctx, link, simulators=1)
        return simulator_rounds(ctx, link, self.cfg.sync_every, self.cfg.sync_unit, simulators=1,
                                ramp_from=self.cfg.ramp_from)
