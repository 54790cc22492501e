"""Sequential topology: one rank simulates, then trains, in one loop (the DQN paper's Alg. 1).

The reference every other topology is compared with: no communication, exactly ``sync_every``
steps (or episodes) of experience between training phases, the acting policy refreshed after
each. The tests compare the parallel topologies' update counts with it (same data budget, same
number of updates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from drlmpi.config.scopes import TopologySettings, label, target
from drlmpi.config.settings import integer
from drlmpi.topologies.core.base import SyncFields, Topology
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.pace import Pace, Probe
from drlmpi.topologies.core.reports import RankReport, learner_report


@dataclass(frozen=True)
class SequentialSettings(SyncFields, TopologySettings):
    scope: ClassVar[str] = "topology/sequential"
    _target_: str = target("drlmpi.topologies.sequential.Sequential")
    name: str = label("sequential", "topology")
    sync_every: int = integer(256, "experience collected between training phases")


class Sequential(Topology):
    """Simulate ``sync_every`` steps/episodes, train on what they entitle, repeat."""

    name = "sequential"
    settings_class = SequentialSettings
    cfg: SequentialSettings
    min_ranks = 1
    max_ranks = 1
    report_order = 0

    @classmethod
    def paper_label(cls, world_size: int) -> str | None:
        return "Standard"

    @classmethod
    def pace(cls, ranks: int, p: Probe, settings: SequentialSettings) -> Pace:
        """Step (and store the row), then train what the step entitles: s + c + rho u."""
        return Pace(sim=p.sim_step_s + p.ingest_row_s,
                    learn=p.updates_per_step * p.learner_update_at(p.batch_size),
                    serial=True)

    def run(self, ctx: RunContext) -> RankReport:
        learner = ctx.make_learner()
        actor = ctx.make_local_actor(learner)
        while learner.stop_reason() is None:
            actor.set_global_steps(learner.env_steps)
            learner.ingest(actor.collect(self.cfg.sync_every, self.cfg.sync_unit), source_rank=ctx.comm.rank)
            if learner.train():
                learner.lead(actor)
            learner.maybe_evaluate()
            ctx.maybe_checkpoint(learner)
            ctx.progress()
        report = learner_report(ctx.comm.rank, learner, role="simulator+learner", actor=actor)
        actor.close()
        return report
