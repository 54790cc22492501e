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

import numpy as np

from drlmpi.mpi.wire import Control, Tag
from drlmpi.topologies.base import (
    RankReport,
    RunContext,
    Topology,
    control_message,
    empty_control,
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
    report_order = 10

    @classmethod
    def paper_label(cls, world_size: int) -> str | None:
        return "2 Processes"

    def run(self, ctx: RunContext) -> RankReport:
        if ctx.comm.rank == LEARNER_RANK:
            return self._learn(ctx)
        return self._simulate(ctx)

    def _learn(self, ctx: RunContext) -> RankReport:
        comm = ctx.comm
        learner = ctx.make_learner()
        width = learner.layout.width
        comm.Send(learner.policy_weights(), dest=SIMULATOR_RANK, tag=Tag.WEIGHTS, kind="weights")
        while True:
            count = comm.probe_count(SIMULATOR_RANK, Tag.EXPERIENCE, itemsize=4)
            rows = np.empty((count // width, width), np.float32)
            comm.Recv(rows, source=SIMULATOR_RANK, tag=Tag.EXPERIENCE, kind="experience")
            learner.ingest(rows, source_rank=SIMULATOR_RANK)
            learner.maybe_evaluate()
            stop = learner.stop_reason() is not None
            comm.Send(control_message(stop, learner), dest=SIMULATOR_RANK, tag=Tag.CONTROL, kind="control")
            if stop:
                learner.finish()
                break
            comm.Send(learner.policy_weights(), dest=SIMULATOR_RANK, tag=Tag.WEIGHTS, kind="weights")
            learner.train()
            ctx.maybe_checkpoint(learner)
            ctx.progress()
        return learner_report(comm.rank, learner)

    def _simulate(self, ctx: RunContext) -> RankReport:
        comm = ctx.comm
        every, unit = sync_amount(self.cfg)
        actor = ctx.make_actor(simulator_index=0)
        control = empty_control()
        comm.Recv(actor.weights, source=LEARNER_RANK, tag=Tag.WEIGHTS, kind="weights")
        while True:
            rows = actor.collect(every, unit)
            comm.Send(rows, dest=LEARNER_RANK, tag=Tag.EXPERIENCE, kind="experience")
            comm.Recv(control, source=LEARNER_RANK, tag=Tag.CONTROL, kind="control")
            if control[Control.STOP]:
                break
            comm.Recv(actor.weights, source=LEARNER_RANK, tag=Tag.WEIGHTS, kind="weights")
            actor.set_global_steps(int(control[Control.ENV_STEPS]))
        actor.close()
        return simulator_report(comm.rank, actor)
