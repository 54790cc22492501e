"""A rank that stops making progress ends the job (``run.rank_timeout_s``).

A rank can stop without raising: an environment that never returns from ``step``, a deadlock
between ranks, a peer that died without MPI noticing. Its peers then wait in a receive or a
collective forever. Every rank therefore runs a :class:`Watchdog`, a daemon thread that watches
the rank's :class:`ProgressClock` and, when no useful work has completed for too long, prints
one line and ends the whole job with ``MPI_Abort``.

*Progress* is useful work completing, recorded by the code that does it into the rank's
:class:`~drlmpi.job_control.progress.ProgressClock` (:mod:`drlmpi.job_control.progress` says what counts);
a paused clock (building a role) counts as alive until the phase ends.

The rule (see docs/failures.md, "The watchdog"):

* a rank doing its own work (not inside an MPI call) ends the job when it has made no progress
  for ``timeout_s``;
* a rank waiting inside an MPI call ends it only after ``timeout_s + grace_s``
  (:func:`grace_for`) AND only when no other rank of the job has made progress within the last
  ``timeout_s``: waiting for a busy peer is not a hang. When a peer stopped while computing
  (its board says ``running``, not ``waiting``), the waiting rank gives it until
  ``timeout_s + 2 * grace_s`` to end the job itself with the line that names where it is stuck.
  Ranks learn about each other through
  :class:`ProgressBoard`, one small file per rank in the run directory, rewritten at most every
  ``timeout_s / 10`` and read only by a rank that is about to give up.

So the rank that is stuck normally names itself, and ranks blocked in MPI speak only when the
whole job has stopped (a deadlock, or a stuck rank whose watchdog cannot run).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from drlmpi.job_control.abort import ABORT_FLUSH_S, end_job
from drlmpi.job_control.progress import PAUSED, PROGRESS, WAITING, ProgressClock

GRACE_MAX_S = 10.0  # a rank waiting in MPI waits this much longer at most...
GRACE_SHARE = 0.25  # ...or this share of the timeout, whichever is smaller,
GRACE_MIN_S = 1.0  # ...but at least this long: the stuck rank's own line and abort land first
# Before MPI_Abort kills the job, give the launcher a moment to forward the line just printed
# (as drlmpi.__main__ does for a crash).
BOARD_DIR = ".watchdog"  # in the run directory: one progress file per rank


def grace_for(timeout_s: float) -> float:
    """How much longer a rank waiting inside an MPI call waits than a computing one."""
    return min(GRACE_MAX_S, max(GRACE_MIN_S, GRACE_SHARE * timeout_s))


class ProgressBoard:
    """The job-wide view: each rank's time of last progress, one small file per rank.

    ``<directory>/rank<r>`` holds ``"<wall-clock time of last progress> <state>"`` at a fixed
    width, overwritten in place (``state`` is ``running`` while it computes, ``waiting`` while it
    waits inside MPI, ``paused`` in an untimed phase such as building its roles - alive however
    old its time, since a loaded host may not let its watchdog thread write for seconds while it
    imports - and ``ending`` once that rank's watchdog is taking the job down). Wall-clock
    times are compared across ranks, so ranks on several hosts need a shared run directory and
    synchronised clocks (NTP: skew far below the timeout); a peer whose file cannot be read
    counts as not progressing.
    """

    WIDTH = 32

    def __init__(self, directory: Path, rank: int, size: int) -> None:
        self.directory = Path(directory)
        self.rank = rank
        self.size = size
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"rank{rank}"
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def publish(self, wall_last: float, state: str = "running") -> None:
        """Record this rank's last progress (wall-clock seconds) and state."""
        if self._fd is None:
            return
        line = f"{wall_last:.3f} {state}".ljust(self.WIDTH - 1) + "\n"
        try:
            os.pwrite(self._fd, line.encode(), 0)
        except OSError:  # pragma: no cover (a full or vanished disk must not end a run)
            pass

    def read(self, rank: int) -> tuple[float, str] | None:
        """``(wall-clock time of last progress, state)`` of ``rank``, or ``None`` if unknown."""
        try:
            fields = (self.directory / f"rank{rank}").read_text().split()
            return float(fields[0]), fields[1]
        except (OSError, ValueError, IndexError):
            return None

    def peers(self) -> list[tuple[float, str]]:
        """What the other ranks last published (those that can be read)."""
        return [entry for r in range(self.size) if r != self.rank
                and (entry := self.read(r)) is not None]

    def close(self) -> None:
        """Remove this rank's file (and the directory, if this rank is the last one out)."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        for remove in (self.path.unlink, self.directory.rmdir):
            try:
                remove()
            except OSError:
                pass


class Watchdog:
    """A daemon thread that ends the job when this rank stops making progress.

    Args:
        timeout_s: seconds without progress after which a computing rank gives up.
        rank: this rank (for the message).
        on_timeout: called once, from the watchdog thread, with the one-line message; it is
            expected to end the process (:func:`end_job`).
        clock: the progress clock to watch.
        board: the job-wide view (``None`` for a single rank, or to rely on this rank alone).
        grace_s: the extra wait of a rank blocked in MPI (default :func:`grace_for`).
        tick_s: how often the thread looks (default ``timeout_s / 20``, between 0.05 and 1 s).
    """

    def __init__(self, timeout_s: float, rank: int, on_timeout: Callable[[str], None],
                 clock: ProgressClock = PROGRESS, board: ProgressBoard | None = None,
                 grace_s: float | None = None, tick_s: float | None = None) -> None:
        self.timeout_s = float(timeout_s)
        self.rank = rank
        self.on_timeout = on_timeout
        self.clock = clock
        self.board = board
        self.grace_s = grace_for(self.timeout_s) if grace_s is None else float(grace_s)
        self.tick_s = tick_s if tick_s is not None else min(1.0, max(0.05, self.timeout_s / 20))
        self.board_every_s = max(self.tick_s, self.timeout_s / 10)
        self.fired: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="drlmpi-watchdog", daemon=True)
        self._published = (None, 0.0)  # (value, monotonic time) of the last board write
        self._peers: tuple[float, list[tuple[float, str]]] = (-math.inf, [])
        self._quiet_since: float | None = None

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> Watchdog:
        """Count from now and start watching."""
        self.clock.done()
        self._publish(time.monotonic(), force=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the end of the run, or a failure being reported otherwise)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self.board is not None:
            self.board.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            now = time.monotonic()
            self._publish(now)
            message = self.check(now)
            if message is not None and not self._stop.is_set():
                self.fired = message
                if self.board is not None:
                    self.board.publish(self._wall(now, self.clock.last), "ending")
                self.on_timeout(message)
                return

    # -- the rule -----------------------------------------------------------------------------
    def check(self, now: float) -> str | None:
        """The message to end the job with, if this rank has hung as of ``now`` (monotonic)."""
        age = now - self.clock.last
        if age < self.timeout_s or self.clock.state == PAUSED:
            return None
        waiting = self.clock.state == WAITING
        if waiting and age < self.timeout_s + self.grace_s:
            return None
        peers = self._read_peers(now) if self.board is not None else []
        if any(state == "ending" for _, state in peers):
            # Another rank is taking the job down and has said why: stay quiet while its abort
            # lands, but not forever.
            self._quiet_since = self._quiet_since if self._quiet_since is not None else now
            if now - self._quiet_since < self.grace_s + ABORT_FLUSH_S + 2.0:
                return None
        wall_now = time.time()
        if waiting and any(wall_now - last < self.timeout_s or state == "paused"
                           for last, state in peers if state != "ending"):
            return None  # blocked in MPI while another rank is still working (or starting): not a hang
        if waiting and age < self.timeout_s + 2 * self.grace_s and any(s == "running" for _, s in peers):
            # A peer stopped progressing while computing (not waiting in MPI): it is the hung
            # one, and its own watchdog names where - unless its whole process is frozen. On a
            # loaded host its line can come late: give it one more grace period to say it.
            return None
        what = self.clock.describe()
        if waiting:
            what += (f", and no other rank progressed in the last {self.timeout_s:g} s"
                     if self.board is not None else "")
        return (f"drlmpi: error: rank {self.rank} made no progress for {age:.1f} s ({what}); "
                f"ending the job (run.rank_timeout_s={self.timeout_s:g})")

    # -- the job-wide view --------------------------------------------------------------------
    @staticmethod
    def _wall(now: float, monotonic_time: float) -> float:
        return time.time() - (now - monotonic_time)

    def _publish(self, now: float, force: bool = False) -> None:
        if self.board is None:
            return
        last = now if self.clock.state == PAUSED else self.clock.last  # a paused rank is alive
        state = {WAITING: "waiting", PAUSED: "paused"}.get(self.clock.state, "running")
        value, at = self._published
        if force or ((last, state) != value and now - at >= self.board_every_s):
            self.board.publish(self._wall(now, last), state)
            self._published = ((last, state), now)

    def _read_peers(self, now: float) -> list[tuple[float, str]]:
        at, peers = self._peers
        if now - at >= self.board_every_s:
            peers = self.board.peers() if self.board is not None else []
            self._peers = (now, peers)
        return peers


def start_watchdog(timeout_s: float | None, rank: int, size: int, run_dir: Path,
                   exit_code: int) -> Watchdog | None:
    """The watchdog of one run on this rank (``None`` when ``timeout_s`` is null, 0 or inf)."""
    if timeout_s is None or not 0 < float(timeout_s) < math.inf:
        return None
    board = ProgressBoard(Path(run_dir) / BOARD_DIR, rank, size) if size > 1 else None

    def end(message: str) -> None:  # one line, then every thread's stack: where this rank is stuck
        end_job(message, exit_code, abort=size > 1, stacks=True)

    return Watchdog(float(timeout_s), rank, end, board=board).start()
