"""Parameter server: workers send gradients, one server steps (the TD3 slides' design).

Ranks 1..N are workers: each simulates into its own replay/rollout storage, samples, computes
gradients and sends them to rank 0 with ONE ``Reduce(SUM)`` per network per update. Rank 0 is
the server: it averages the gradients, steps the only optimizer that ever steps, and broadcasts
the network's parameters (``Bcast``), which the workers act and compute with from then on.
The server computes no gradients: it follows ``algo.sync_schedule`` to take part in the same
collectives as the workers (for TD3, the actor only every ``policy_delay`` updates) and runs the
algorithm's after-update hooks, so its target networks (saved in ``policy.pt``) follow too.
A worker whose update strays from that schedule stops the job with a clear error
(:meth:`~drlmpi.algos.base.Algorithm.run_updates` checks every update) instead of leaving the server waiting.

The workers share the job's batch by ``topology.batch_rule``
(:mod:`drlmpi.topologies.core.data_parallel.batch_rule`,
N = the workers): by default (``global``) the algorithm config describes the job - each worker
samples ``batch_size / N``, the job runs ``updates_per_step`` updates per job-wide step and the
workers' replays hold ``buffer_size`` rows together - so learning per sample is sequential's.

Each round: workers collect ``sync_every`` steps; one ``Allgather`` of
:class:`~drlmpi.mpi.wire.RoundCounts` tells the server the job-wide step count and the number of
updates every worker can run (the minimum); finished episodes' returns go to the server with
``Gatherv``; the server evaluates, decides whether to stop, and broadcasts the
:class:`~drlmpi.mpi.wire.Control` message with the round's number of updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from drlmpi.config.scopes import TopologySettings, label, target
from drlmpi.config.settings import integer
from drlmpi.mpi.wire import Control, RoundCounts
from drlmpi.topologies.core.base import control_message, empty_control
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.data_parallel.batch_rule import BatchRuleFields, DataParallelTopology
from drlmpi.topologies.core.data_parallel.exchanges import (
    ServerExchange,
    WorkerExchange,
    start_together,
)
from drlmpi.topologies.core.data_parallel.rounds import data_parallel_round
from drlmpi.topologies.core.pace import Probe, log2
from drlmpi.topologies.core.reports import RankReport, learner_report

SERVER = 0


@dataclass(frozen=True)
class ParameterServerSettings(BatchRuleFields, TopologySettings):
    scope: ClassVar[str] = "topology/parameter_server"
    _target_: str = target("drlmpi.topologies.param_server.ParameterServer")
    name: str = label("parameter_server", "topology")
    sync_every: int = integer(64, "experience each worker collects per round")


class ParameterServer(DataParallelTopology):
    """Rank 0 averages gradients and steps; ranks 1..N simulate and compute gradients."""

    name = "parameter_server"
    settings_class = ParameterServerSettings
    cfg: ParameterServerSettings
    min_ranks = 2
    max_ranks = None
    report_order = 30
    report_variants = {"batch_rule": "global"}
    server_ranks = 1  # rank 0 samples nothing: N = the workers

    @classmethod
    def exchange_s(cls, ranks: int, p: Probe) -> float:
        """A Reduce of the gradients to the server and a Bcast of the parameters back."""
        return p.allreduce_at(ranks) + max(1, log2(ranks)) * p.message_s(p.weight_bytes)

    def run(self, ctx: RunContext) -> RankReport:
        if ctx.comm.rank == SERVER:
            return self._serve(ctx)
        return self._work(ctx)

    def _serve(self, ctx: RunContext) -> RankReport:
        """Rank 0: average gradients, step, broadcast parameters; evaluate; decide when to stop."""
        comm = ctx.comm
        rule = self.batch_rule(self.cfg, ctx.cfg.algo, comm.size)
        algo = ctx.make_algo(learner=True, shared_init=True, algo_cfg=rule.algo_cfg)
        learner = ctx.make_learner(algo, exchange=ServerExchange(comm, workers=comm.size - 1))
        start_together(comm, algo, learner.clock, root=SERVER)
        rounds = 0
        while True:
            table = data_parallel_round(comm, learner, None, self.cfg.sync_every, self.cfg.sync_unit, SERVER)
            rounds += 1
            learner.maybe_evaluate()
            reason = learner.stop_reason()
            stop = reason is not None
            # The last round's updates run at a budget stop too (as Learner.finish does for one
            # learner), so the job does sequential's updates on the same data; after a solve
            # they would be wasted.
            n_updates = 0 if reason == "solved" else int(table[1:, RoundCounts.UPDATES_DUE].min())
            checkpoint = not stop and ctx.checkpoint_due()
            comm.Bcast(control_message(stop, learner, n_updates, checkpoint), root=SERVER, kind="control")
            learner.train_exactly(n_updates)
            if stop:
                break
            if checkpoint:  # the server and every worker save at the end of this round
                ctx.save_checkpoint(learner, ranks_with_state=list(range(comm.size)), collective=True)
            ctx.progress()
        return learner_report(comm.rank, learner, role="server",
                              stats={"rounds": rounds, **rule.stats()})

    def _work(self, ctx: RunContext) -> RankReport:
        """Ranks 1..N: simulate, store, compute gradients, receive the server's parameters."""
        comm = ctx.comm
        workers = comm.size - 1
        algo = ctx.make_algo(learner=True, shared_init=True,
                             algo_cfg=self.batch_rule(self.cfg, ctx.cfg.algo, comm.size).algo_cfg)
        learner = ctx.make_learner(algo, log=False, exchange=WorkerExchange(comm, SERVER))
        start_together(comm, algo, learner.clock, root=SERVER)
        actor = ctx.make_local_actor(learner)
        control = empty_control()
        while True:
            actor.set_global_steps(int(control[Control.ENV_STEPS]), workers)
            data_parallel_round(comm, learner, actor, self.cfg.sync_every, self.cfg.sync_unit, SERVER)
            comm.Bcast(control, root=SERVER, kind="control")
            learner.train(max_updates=int(control[Control.N_UPDATES]))
            if control[Control.STOP]:
                break
            if control[Control.CHECKPOINT]:
                ctx.save_checkpoint(learner, ranks_with_state=list(range(comm.size)), collective=True)
            learner.lead(actor)
        actor.close()
        return learner_report(comm.rank, learner, role="worker", actor=actor)
