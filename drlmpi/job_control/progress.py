"""The progress clock of a rank: when it last completed useful work, and what it is doing now.

*Progress* is useful work completing, recorded by the code that does it (one
``time.monotonic()`` store, plus a short label of what is being done, set on entry):

* an MPI operation completing (:class:`~drlmpi.mpi.timed.TimedComm`): a blocking call returning, a
  ``wait``, or a ``test`` / ``testsome`` / ``waitany`` that completed at least one request (a
  poll that finds nothing complete is not progress);
* an environment step or reset finishing (:class:`~drlmpi.roles.actor.Actor`, evaluation);
* every few learner updates of a batch (:meth:`~drlmpi.roles.learner.Learner.train_exactly`).

Building a role (networks and optimizer - the first ``Adam`` imports ``torch._dynamo``, seconds
-, environments, a device) is not measured: the clock is *paused* (:meth:`ProgressClock.paused`)
and the rank counts as alive until the phase ends. The rank's watchdog
(:mod:`drlmpi.job_control.watchdog`) reads the clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# ProgressClock.state values
AFTER, WORKING, WAITING, PAUSED = 0, 1, 2, 3


class ProgressClock:
    """When this rank last completed useful work, and what it is doing now.

    Written by the main thread on the hot path (an MPI call, an environment step), read by the
    watchdog thread. :meth:`begin` names the work being entered (a ``%``-format and its
    arguments, formatted only if the watchdog reports it); :meth:`done` records that it
    completed. Each is a few attribute stores: an attribute store is atomic under the GIL, and
    the watchdog tolerates reading one call's label with another's state.
    """

    __slots__ = ("last", "what", "state")

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.what: tuple[Any, ...] = ("start-up",)
        self.state = AFTER

    def begin(self, *what: Any) -> None:
        """Entering work of this rank's own (computing): ``begin("env.step of environment %d", i)``."""
        self.what = what
        self.state = WORKING

    def wait(self, *what: Any) -> None:
        """Entering an MPI call that may wait for other ranks."""
        self.what = what
        self.state = WAITING

    def done(self) -> None:
        """The work entered last completed: progress."""
        self.last = time.monotonic()
        self.state = AFTER

    @contextmanager
    def paused(self, *what: Any) -> Iterator[None]:
        """A phase the watchdog does not time (building a role): the rank counts as alive
        until it ends, which is progress. Phases may nest; nothing inside may call
        :meth:`begin`, :meth:`wait` or :meth:`done` (they would end the pause)."""
        outer = (self.what, self.state)
        self.what, self.state = what, PAUSED
        try:
            yield
        finally:
            self.last = time.monotonic()
            self.what, self.state = outer if outer[1] == PAUSED else (what, AFTER)

    def describe(self) -> str:
        """What this rank is doing (or did last), in words."""
        what, state = self.what, self.state
        try:
            text = what[0] % what[1:] if len(what) > 1 else str(what[0])
        except (TypeError, ValueError):  # pragma: no cover (a label torn by a concurrent write)
            text = str(what[0])
        return {AFTER: "after ", WORKING: "in ", WAITING: "waiting in ", PAUSED: "in "}.get(state, "") + text


#: The progress clock of this process (one rank per process): TimedComm, the Actor, evaluation
#: and the Learner record into it; the watchdog of a run reads it.
PROGRESS = ProgressClock()
