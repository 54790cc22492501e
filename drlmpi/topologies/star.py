"""Star topology: one learner rank, N simulator ranks, collective rounds (DQN paper, III.C).

Each round every simulator collects ``sync_every`` steps (or episodes) with the weights it has;
the learner collects the experience with ``Gather`` (row counts) + ``Gatherv`` (the packed rows),
broadcasts the :class:`~drlmpi.mpi.wire.Control` message and the weights with ``Bcast``, then trains
in proportion to the data gathered (the paper's n*p: ``algo.updates_per_step`` updates per
environment step) while the simulators collect the next round. The simulators' policy
therefore lags by one round. (Workers that send gradients instead of experience are the
``parameter_server`` topology.)

``round_rows`` sizes the round job-wide instead: each simulator collects ``round_rows /
(simulators x env.num_envs)`` steps (rounded, at least one), so a round - and the policy lag
it makes - holds the same rows on 4 ranks as on 16 (:meth:`Star.round_steps`).

Inside a group of ``topology=groups`` (:class:`StarWiring`) the simulators run the same loop over
the group's communicator and the group's learner the same messages, meeting the other groups'
learners between gathering a round and training on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from drlmpi.algos.off_policy import OffPolicyAlgorithm
from drlmpi.config.errors import ConfigError
from drlmpi.config.scopes import TopologySettings, label, target
from drlmpi.config.settings import integer, options_of
from drlmpi.mpi.wire import Control
from drlmpi.topologies.core.base import SyncFields, Topology, check_ramp, ramp_from, whole_rounds
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.pace import Pace, Probe, star_pace
from drlmpi.topologies.core.reports import RankReport
from drlmpi.topologies.core.rounds import LEARNER_RANK, CollectiveLink, learner_rounds, simulator_rounds
from drlmpi.topologies.core.wiring import GroupLearner, GroupWiring

#: job-wide rows above which star suggests a smaller round to an off-policy learner: a round is
#: the lag of the data it learns from, and on DQN LunarLander (16 ranks) rounds of 1,920 and 3,840
#: rows needed more env steps to the threshold than rounds of 960
#: (docs/results/2core_dqn_lunar_seed_spread/README.md)
LARGE_ROUND_ROWS = 1024


@dataclass(frozen=True)
class StarSettings(SyncFields, TopologySettings):
    scope: ClassVar[str] = "topology/star"
    _target_: str = target("drlmpi.topologies.star.Star")
    name: str = label("star", "topology")
    sync_every: int = integer(256, "experience each simulator collects per round")
    round_rows: int | None = integer(
        None, "job-wide rows per round: each simulator collects round_rows / (simulators x env.num_envs) "
              "steps (rounded, at least 1) instead of sync_every, the same round at every world size (null: "
              "sync_every)", nullable=True)
    ramp_from: int | None = ramp_from()


class Star(Topology):
    """Rank 0 learns; ranks 1..N simulate; Gatherv experience, Bcast weights."""

    name = "star"
    settings_class = StarSettings
    cfg: StarSettings
    min_ranks = 2
    max_ranks = None
    report_order = 20
    evaluates_on_simulators = True
    #: a round's size is a regime of its own: the report never averages two sizes together (on
    #: 16 ranks, rounds of 64 steps reach DQN LunarLander's threshold in fewer env steps than the
    #: default's: docs/results/h200host_dqn_lunar_ttt/README.md)
    report_variants = {"sync_every": None, "sync_unit": None, "round_rows": None, "ramp_from": None}

    @classmethod
    def round_steps(cls, settings: StarSettings, simulators: int, num_envs: int) -> int:
        """Steps each simulator collects per round: ``round_rows`` shared among the simulators'
        environments, else ``sync_every``."""
        if settings.round_rows is None:
            return settings.sync_every
        return max(1, round(settings.round_rows / (max(1, simulators) * max(1, num_envs))))

    @classmethod
    def check(cls, plan) -> None:
        super().check(plan)
        topo = cls.settings_of(plan.cfg.topology)
        check_ramp(cls.name, topo.ramp_from, topo.sync_unit)
        if topo.round_rows is None:
            return
        if topo.sync_unit != "steps":
            raise ConfigError("topology.round_rows counts rows (environment steps): use "
                              "topology.sync_unit=steps with it")
        if topo.sync_every != options_of(cls.settings_class)["sync_every"].default:
            raise ConfigError(f"topology.round_rows={topo.round_rows} and topology.sync_every="
                              f"{topo.sync_every} both size star's round: set one of them")

    @classmethod
    def paper_label(cls, world_size: int) -> str | None:
        return f"MP({world_size})"

    @classmethod
    def hints(cls, plan) -> tuple[str, ...]:
        """An off-policy learner fed rounds of more than :data:`LARGE_ROUND_ROWS` rows job-wide:
        the size of round that keeps its data fresh."""
        topo = cls.settings_of(plan.cfg.topology)
        if not issubclass(plan.algo_cls, OffPolicyAlgorithm) or topo.sync_unit != "steps":
            return ()
        simulators, envs = plan.world_size - 1, plan.cfg.env.num_envs
        steps = cls.round_steps(topo, simulators, envs)
        rows = steps * simulators * envs
        if rows <= LARGE_ROUND_ROWS:
            return ()
        return (f"topology=star: a round is {rows:,} rows ({simulators} simulator(s) x {envs} "
                f"environment(s) x {steps} steps), and an off-policy learner's data lags by a round; "
                f"with rounds of 64 steps a simulator (960 rows on 16 ranks, 448 on 8) DQN LunarLander "
                f"and TD3 HalfCheetah needed 1.05x and 0.95x the sequential run's env steps to the "
                f"threshold, against 1.70x and 1.2-1.4x with 256 (docs/results.md): "
                f"topology.sync_every=64, or topology.round_rows=960 for one size at every world size",)

    @classmethod
    def pace(cls, ranks: int, p: Probe, settings: StarSettings) -> Pace:
        """N-1 simulators step while the learner trains: max(s/(N-1), c + rho u) + a round's
        messages per row."""
        steps = cls.round_steps(settings, ranks - 1, p.num_envs)
        return star_pace(ranks - 1, p, steps, p.slowdown_at(ranks), whole_rounds(settings))

    def run(self, ctx: RunContext) -> RankReport:
        link = CollectiveLink(ctx.comm)
        if ctx.comm.rank == LEARNER_RANK:
            return learner_rounds(ctx, link, simulators=ctx.comm.size - 1)
        return self.simulate(ctx)

    def simulate(self, ctx: RunContext) -> RankReport:
        """A simulator rank of ``ctx.comm``: rounds of :meth:`round_steps`, ramped up from
        ``ramp_from``."""
        simulators = ctx.comm.size - 1
        every = self.round_steps(self.cfg, simulators, ctx.cfg.env.num_envs)
        return simulator_rounds(ctx, CollectiveLink(ctx.comm), every, self.cfg.sync_unit, simulators,
                                self.cfg.ramp_from)


class StarWiring(GroupWiring):
    """Star inside a group: its simulators' rounds over the group's communicator; the learner
    gathers a round, meets the other learners with it, sends the control and its weights, then
    trains what the meeting agreed. Full rounds of ``sync_every`` (``round_rows`` and
    ``ramp_from`` are star's alone)."""

    name = "star"
    topology = Star
    fields = SyncFields

    @classmethod
    def simulate(cls, ctx: RunContext, settings: SyncFields) -> RankReport:
        """Star's simulator rounds over the group's communicator (the group's learners evaluate)."""
        return simulator_rounds(ctx, CollectiveLink(ctx.comm), settings.sync_every, settings.sync_unit,
                                ctx.comm.size - 1)

    @classmethod
    def learn(cls, group: GroupLearner) -> dict[str, Any]:
        link, learner = CollectiveLink(group.sub.comm), group.learner
        link.send_weights(learner.policy_weights())
        while True:
            parts = link.gather(learner.layout)
            for source, rows in parts:
                group.store(source, rows)
            updates, control = group.meet(parts)
            link.send_control(control)
            if control[Control.STOP]:
                return {}
            link.send_weights(learner.policy_weights())
            group.train(updates)
            group.after_round(control)
