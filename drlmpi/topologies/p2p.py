"""Two-process point-to-point topology (the DQN paper, section III.B).

Rank 1 simulates, rank 0 learns, concurrently. Every ``sync_every`` steps (or episodes) the
simulator sends its experience (one ``Send`` of a packed float32 array; the receiver sizes it
with ``Probe``) and receives the control message and fresh weights (``Recv`` straight into its
flat parameter buffer). The learner answers with the weights *before* training on the chunk it
just received, so simulation of chunk k+1 overlaps training on chunk k (a policy lag of one
chunk), which is where the paper's speedup of up to 2 comes from.
"""

from __future__ import annotations

import numpy as np

from drlmpi.comm import Tag
from drlmpi.topologies.base import (
    RankReport,
    RunContext,
    Topology,
    control_message,
    finish_training,
    learner_report,
    simulator_report,
    sync_amount,
)

LEARNER_RANK = 0
SIMULATOR_RANK = 1


class PointToPoint(Topology):
    """One learner rank (0) and one simulator rank (1) exchanging Send/Recv messages."""

    name = "p2p"
    min_ranks = 2
    max_ranks = 2

    def run(self, ctx: RunContext) -> RankReport:
        if ctx.comm.rank == LEARNER_RANK:
            return self._learn(ctx)
        return self._simulate(ctx)

    def _learn(self, ctx: RunContext) -> RankReport:
        from mpi4py import MPI

        comm = ctx.comm
        learner = ctx.make_learner()
        layout = learner.algo.layout
        policy = learner.algo.policy.flat
        comm.Send(policy.params_numpy(), dest=SIMULATOR_RANK, tag=Tag.WEIGHTS, kind="weights")
        status = MPI.Status()
        while True:
            comm.comm.Probe(source=SIMULATOR_RANK, tag=Tag.EXPERIENCE, status=status)
            rows = np.empty((status.Get_count(MPI.FLOAT) // layout.width, layout.width), np.float32)
            comm.Recv(rows, source=SIMULATOR_RANK, tag=Tag.EXPERIENCE, kind="experience")
            learner.ingest(rows, source_rank=SIMULATOR_RANK)
            learner.maybe_evaluate()
            stop = learner.stop_reason() is not None
            comm.Send(control_message(stop, learner), dest=SIMULATOR_RANK, tag=Tag.CONTROL, kind="control")
            if stop:
                finish_training(learner)
                break
            comm.Send(policy.params_numpy(), dest=SIMULATOR_RANK, tag=Tag.WEIGHTS, kind="weights")
            learner.train()
            ctx.progress()
        return learner_report(comm.rank, learner)

    def _simulate(self, ctx: RunContext) -> RankReport:
        comm = ctx.comm
        every, unit = sync_amount(self.cfg)
        actor = ctx.make_actor(simulator_index=0)
        weights = actor.algo.policy.flat.params_numpy()
        control = np.zeros(3, dtype=np.int64)
        comm.Recv(weights, source=LEARNER_RANK, tag=Tag.WEIGHTS, kind="weights")
        while True:
            rows = actor.collect(every, unit)
            comm.Send(rows, dest=LEARNER_RANK, tag=Tag.EXPERIENCE, kind="experience")
            comm.Recv(control, source=LEARNER_RANK, tag=Tag.CONTROL, kind="control")
            if control[0]:
                break
            comm.Recv(weights, source=LEARNER_RANK, tag=Tag.WEIGHTS, kind="weights")
            actor.algo.on_policy_loaded()
            actor.set_global_steps(int(control[1]))
        actor.close()
        return simulator_report(comm.rank, actor)
