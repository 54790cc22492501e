"""Async inside a group of ``topology=groups`` (:class:`AsyncWiring`): the simulators are
:class:`~drlmpi.topologies.asynchronous.simulator.AsyncSimulator` over the group's communicator;
the learner is :class:`GroupAsyncLearner`, which receives, orders, lag-checks and credits chunks
as the async learner does but stores them for the learners' meeting and trains what the meeting
agreed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from drlmpi.config.errors import ConfigError
from drlmpi.mpi.wire import Control
from drlmpi.topologies.asynchronous import Asynchronous, check_chunks
from drlmpi.topologies.asynchronous.learner import AsyncLearner
from drlmpi.topologies.asynchronous.settings import AsyncChunkFields
from drlmpi.topologies.asynchronous.simulator import AsyncSimulator
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.reports import RankReport
from drlmpi.topologies.core.wiring import GroupLearner, GroupWiring


class AsyncWiring(GroupWiring):
    """Async's chunks, credits, lag bound and publications inside a group; the learners train
    what they agree on at each meeting, so a group has no ``utd_mode``."""

    name = "async"
    topology = Asynchronous
    fields = AsyncChunkFields
    #: what every group's learner received and did not store, summed: the job's
    summed_stats = ("discarded_chunks", "discarded_rows", "steps_after_stop")

    @classmethod
    def check(cls, plan, settings: AsyncChunkFields) -> None:
        # async's own utd_mode, added to groups' config with ++topology. (groups has none)
        if plan.ignored["topology"].get("utd_mode") not in (None, "ratio"):
            raise ConfigError("topology=groups trains what the learners agree on each meeting: "
                              "topology.utd_mode=free is not available there")
        super().check(plan, settings)
        check_chunks(settings)

    @classmethod
    def simulate(cls, ctx: RunContext, settings: AsyncChunkFields) -> RankReport:
        return AsyncSimulator(ctx, settings).run()

    @classmethod
    def learn(cls, group: GroupLearner) -> dict[str, Any]:
        return GroupAsyncLearner(group).run_meetings()


class GroupAsyncLearner(AsyncLearner):
    """The async learner of one group: it receives, orders, lag-checks and credits chunks as
    :class:`~drlmpi.topologies.asynchronous.Asynchronous` does, but stores them for the
    learners' meeting instead of counting them, and trains what the meeting agreed (never free
    running: ``topology=groups`` has no ``utd_mode``)."""

    def __init__(self, owner: GroupLearner) -> None:
        super().__init__(owner.sub, owner.cfg, learner=owner.learner)
        self.owner = owner
        self.parts: list[tuple[int, np.ndarray]] = []

    def learn_from(self, sim: int, rows: np.ndarray, lag: int) -> int:
        self.learner.policy_lags.append(int(lag))
        self.parts.append((sim, rows.copy()))  # the receive buffer is re-posted
        return self.owner.store(sim, rows)

    def discard(self, sim: int, rows: np.ndarray) -> None:
        self.parts.append((sim, rows.copy()))  # its steps and episodes are counted at the meeting

    def run_meetings(self) -> dict[str, Any]:
        owner = self.owner
        self.start()
        since_publish = 0
        while True:
            self.poll(block=False)  # never block: the other learners wait at the meeting
            parts, self.parts = self.parts, []
            updates, control = owner.meet(parts)
            if control[Control.STOP]:
                break
            burst = min(updates, self.publish_every - since_publish)
            if burst:
                owner.train(burst)
                since_publish += burst
                if since_publish >= self.publish_every:
                    self.publish()
                    since_publish = 0
            owner.after_round(control)
        self.shutdown()
        return {**self.chunk_stats(), "steps_after_stop": self.steps_after_stop}
