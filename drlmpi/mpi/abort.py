"""How a job ends when it cannot go on: the exit codes of ``python -m drlmpi`` and the one-line
message, printed before ``MPI_Abort`` takes every rank down.
"""

from __future__ import annotations

# Importing the schema registers every option's default with Hydra (conf/ builds on them).

CRASH_EXIT = 1  # a rank raised
CONFIG_ERROR_EXIT = 2  # the configuration was refused before any communication
HANG_EXIT = 3  # a rank made no progress for run.rank_timeout_s (its watchdog ended the job)
CONFIG_ERROR_GRACE_S = 3.0
# Before MPI_Abort kills the job, give the launcher a moment to forward the line just printed:
# under load an immediate abort can lose a rank's last output.
ABORT_FLUSH_S = 0.5
