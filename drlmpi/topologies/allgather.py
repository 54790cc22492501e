"""Decentralized topology: N peers, every rank simulates and learns (the TD3 slides' and the
PPO-Tetris plan's data-parallel scheme).

Each round every rank collects ``sync_every`` steps into its own replay/rollout storage; the
ranks agree (one ``Allgather`` of three integers) on the job-wide step count and on how many
updates all of them can run; then every update averages the gradients of all ranks with ONE
collective on ONE flat buffer per network (``topology.reduce``: ``allreduce`` or ``allgather``)
and steps identical optimizers, so parameters stay identical - verified with a checksum
``Allgather`` every ``check_every`` updates and at the end.

How the job's batch is shared is ``topology.batch_rule``
(:mod:`drlmpi.topologies.core.data_parallel.batch_rule`), applied to the config each rank builds its
learner from. ``global`` (the default): the algorithm config describes the job, as sequential would
run it - each rank samples ``batch_size / N`` so one update averages a minibatch of ``batch_size``,
the job runs ``updates_per_step`` updates per job-wide environment step, the N replays hold
``buffer_size`` rows together, updates start after ``learning_starts`` job-wide steps and a PPO
rollout is ``rollout_steps`` rows job-wide: the optimizer steps per sample and the learning rate are
sequential's. ``per_rank``: every rank runs the config as is - each update averages N minibatches of
``batch_size`` (an effective batch of N x batch_size) and the job does ``updates_per_step`` updates
per *rank-local* step, i.e. ``updates_per_step / N`` per job-wide step (``topology.lr_scale`` may
scale the learning rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from drlmpi.config.scopes import TopologySettings, label, target
from drlmpi.config.settings import integer
from drlmpi.mpi.wire import Control, RoundCounts
from drlmpi.topologies.core.base import SyncFields, control_message
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.data_parallel.backend import check_backend
from drlmpi.topologies.core.data_parallel.batch_rule import BatchRuleFields, DataParallelTopology
from drlmpi.topologies.core.data_parallel.learners import AveragingFields, DataParallelLearner
from drlmpi.topologies.core.data_parallel.rounds import data_parallel_round
from drlmpi.topologies.core.reports import RankReport, learner_report

ROOT = 0


@dataclass(frozen=True)
class AllgatherSettings(BatchRuleFields, AveragingFields, SyncFields, TopologySettings):
    scope: ClassVar[str] = "topology/allgather"
    _target_: str = target("drlmpi.topologies.allgather.Allgather")
    name: str = label("allgather", "topology")
    sync_every: int = integer(64, "steps (per environment) each rank collects per round")


class Allgather(DataParallelTopology):
    """N peers averaging gradients; rank 0 also evaluates, logs and decides when to stop."""

    name = "allgather"
    settings_class = AllgatherSettings
    cfg: AllgatherSettings
    min_ranks = 1
    max_ranks = None
    report_order = 50
    report_variants = {"reduce": "allreduce", "batch_rule": "global", "backend": "mpi"}

    @classmethod
    def check(cls, plan) -> None:
        super().check(plan)
        settings = cls.settings_of(plan.cfg.topology)
        check_backend(settings.backend, settings.reduce, plan.device)

    def run(self, ctx: RunContext) -> RankReport:
        comm = ctx.comm
        is_root = comm.rank == ROOT
        peer = DataParallelLearner(ctx, comm, self.cfg, self.batch_rule(self.cfg, ctx.cfg.algo, comm.size),
                                   log=is_root)
        learner = peer.learner
        actor = ctx.make_local_actor(learner)
        while True:
            actor.set_global_steps(learner.env_steps, comm.size)
            table = data_parallel_round(comm, learner, actor, self.cfg.sync_every, self.cfg.sync_unit, ROOT)
            peer.train(int(table[:, RoundCounts.UPDATES_DUE].min()))
            learner.lead(actor)
            stop = False
            if is_root:
                learner.maybe_evaluate()
                stop = learner.stop_reason() is not None
            control = control_message(stop, learner, checkpoint=not stop and ctx.checkpoint_due())
            comm.Bcast(control, root=ROOT, kind="control")
            if control[Control.STOP]:
                break
            if control[Control.CHECKPOINT]:  # every peer holds a learner: all save, together
                ctx.save_checkpoint(learner, ranks_with_state=list(range(comm.size)), collective=True)
            ctx.progress()
        stats = {"reduce": peer.reduce, **peer.stats(peer.check())}
        actor.close()
        extra: dict[str, Any] = {"device": stats["device"]}
        calls = peer.close()
        if calls is not None:  # what crossed the backend, beside the MPI counts
            stats["backend_calls"] = extra["backend_calls"] = calls
        report = learner_report(comm.rank, learner, role="peer", actor=actor, stats=stats)
        report.extra.update(extra)
        return report
