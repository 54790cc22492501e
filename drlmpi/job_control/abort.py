"""How a job ends when it cannot go on: the exit codes of ``python -m drlmpi``, and
:func:`end_job` - the one place that prints why, and takes every rank down with ``MPI_Abort``."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from typing import NoReturn

CRASH_EXIT = 1  # a rank raised
CONFIG_ERROR_EXIT = 2  # the configuration was refused before any communication
HANG_EXIT = 3  # a rank made no progress for run.rank_timeout_s (its watchdog ended the job)
SIGNAL_EXIT = 4  # stopped by SIGTERM, SIGUSR1 or Ctrl-C with a checkpoint written (resume= continues)
NON_FINITE_EXIT = 5  # experience, a loss or the policy weights were NaN or infinite: the run stopped
SWEEP_FAILED_EXIT = 6  # a sweep (the sweeping process) ended with a job that failed, each named in a line
CONFIG_ERROR_GRACE_S = 3.0
# Before MPI_Abort kills the job, give the launcher a moment to forward the line just printed:
# under load an immediate abort can lose a rank's last output.
ABORT_FLUSH_S = 0.5


def end_job(message: str | None, exit_code: int, abort: bool, stacks: bool = False) -> NoReturn:
    """Print ``message`` (if any) to stderr - with ``stacks``, followed by every thread's Python
    stack (where a rank that stopped answering is stuck) - then end this process with
    ``exit_code`` and, with ``abort`` (a job of several ranks), every other rank of the job:
    ``MPI_Abort`` works from any thread, even while the main thread is blocked in a collective.
    """
    try:
        if message:
            print(message, file=sys.stderr, flush=True)
        if stacks:
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
    finally:
        if abort:
            time.sleep(ABORT_FLUSH_S)
            try:
                from mpi4py import MPI

                MPI.COMM_WORLD.Abort(exit_code)
            except BaseException:  # noqa: BLE001 (nothing may stop the exit below)
                pass
        if threading.current_thread() is threading.main_thread():
            sys.exit(exit_code)
        os._exit(exit_code)  # a thread (the watchdog): sys.exit would end only the thread
