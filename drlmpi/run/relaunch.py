"""``python -m drlmpi world_size=N`` started alone: the job's ranks are started by re-executing
the command under the launch command (``DRLMPI_MPIEXEC``, default ``mpiexec``) with ``-n N``."""

from __future__ import annotations

import os
import sys

from drlmpi.config.overrides import find, values


def requested_world_size(argv: list[str]) -> int | None:
    """The one ``world_size=N`` of a single run's overrides (``None``: not given, or a sweep's)."""
    override = find(argv, "world_size")
    chosen = values(override) if override is not None else None
    return chosen[0] if chosen and len(chosen) == 1 and isinstance(chosen[0], int) else None


def relaunch_under_mpiexec(argv: list[str], ranks: int) -> None:
    """``python -m drlmpi world_size=N`` started alone: re-execute under the launch command
    (``DRLMPI_MPIEXEC``, default ``mpiexec``) with ``-n N``."""
    from drlmpi.job_control.launchers import launch_command

    cmd = launch_command(ranks, [sys.executable, "-m", "mpi4py", "-m", "drlmpi", *argv])
    print(f"drlmpi: world_size={ranks}: starting {' '.join(cmd)}", file=sys.stderr, flush=True)
    try:
        os.execvp(cmd[0], cmd)
    except FileNotFoundError:
        sys.exit(f"drlmpi: error: {missing_launcher(cmd[0])}")


def missing_launcher(name: str) -> str:
    """What to do when the launch command ``name`` is not there."""
    from drlmpi.job_control.launchers import MPIEXEC_ENV

    return (f"world_size>1 needs {name!r} on PATH (pip install mpich), or another launch command in "
            f"{MPIEXEC_ENV}, or start the job with your MPI launcher")
