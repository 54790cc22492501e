"""Star topology: one learner rank, N simulator ranks, collective rounds (DQN paper, III.C).

Each round every simulator collects ``sync_every`` steps (or episodes) with the weights it has;
the learner collects the experience with ``Gather`` (row counts) + ``Gatherv`` (the packed rows),
broadcasts the :class:`~drlmpi.mpi.wire.Control` message and the weights with ``Bcast``, then trains
in proportion to the data gathered (the paper's n*p: ``algo.updates_per_step`` updates per
environment step) while the simulators collect the next round. The simulators' policy
therefore lags by one round. (Workers that send gradients instead of experience are the
``parameter_server`` topology.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from drlmpi.mpi.timed import TimedComm
from drlmpi.mpi.wire import Control
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


class Star(Topology):
    """Rank 0 learns; ranks 1..N simulate; Gatherv experience, Bcast weights."""

    name = "star"
    min_ranks = 2
    max_ranks = None
    report_order = 20

    @classmethod
    def paper_label(cls, world_size: int) -> str | None:
        return f"MP({world_size})"

    def run(self, ctx: RunContext) -> RankReport:
        if ctx.comm.rank == LEARNER_RANK:
            return self._learn(ctx)
        return self._simulate(ctx)

    def _learn(self, ctx: RunContext) -> RankReport:
        comm = ctx.comm
        learner = ctx.make_learner()
        layout = learner.layout
        comm.Bcast(learner.policy_weights(), root=LEARNER_RANK, kind="weights")
        while True:
            for source, rows in gather_experience(comm, layout):
                learner.ingest(rows, source_rank=source)
            learner.maybe_evaluate()
            stop = learner.stop_reason() is not None
            comm.Bcast(control_message(stop, learner), root=LEARNER_RANK, kind="control")
            if stop:
                learner.finish()
                break
            comm.Bcast(learner.policy_weights(), root=LEARNER_RANK, kind="weights")
            learner.train()
            ctx.maybe_checkpoint(learner)
            ctx.progress()
        return learner_report(comm.rank, learner)

    def _simulate(self, ctx: RunContext) -> RankReport:
        comm = ctx.comm
        every, unit = sync_amount(self.cfg)
        simulators = comm.size - 1
        actor = ctx.make_actor(simulator_index=comm.rank - 1)
        control = empty_control()
        comm.Bcast(actor.weights, root=LEARNER_RANK, kind="weights")
        while True:
            rows = actor.collect(every, unit)
            comm.Gather(np.array([rows.shape[0]], dtype=np.int64), None, root=LEARNER_RANK, kind="counts")
            comm.Gatherv(rows, None, root=LEARNER_RANK, kind="experience")
            comm.Bcast(control, root=LEARNER_RANK, kind="control")
            if control[Control.STOP]:
                break
            comm.Bcast(actor.weights, root=LEARNER_RANK, kind="weights")
            actor.set_global_steps(int(control[Control.ENV_STEPS]), simulators)
        actor.close()
        return simulator_report(comm.rank, actor)


def gather_experience(comm: TimedComm, layout: Any) -> list[tuple[int, np.ndarray]]:
    """The learner's side of one round's collection: ``Gather`` of the row counts, ``Gatherv``
    of the packed rows; ``(source rank, rows)`` of every simulator that sent any."""
    from mpi4py import MPI

    counts = np.zeros(comm.size, dtype=np.int64)
    comm.Gather(np.zeros(1, dtype=np.int64), counts, root=LEARNER_RANK, kind="counts")
    rows = layout.empty(int(counts.sum()))
    sizes = counts * layout.width
    displacements = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    comm.Gatherv(layout.empty(0), [rows, sizes, displacements, MPI.FLOAT], root=LEARNER_RANK,
                 kind="experience")
    parts = []
    start = 0
    for source, count in enumerate(counts):
        if count:
            parts.append((source, rows[start : start + count]))
        start += count
    return parts
