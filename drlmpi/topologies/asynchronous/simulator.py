"""The simulator of ``topology=async`` (also a group's simulator in ``topology=groups``): it
steps its environments and sends fixed-size chunks with nonblocking sends, at most ``slots`` in
flight and no more than the credits the learner granted, and loads the newest weights whenever
they arrive (see :mod:`drlmpi.topologies.asynchronous`).
"""

from __future__ import annotations

import numpy as np

from drlmpi.mpi.timed import Request
from drlmpi.mpi.wire import (
    STOP,
    ChunkHeader,
    CreditMessage,
    PackedMessage,
    Tag,
    WeightsHeader,
    int64_message,
)
from drlmpi.topologies.asynchronous.settings import AsyncChunkFields
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.reports import RankReport, simulator_report

LEARNER_RANK = 0


class AsyncSimulator:
    """A simulator of ``topology=async`` (or of an async group): chunks of ``settings.sync_every``
    steps, at most ``settings.slots`` in flight."""

    def __init__(self, ctx: RunContext, settings: AsyncChunkFields) -> None:
        self.ctx = ctx
        self.comm = ctx.comm
        self.every = settings.sync_every
        self.slots = settings.slots
        self.actor = ctx.make_actor()
        rows = self.every * ctx.cfg.env.num_envs
        self.pool = [PackedMessage(ChunkHeader, (rows, self.actor.layout.width)) for _ in range(self.slots)]
        self.pool_req: list[Request | None] = [None] * self.slots
        self.weights = PackedMessage(WeightsHeader, (self.actor.weights.size,))
        self.control = int64_message(CreditMessage)
        self.credit_limit = self.slots
        self.version = 0
        self.sent = 0
        self.weights_received = 0
        self.stop_after_weights: int | None = None  # set by STOP: weights messages to expect
        self.unsent_steps = 0
        # An on-policy simulator acts only with a credit in hand, so no chunk waits for one
        # with the weights it was acted with getting older (a replay-based one collects ahead).
        self.credit_first = self.actor.algo.rollout_updates() is not None
        self.weights_req: Request | None = None
        self.control_req: Request | None = None

    def _load_weights(self) -> None:
        self.weights_received += 1
        self.actor.load_weights(self.weights.payload)
        self.version = int(self.weights.header[WeightsHeader.VERSION])
        self.actor.set_global_steps(int(self.weights.header[WeightsHeader.ENV_STEPS]), self.comm.size - 1)

    def _post_weights(self) -> Request:
        return self.comm.Irecv(self.weights.buffer, source=LEARNER_RANK, tag=Tag.WEIGHTS, kind="weights")

    def _post_control(self) -> Request:
        return self.comm.Irecv(self.control, source=LEARNER_RANK, tag=Tag.CONTROL, kind="control")

    def _on_control(self) -> bool:
        """Apply a control message; True if it was STOP (no control receive is re-posted)."""
        kind, value = int(self.control[CreditMessage.KIND]), int(self.control[CreditMessage.VALUE])
        if kind == STOP:
            self.stop_after_weights = value
            return True
        self.credit_limit = max(self.credit_limit, value)
        return False

    def _wait_for_credit(self) -> None:
        """Out of credit: wait for a credit or STOP, loading weights that arrive meanwhile."""
        comm = self.comm
        while self.sent >= self.credit_limit and self.stop_after_weights is None:
            index = comm.waitany([self.control_req, self.weights_req])
            if index == 0:
                self.control_req = None if self._on_control() else self._post_control()
            else:
                self._load_weights()
                self.weights_req = self._post_weights()

    def _poll(self) -> None:
        """Load the newest weights and apply control messages that have arrived."""
        comm = self.comm
        while comm.test(self.weights_req):  # newest weights win
            self._load_weights()
            self.weights_req = self._post_weights()
        while self.control_req is not None and comm.test(self.control_req):
            self.control_req = None if self._on_control() else self._post_control()

    def run(self) -> RankReport:
        comm = self.comm
        weights_req = self._post_weights()
        comm.wait(weights_req)  # start from the learner's initial weights
        self._load_weights()
        self.weights_req, self.control_req = self._post_weights(), self._post_control()
        slot = 0
        while self.stop_after_weights is None:
            if self.credit_first:
                self._wait_for_credit()
                self._poll()
                if self.stop_after_weights is not None:
                    break
            rows = self.actor.collect(self.every, "steps")
            self._wait_for_credit()
            if self.stop_after_weights is not None:
                self.unsent_steps = len(rows)  # simulated, but the run ended before it could go
                break
            if self.pool_req[slot] is not None:
                comm.wait(self.pool_req[slot])
            msg = self.pool[slot]
            msg.header[ChunkHeader.POLICY_VERSION] = self.version
            msg.header[ChunkHeader.ROWS] = len(rows)
            msg.header[ChunkHeader.SEQUENCE] = self.sent
            msg.header[ChunkHeader.SIMULATOR_STEPS] = self.actor.steps
            msg.payload[: len(rows)] = rows
            self.pool_req[slot] = comm.Isend(msg.buffer, dest=LEARNER_RANK, tag=Tag.EXPERIENCE,
                                             kind="experience")
            self.sent += 1
            slot = (slot + 1) % self.slots
            self._poll()
        weights_req = self.weights_req
        for req in self.pool_req:
            if req is not None:
                comm.wait(req)
        while self.weights_received < self.stop_after_weights:
            comm.wait(weights_req)
            self._load_weights()
            weights_req = self._post_weights() if self.weights_received < self.stop_after_weights else None
        if weights_req is not None:
            comm.cancel(weights_req)
        comm.Send(np.array([self.sent], dtype=np.int64), dest=LEARNER_RANK, tag=Tag.DONE, kind="control")
        self.actor.close()
        report = simulator_report(comm.rank, self.actor)
        report.extra.update({"chunks_sent": self.sent, "unsent_steps": self.unsent_steps})
        return report
