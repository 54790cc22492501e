"""A stop asked for by a signal (``run.checkpoint_on_signal``): SIGTERM, SIGUSR1 or SIGINT
(Ctrl-C) on any rank, or on the launcher that forwards it, makes the run stop at the learner's
next safe point as a budget would, with a checkpoint (docs/scaling-out.md).

Each rank's handler only records the signal - MPI is never called from a handler. The decision
is rank 0's: the learner's ``stop_reason()`` asks :meth:`StopRequest.requested`, which sees rank
0's own signal or the request file another rank's handler wrote into the run directory (a rank
that alone got the signal; the file system is the run directory's, shared as checkpoints need).
The stop then travels to every rank in the topology's own control messages.

The same signal arriving again within ``REPEAT_S`` (a launcher forwarding what the terminal
already sent every rank) is the same request; a later Ctrl-C aborts at once (exit 130).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
REQUEST_FILE = "stop_request"
REPEAT_S = 2.0
LOOK_EVERY_S = 0.2  # rank 0 looks for another rank's request file at most this often
ABORT_EXIT = 130  # a second Ctrl-C: the conventional exit status of an interrupted program


class StopRequest:
    """This process's record of a stop signal (one per process: :data:`STOP`)."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self.received_at = 0.0
        self.rank = 0
        self.file: Path | None = None
        self._next_look = 0.0
        self._previous: dict[int, object] = {}
        #: set on every rank once the run stopped on a signal and its checkpoint is written
        self.stopped_run = False

    def install(self, run_dir: Path | str, rank: int) -> bool:
        """Handle the stop signals on this rank (main thread only); rank 0 removes a request
        file an earlier part of this run left. Returns whether the handlers are installed."""
        self.signal_name, self.rank, self.stopped_run = None, rank, False
        self.file = Path(run_dir) / REQUEST_FILE
        if rank == 0:
            self.file.unlink(missing_ok=True)
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return True

    def uninstall(self) -> None:
        """Give the signals back their previous handlers."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if self.signal_name is not None:
            if signum == signal.SIGINT and now - self.received_at > REPEAT_S:
                os.write(2, b"drlmpi: interrupted again: aborting without a checkpoint\n")
                os._exit(ABORT_EXIT)
            return
        self.signal_name, self.received_at = name, now
        if self.rank == 0:
            os.write(2, f"drlmpi: {name}: stopping at the next safe point with a checkpoint "
                        f"(Ctrl-C again to abort)\n".encode())
        elif self.file is not None:
            # Written whole, then renamed into place: rank 0 polls for the file and must never
            # read it between its creation and its content (it would take the empty file for
            # a SIGTERM).
            partial = self.file.with_name(f"{self.file.name}.rank{self.rank}")
            try:
                partial.write_text(name)
                os.replace(partial, self.file)
            except OSError:  # the run directory cannot be written: the job's own error will say
                pass

    def clear_file(self) -> None:
        """Rank 0, once the stop is handled: remove another rank's request file."""
        if self.rank == 0 and self.file is not None:
            self.file.unlink(missing_ok=True)

    def requested(self) -> str | None:
        """The name of the signal that asked this run to stop (rank 0: also one another rank
        received), or ``None``."""
        if self.signal_name is None and self.rank == 0 and self.file is not None:
            now = time.monotonic()
            if now >= self._next_look:
                self._next_look = now + LOOK_EVERY_S
                try:
                    self.signal_name = self.file.read_text().strip() or "SIGTERM"
                    self.received_at = now
                except OSError:
                    pass
        return self.signal_name


#: the stop request of this process
STOP = StopRequest()


def stopped_by_signal_line(signal_name: str, run_dir: Path | str) -> str:
    """What rank 0 prints after the checkpoint of a signal stop."""
    return (f"drlmpi: stopped by {signal_name}: checkpoint written; continue with "
            f"python -m drlmpi resume={run_dir}")

