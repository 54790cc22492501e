"""``python -m drlmpi.plan``: predict each topology's throughput from a short probe
(:mod:`drlmpi.planner.probe`), each topology's own pace model (``pace`` next to its ``run``;
:mod:`drlmpi.topologies.core.pace`, :mod:`drlmpi.planner.model`) and a calibration in short real jobs
(:mod:`drlmpi.planner.calibration`, :mod:`drlmpi.planner.jobs`); the command line is
:mod:`drlmpi.planner.cli`, its comparison with measured runs :mod:`drlmpi.planner.compare`."""

import os
import signal
import sys

#: this process's environment before it initialised MPI for the probe: what the planner's own
#: launches (ping-pong, calibration, measured cells) start from - an MPI singleton's variables
#: would confuse a launcher started from it
LAUNCH_ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def mpi_command(ranks: int, module: str, *args: str) -> list[str]:
    """The command of one of the planner's MPI launches: ``python -m mpi4py -m module args`` on
    ``ranks`` ranks, started by the launch command of every drlmpi launch (``DRLMPI_MPIEXEC``,
    :func:`drlmpi.job_control.launchers.launch_command`)."""
    from drlmpi.job_control.launchers import launch_command

    return launch_command(ranks, [sys.executable, "-m", "mpi4py", "-m", module, *args])


def plural(n: int, word: str) -> str:
    """``"1 rank"``, ``"4 ranks"``: a count and its word, as the planner's lines write them."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def end_on_sigterm() -> None:
    """Make SIGTERM (a batch system's, ``timeout``'s) end the planner as Ctrl-C does: an
    exception, so a launch it runs is ended with its ranks on the way out. Its launches start in
    sessions of their own, which neither signal reaches; Python's default for SIGTERM exits at
    once and left a launch's ranks running on the cores (and GPU) the next command measured."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
