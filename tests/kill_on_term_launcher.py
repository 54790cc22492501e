"""A launch command that behaves as Open MPI 4.1's ``mpirun`` does on SIGTERM and SIGINT: it kills
its ranks at once, no checkpoint (tests/test_relaunch_signal.py). Otherwise it is ``mpiexec``:
``python tests/kill_on_term_launcher.py -n N PROGRAM...``."""

import os
import signal
import subprocess
import sys

proc = subprocess.Popen(["mpiexec", *sys.argv[1:]], start_new_session=True)


def kill_ranks(signum, frame):
    os.killpg(proc.pid, signal.SIGKILL)
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, kill_ranks)
signal.signal(signal.SIGINT, kill_ranks)
sys.exit(proc.wait())
