"""``python -m drlmpi world_size=N`` started alone: the job's ranks are started by running the
command again under the launch command (``DRLMPI_MPIEXEC``, default ``mpiexec``) with ``-n N``;
this process stays to pass stop signals to the ranks (:func:`relaunch_under_mpiexec`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable

from drlmpi.config.overrides import find, values


def requested_world_size(argv: list[str]) -> int | None:
    """The one ``world_size=N`` of a single run's overrides (``None``: not given, or a sweep's)."""
    override = find(argv, "world_size")
    chosen = values(override) if override is not None else None
    return chosen[0] if chosen and len(chosen) == 1 and isinstance(chosen[0], int) else None


#: the signals a run stops on with a checkpoint (``run.checkpoint_on_signal``)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
#: ``prctl``'s option that signals a process when its parent dies (Linux)
PR_SET_PDEATHSIG = 1


def relaunch_under_mpiexec(argv: list[str], ranks: int) -> None:
    """``python -m drlmpi world_size=N`` started alone: run the job under the launch command
    (``DRLMPI_MPIEXEC``, default ``mpiexec``) with ``-n N`` and exit with its code.

    The launcher runs in a session of its own, and this process passes each stop signal
    (SIGTERM, SIGINT, SIGUSR1) to the job's ranks on this host, not to the launcher: Open MPI's
    ``mpirun`` answers SIGTERM and SIGINT by killing its ranks, so a scheduler's or ``timeout``'s
    SIGTERM to ``python -m drlmpi`` would lose the run; the ranks stop at their next safe point
    with a checkpoint (exit 4). Where no rank is found (none started yet; not Linux) the launcher
    gets the signal. If this process is killed, the launcher is killed with it (SIGKILL)."""
    from drlmpi.job_control.launchers import launch_command
    from drlmpi.job_control.process import signal_ranks

    cmd = launch_command(ranks, [sys.executable, "-m", "mpi4py", "-m", "drlmpi", *argv])
    print(f"drlmpi: world_size={ranks}: starting {' '.join(cmd)}", file=sys.stderr, flush=True)
    try:
        launcher = subprocess.Popen(cmd, start_new_session=True, preexec_fn=killed_with_parent())
    except FileNotFoundError:
        sys.exit(f"drlmpi: error: {missing_launcher(cmd[0])}")

    def forward(signum: int, _frame: object) -> None:
        if not signal_ranks(launcher.pid, signum):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(launcher.pid, signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, forward)
    code = launcher.wait()
    sys.exit(code if code >= 0 else 128 - code)


def killed_with_parent() -> Callable[[], None] | None:
    """What the launcher runs before its program: asking Linux for SIGKILL when the relaunching
    process dies (``prctl``, its library loaded here: nothing is imported after the fork);
    ``None`` where there is no ``prctl``."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def missing_launcher(name: str) -> str:
    """What to do when the launch command ``name`` is not there."""
    from drlmpi.job_control.launchers import MPIEXEC_ENV

    return (f"world_size>1 needs {name!r} on PATH (pip install mpich), or another launch command in "
            f"{MPIEXEC_ENV}, or start the job with your MPI launcher")
