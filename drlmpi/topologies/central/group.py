"""Central inside a group of ``topology=groups`` (:class:`CentralWiring`): the simulators are
central's (:func:`~drlmpi.topologies.central.simulator.simulate` over the group's communicator,
stepping only); the group's learner acts for them as central's does - serving whichever groups
have arrived in one batched forward pass and building their experience rows itself - but stores
the rows for the learners' meeting and trains what the meeting agreed.

Every pass of the learner's loop is one meeting (the learners meet in lockstep: a learner with
nothing to serve still meets), so the groups' learners run the same updates at the same time,
each averaging their gradients: at most ``topology.updates_per_serve`` of the agreed updates a
pass, as central's learner runs them between serves, and all of them once more than twice a PPO
rollout's (else twice ``updates_per_serve``) are owed. The learner waits for each batch of updates
(central's ``topology.overlap`` is not an option of a group: the updates exchange gradients with
the other learners as they run). At the stop, each simulator group's next message is taken in and answered
with the stop flag, as central does; the steps of those messages come after the last meeting, so
they are not stored but counted as ``steps_after_stop`` (what async's groups drop at the stop).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from drlmpi.mpi.wire import Control
from drlmpi.topologies.central import Central, pending_limit, serving, updates_now
from drlmpi.topologies.central.rows import RowBuilder
from drlmpi.topologies.central.simulator import simulate
from drlmpi.topologies.central.wire import CentralFields, StepWire, simulator_groups
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.pace import Probe
from drlmpi.topologies.core.reports import RankReport
from drlmpi.topologies.core.wiring import GroupLearner, GroupWiring


class CentralWiring(GroupWiring):
    """Central's acting learner and stepping-only simulators inside a group."""

    name = "central"
    topology = Central
    fields = CentralFields
    #: the steps of the messages taken in at the stop, after the last meeting: the job's are the sum
    summed_stats = ("steps_after_stop",)

    @classmethod
    def serving(cls, p: Probe, settings: CentralFields, sims: int, f: float) -> tuple[float, float]:
        """Central's: the simulators only step, the learner serves (``central.serving``)."""
        return serving(p, sims, settings.env_groups, f)

    @classmethod
    def simulate(cls, ctx: RunContext, settings: CentralFields) -> RankReport:
        return simulate(ctx, settings.env_groups)

    @classmethod
    def learn(cls, group: GroupLearner) -> dict[str, Any]:
        return GroupCentralLearner(group).run()


class _Storing:
    """The group's learner as central's row building sees it (``Central._ingest``): the rows of
    each arrived group are stored for the meeting, credited to their simulator, and kept (views
    of the staging rows, read at the meeting before the next ingest) for the meeting to count.
    Once :attr:`stopped`, rows are only counted (:attr:`after_stop`)."""

    def __init__(self, owner: GroupLearner) -> None:
        self.owner, self.learner = owner, owner.learner
        self.parts: list[tuple[int, np.ndarray]] = []
        self.stopped, self.after_stop = False, 0

    def row_buffer(self, n: int) -> np.ndarray:
        return self.learner.row_buffer(n)

    def extras_of(self, out: Any, obs: np.ndarray, actions: np.ndarray) -> np.ndarray | None:
        return self.learner.extras_of(out, obs, actions)

    @property
    def updates(self) -> int:
        return self.learner.updates

    def ingest_parts(self, rows: np.ndarray, parts: list[tuple[int, int, int | None]]) -> int:
        if self.stopped:
            self.after_stop += sum(count for count, _, _ in parts)
            return 0
        start = 0
        for count, source, lag in parts:
            if count:
                part = rows[start : start + count]
                self.owner.store(source, part)
                if lag is not None:
                    self.learner.policy_lags.append(int(lag))
                self.parts.append((source, part))
                start += count
        return 0

    def take(self) -> list[tuple[int, np.ndarray]]:
        parts, self.parts = self.parts, []
        return parts


class GroupCentralLearner:
    """The acting learner of one group, meeting the other groups' learners every pass."""

    def __init__(self, owner: GroupLearner) -> None:
        self.owner, self.comm, self.learner = owner, owner.sub.comm, owner.learner
        self.wire = StepWire(self.learner.layout)
        self.rows = RowBuilder(self.wire)
        self.groups = simulator_groups(self.comm.size, owner.sub.rank, owner.sub.cfg.env.num_envs,
                                       owner.cfg.env_groups, self.wire)

    def run(self) -> dict[str, Any]:
        owner, comm, learner, groups = self.owner, self.comm, self.learner, self.groups
        requests = [group.post(comm) for group in groups]
        acting = learner.acting_for_simulators(len(groups) * max(g.n for g in groups))
        learner.successive_rows()  # every row is built here, each game's in step order
        storing = _Storing(owner)
        # as central's learner: a few updates between serves, all of them once far behind (every
        # learner decides alike from what the meeting agreed, so they stay in step)
        per_serve = owner.cfg.updates_per_serve
        limit = pending_limit(None, learner, per_serve)  # (max_pending_updates is async's key in a group)
        stats = {"serves": 0, "rows_served": 0, "inference_s": 0.0, "ingest_s": 0.0,
                 "env_groups": len(groups) // max(1, comm.size - 1)}
        while True:
            ready = comm.testsome(requests)  # never block: the other learners wait at the meeting
            if ready:
                arrived = [groups[i] for i in ready]
                t0 = time.perf_counter()
                Central._ingest(arrived, storing, self.rows)
                stats["ingest_s"] += time.perf_counter() - t0
                Central._serve(comm, arrived, learner, acting, stats)
                for i in ready:
                    requests[i] = groups[i].post(comm)
            updates, control = owner.meet(storing.take())
            if control[Control.STOP]:
                break
            if updates:
                owner.train(updates_now(updates, per_serve, limit))
            owner.after_round(control)
        # every group was answered: each one's next message is taken in and answered with the stop
        storing.stopped = True
        Central._shut_down(comm, groups, requests, [], storing, self.rows)
        stats["steps_after_stop"] = storing.after_stop
        stats["rows_per_serve"] = stats["rows_served"] / max(1, stats["serves"])
        return stats
