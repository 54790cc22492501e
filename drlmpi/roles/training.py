"""The learner's updates: run them settled (counted when done) or queued on a device while the
caller goes on (:meth:`Training.train` with ``settle=False``, settled by :meth:`Training.settle`),
with their time in ``learn_s`` and progress for the watchdog as they go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from drlmpi.algos.exchange import GradientExchange
from drlmpi.device.staging import DeviceSpan
from drlmpi.job_control.progress import PROGRESS
from drlmpi.roles.stopping import Stopping

# A batch of updates records progress for the watchdog at least every this many updates
# (rounded up to a multiple of algo.updates_per_graph), so a long batch is not one silent step.
UPDATES_PER_PROGRESS = 32


class Training(Stopping):
    """The updates part of :class:`~drlmpi.roles.learner.Learner` (which sets the attributes
    below)."""

    exchange: GradientExchange
    pending_updates: int
    learn_s: float
    last_metrics: Mapping[str, float]
    mpi_clock: Callable[[], float]
    _unsettled: list[DeviceSpan]

    def train(self, max_updates: int | None = None, settle: bool = True, ahead: int = 1) -> int:
        """Run the updates the stored data entitles (at most ``max_updates``); returns count.
        ``settle=False``: on a device that queues updates, return once they are queued; the
        caller goes on (receiving the next rows) while they run and calls :meth:`settle`
        before it needs their result. ``ahead``: how many such batches may be queued at once
        (the oldest is waited for first when more would be)."""
        n = self.pending_updates if max_updates is None else min(self.pending_updates, max_updates)
        self.train_exactly(n, settle, ahead)
        self.pending_updates -= n
        return n

    def train_free(self) -> None:
        """One update regardless of what the data entitles (a free-running learner; the
        algorithm must be :meth:`~drlmpi.algos.base.Algorithm.ready_to_update`)."""
        self.train_exactly(1)

    def train_exactly(self, n: int, settle: bool = True, ahead: int = 1) -> None:
        """``n`` updates (a parameter server runs as many as its workers: its exchange brings
        their gradients in, steps and broadcasts; the algorithm's target networks follow).
        ``settle``, ``ahead``: see :meth:`train` (a learner exchanging gradients always settles)."""
        queue = not settle and self.algo.queues_updates and not self.exchange.crosses_ranks
        self._settle_done(keep=max(0, ahead - 1) if queue and n > 0 else 0)
        if n <= 0:
            return
        if queue:
            span = DeviceSpan(self.algo.device)
            self._queue(n)
            self._unsettled.append(span.end())
            return
        # Their time, less MPI, is charged to learn_s.
        t0, mpi0 = time.perf_counter(), self.mpi_clock()
        self._queue(n)
        PROGRESS.begin("learner updates (waiting for the device)")
        self.algo.synchronize()  # a device queues updates: count them when they are done
        PROGRESS.done()
        self.learn_s += (time.perf_counter() - t0) - (self.mpi_clock() - mpi0)

    def _queue(self, n: int) -> None:
        """Run (on a device: queue) ``n`` updates in parts of UPDATES_PER_PROGRESS (a multiple of
        algo.updates_per_graph, so the updates run are the same), each of which is progress for
        the watchdog; gradient collectives inside them are progress of their own."""
        self.algo.set_progress(self.budget_used())
        per_graph = self.algo.updates_per_graph
        part = per_graph * -(-UPDATES_PER_PROGRESS // per_graph)
        for first in range(0, n, part):
            k = min(part, n - first)
            PROGRESS.begin("learner updates (%d to %d of a batch of %d)", first + 1, first + k, n)
            self.last_metrics = self.algo.run_updates(k, self.exchange)
            PROGRESS.done()

    def settle(self) -> float:
        """Wait for updates queued by ``train(settle=False)`` and count their device time in
        ``learn_s`` (returns it; 0 when nothing was queued). Whatever takes time off the
        training clock (an evaluation, a checkpoint) settles first, so that the wait is not
        taken off with it."""
        return self._settle_done(keep=0)

    def queued_batches(self) -> int:
        """Batches queued by ``train(settle=False)`` still running (the finished ones are counted
        in ``learn_s``; never waits)."""
        self._settle_done(keep=len(self._unsettled))
        return len(self._unsettled)

    def _settle_done(self, keep: int) -> float:
        """Count the queued batches that are done; wait for the oldest ones until at most
        ``keep`` are still queued. Returns the device seconds counted."""
        seconds = 0.0
        while self._unsettled and (len(self._unsettled) > keep or self._unsettled[0].done()):
            if len(self._unsettled) > keep:
                PROGRESS.begin("learner updates (waiting for the device)")
            seconds += self._unsettled.pop(0).seconds()
            PROGRESS.done()
        self.learn_s += seconds
        return seconds

    def finish(self) -> None:
        """At a budget stop, run the updates the last data entitled (as the sequential loop
        does), so every topology does the same number of updates for the same experience.
        After a solve they would be wasted, so they are skipped."""
        if self.stop_reason() != "solved":
            self.train()

