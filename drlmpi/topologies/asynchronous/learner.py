"""The learner of ``topology=async`` (:class:`AsyncLearner`; the topology and its protocol:
:mod:`drlmpi.topologies.asynchronous`): nonblocking receives on every simulator's slots, chunks
learned from in sending order or discarded beyond the lag bound, credits, weights published every
``publish_every`` updates, and the shutdown that leaves no request pending. topology=groups
subclasses it (its learners store chunks for their meeting instead)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from drlmpi.mpi.timed import Request
from drlmpi.mpi.wire import (
    CREDIT,
    STOP,
    ChunkHeader,
    CreditMessage,
    PackedMessage,
    Tag,
    WeightsHeader,
    int64_message,
)
from drlmpi.roles.learner import Learner
from drlmpi.topologies.asynchronous.settings import AsyncChunkFields
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.reports import RankReport, learner_report


class AsyncLearner:
    """The learner of ``topology=async``: nonblocking receives on every simulator's slots,
    chunks learned from in each simulator's sending order (or discarded beyond the lag bound),
    credits granted while the learner keeps up, weights published every ``publish_every``
    updates. ``learn_from`` and ``discard`` are what a chunk becomes; a subclass changes them
    (topology=groups stores chunks for the learners' meeting instead).

    Args:
        ctx: the rank's context (a group's, in topology=groups).
        settings: the topology's settings (async's, or groups' holding async's chunk fields).
        free: whether credits come back at once (``topology.utd_mode=free``).
        learner: the learner to feed (default: a new one of ``ctx``).
    """

    def __init__(self, ctx: RunContext, settings: AsyncChunkFields, free: bool = False,
                 learner: Learner | None = None) -> None:
        self.ctx = ctx
        self.comm = ctx.comm
        self.learner = learner or ctx.make_learner()
        self.sims = list(range(1, self.comm.size))
        self.slots = settings.slots
        self.chunk_rows = settings.sync_every * ctx.cfg.env.num_envs
        self.publish_every = settings.publish_every
        # The lag bound: configured, or for an on-policy algorithm one rollout's worth of
        # updates beyond the publication interval; replay-based algorithms keep every chunk.
        rollout_updates = self.learner.rollout_updates()
        self.lag_auto = settings.max_policy_lag is None and rollout_updates is not None
        if settings.max_policy_lag is not None:
            self.max_lag: int | None = settings.max_policy_lag
        else:
            self.max_lag = rollout_updates + self.publish_every if self.lag_auto else None
        self.free = free
        # Owed updates above which credits are withheld: configured, or the most updates one
        # chunk has entitled so far - twice that for a replay, once for an on-policy algorithm
        # (whose chunk that completes a rollout owes all its minibatches: one rollout waits
        # while another trains, so rows are at most about one rollout old when learned from).
        self.max_pending_setting = settings.max_pending_updates
        self.pending_factor = 1 if rollout_updates is not None else 2
        self.most_owed_by_a_chunk = 1
        width = self.learner.layout.width
        # Receive slots: index i -> simulator self.slot_sim[i]; always re-posted.
        self.slot_msgs = [PackedMessage(ChunkHeader, (self.chunk_rows, width))
                          for _ in self.sims for _ in range(self.slots)]
        self.slot_sim = [s for s in self.sims for _ in range(self.slots)]
        self.requests: list[Request] = []
        numel = self.learner.policy_weights().size
        self.weights_out = {s: PackedMessage(WeightsHeader, (numel,)) for s in self.sims}
        self.weights_req: dict[int, Request | None] = {s: None for s in self.sims}
        self.weights_sent = {s: 0 for s in self.sims}
        self.control_out = {s: int64_message(CreditMessage) for s in self.sims}
        self.control_req: dict[int, Request | None] = {s: None for s in self.sims}
        self.credit_limit = {s: self.slots for s in self.sims}  # chunks each sim may have sent
        self.owed_credits = {s: 0 for s in self.sims}
        self.chunks = {s: 0 for s in self.sims}
        # Chunks are learned from in each simulator's sending order (an on-policy learner needs
        # each stream's rows in time order): one that overtook its predecessor waits here.
        self.next_sequence = {s: 0 for s in self.sims}
        self.held: dict[int, dict[int, tuple[np.ndarray, int]]] = {s: {} for s in self.sims}
        self.reordered = 0
        self.last_heard = {s: time.perf_counter() for s in self.sims}
        self.discarded = 0
        self.received_rows = 0  # every chunk's rows, learned from, discarded, held or after the stop
        self.discarded_rows = 0
        self.skipped_publications = 0
        self.publications = 0
        self.steps_after_stop = 0

    # -- receiving --------------------------------------------------------------------------
    def _post(self, i: int) -> Request:
        return self.comm.Irecv(self.slot_msgs[i].buffer, source=self.slot_sim[i], tag=Tag.EXPERIENCE,
                               kind="experience")

    def _handle(self, i: int, stopping: bool = False) -> None:
        sim, msg = self.slot_sim[i], self.slot_msgs[i]
        self.chunks[sim] += 1
        self.last_heard[sim] = time.perf_counter()
        rows = msg.payload[: int(msg.header[ChunkHeader.ROWS])]
        self.received_rows += len(rows)
        version = int(msg.header[ChunkHeader.POLICY_VERSION])
        sequence = int(msg.header[ChunkHeader.SEQUENCE])
        if stopping:  # the run is over: count the chunk, learn nothing from it
            self.steps_after_stop += len(rows)
        elif sequence != self.next_sequence[sim]:
            self.held[sim][sequence] = (rows.copy(), version)
            self.reordered += 1
        else:
            self._take(sim, rows, version)
            while self.next_sequence[sim] in self.held[sim]:
                self._take(sim, *self.held[sim].pop(self.next_sequence[sim]))
        self.requests[i] = self._post(i)
        if not stopping:
            self.owed_credits[sim] += 1

    def _take(self, sim: int, rows: np.ndarray, version: int) -> None:
        """Learn from (or, beyond the lag bound, discard) simulator ``sim``'s next chunk."""
        self.next_sequence[sim] += 1
        lag = self.learner.updates - version
        if self.max_lag is not None and lag > self.max_lag:
            self.discarded += 1
            self.discarded_rows += len(rows)
            self.discard(sim, rows)
        else:
            self.most_owed_by_a_chunk = max(self.most_owed_by_a_chunk, self.learn_from(sim, rows, lag))

    def learn_from(self, sim: int, rows: np.ndarray, lag: int) -> int:
        """Store a chunk acted ``lag`` updates ago and count it; the updates it entitles."""
        return self.learner.ingest(rows, sim, policy_lag=lag)

    def discard(self, sim: int, rows: np.ndarray) -> None:
        """Count a chunk too old to learn from (its episodes are still logged)."""
        self.learner.discard(rows, sim)

    def poll(self, block: bool) -> None:
        done = [self.comm.waitany(self.requests)] if block else self.comm.testsome(self.requests)
        for i in done:
            self._handle(i)
        self._grant_credits()

    def _send_control(self, sim: int, kind: int, value: int, wait: bool = False) -> bool:
        req = self.control_req[sim]
        if req is not None:
            if wait:
                self.comm.wait(req)
            elif not self.comm.test(req):
                return False
        message = self.control_out[sim]
        message[CreditMessage.KIND], message[CreditMessage.VALUE] = kind, value
        self.control_req[sim] = self.comm.Isend(message, dest=sim, tag=Tag.CONTROL, kind="control")
        return True

    @property
    def max_pending(self) -> int:
        if self.max_pending_setting is not None:
            return self.max_pending_setting
        return self.pending_factor * self.most_owed_by_a_chunk

    def _grant_credits(self) -> None:
        if not self.free and self.learner.pending_updates > self.max_pending:
            return  # the learner is behind: simulators that run out of credit wait
        for sim, owed in self.owed_credits.items():
            if owed and self._send_control(sim, CREDIT, self.credit_limit[sim] + owed):
                self.credit_limit[sim] += owed
                self.owed_credits[sim] = 0

    # -- publishing -------------------------------------------------------------------------
    def publish(self) -> None:
        params = self.learner.policy_weights()
        for sim in self.sims:
            req = self.weights_req[sim]
            if req is not None and not self.comm.test(req):
                self.skipped_publications += 1
                continue
            msg = self.weights_out[sim]
            msg.header[WeightsHeader.ENV_STEPS] = self.learner.env_steps
            msg.header[WeightsHeader.VERSION] = self.learner.updates
            msg.payload[:] = params
            self.weights_req[sim] = self.comm.Isend(msg.buffer, dest=sim, tag=Tag.WEIGHTS, kind="weights")
            self.weights_sent[sim] += 1
        self.publications += 1

    def _burst(self, since_publish: int) -> int:
        """How many owed updates to run before polling again. A CPU learner runs one at a time
        (finest interleaving with arriving chunks). A device learner runs up to the next
        publication: it queues its updates on the GPU and each call ends by waiting for them, so
        one update per call paid a full host-device round trip each (the async learner ran at a
        third of star's rate on an H100). The publication cadence is the same either way."""
        if not self.learner.queues_updates:
            return 1
        return self.publish_every - since_publish

    # -- main loop --------------------------------------------------------------------------
    def start(self) -> None:
        """Post a receive on every slot and publish the initial weights."""
        self.requests = [self._post(i) for i in range(len(self.slot_msgs))]
        self.publish()

    def run(self) -> RankReport:
        learner = self.learner
        self.start()
        since_publish = 0
        while learner.stop_reason() is None:
            can_train = (learner.ready_to_update() if self.free else learner.pending_updates > 0)
            self.poll(block=not can_train)
            if can_train:
                if self.free:
                    learner.train_free()
                    since_publish += 1
                else:
                    since_publish += learner.train(max_updates=self._burst(since_publish))
                if since_publish >= self.publish_every:
                    self.publish()
                    since_publish = 0
            learner.maybe_evaluate()
            self.ctx.maybe_checkpoint(learner)
            self.ctx.progress()
        self.shutdown()
        learner.finish()
        now = time.perf_counter()
        stats = {
            "utd_mode": "free" if self.free else "ratio",
            "max_policy_lag": self.max_lag,
            "max_policy_lag_auto": self.lag_auto,
            **self.chunk_stats(),
            "steps_after_stop": self.steps_after_stop,
            "last_heard_s_ago": {str(s): round(now - t, 3) for s, t in self.last_heard.items()},
            "skipped_publications": self.skipped_publications,
        }
        return learner_report(self.comm.rank, learner, stats=stats)

    def chunk_stats(self) -> dict[str, Any]:
        """What became of the chunks: discarded (too old), reordered, received per simulator,
        rows received and discarded; and the weights publications."""
        return {"discarded_chunks": self.discarded, "reordered_chunks": self.reordered,
                "received_rows": self.received_rows, "discarded_rows": self.discarded_rows,
                "chunks_received": {str(s): c for s, c in self.chunks.items()},
                "publications": self.publications}

    def shutdown(self) -> None:
        comm = self.comm
        for sim in self.sims:
            self._send_control(sim, STOP, self.weights_sent[sim], wait=True)
        done_msgs = {s: np.zeros(1, dtype=np.int64) for s in self.sims}
        done_reqs = {s: comm.Irecv(done_msgs[s], source=s, tag=Tag.DONE, kind="control") for s in self.sims}
        finished: set[int] = set()
        reported: set[int] = set()
        while len(finished) < len(self.sims):
            for i in comm.testsome(self.requests):
                self._handle(i, stopping=True)
            for s, req in done_reqs.items():
                if s not in reported and comm.test(req):
                    reported.add(s)
                if s in reported and s not in finished and self.chunks[s] >= int(done_msgs[s][0]):
                    finished.add(s)
        for held in self.held.values():  # chunks that waited for a predecessor: never learned from
            self.steps_after_stop += sum(len(rows) for rows, _ in held.values())
            held.clear()
        for req in self.requests:
            comm.cancel(req)
        for req in [*self.weights_req.values(), *self.control_req.values()]:
            if req is not None:
                comm.wait(req)
