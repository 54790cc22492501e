"""The MPI launch command, in one place: every launch drlmpi makes - ``python -m drlmpi
world_size=N`` re-executing itself, each job of a sweep, the planner's probes and calibration -
starts its ranks with :func:`launch_command`, whose launcher is :func:`mpiexec_command`
(``DRLMPI_MPIEXEC``, default ``mpiexec``). Here too: which MPI library a launcher belongs to, and
the flags drlmpi adds for it: binding off for jobs packed side by side (the sweep launcher), and
Open MPI's ``--oversubscribe`` for a job of more ranks than this machine's CPUs, which Open MPI
refuses without it ("not enough slots") where MPICH runs it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shlex
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from drlmpi.config.errors import ConfigError
from drlmpi.job_control.process import usable_cpus

#: the environment variable naming the launch command, split as a shell splits words
MPIEXEC_ENV = "DRLMPI_MPIEXEC"
DEFAULT_MPIEXEC = "mpiexec"
#: variables that named a launcher before DRLMPI_MPIEXEC: refused in one line, never ignored
RETIRED_ENV = ("DRLMPI_PLAN_MPIEXEC",)
#: launcher commands whose MPI library is asked for its flavour (``exe --version``)
MPIEXEC_NAMES = ("mpiexec", "mpirun", "mpiexec.hydra", "orterun", "prterun", "mpiexec.mpich",
                 "mpirun.mpich", "mpiexec.openmpi", "mpirun.openmpi")
#: each flavour's flags that switch its own process binding off
NO_BIND_ARGS = {"openmpi": ["--bind-to", "none"], "mpich": ["-bind-to", "none"]}

_FLAVOURS: dict[str, str] = {}
#: set while the sweep launcher composes and checks its jobs (:func:`checking_sweep_jobs`)
_IN_SWEEP: contextvars.ContextVar[bool] = contextvars.ContextVar("drlmpi_in_sweep", default=False)


def mpiexec_command() -> list[str]:
    """The launch command: ``DRLMPI_MPIEXEC`` split into words (``mpirun --bind-to none``), else
    ``mpiexec``. :class:`ConfigError` in one line for an empty or unreadable value, or for a retired
    variable that is still set (it would otherwise be ignored without a word)."""
    for name in RETIRED_ENV:
        if name in os.environ:
            value = shlex.quote(os.environ[name])
            raise ConfigError(f"{name} is no longer read: set {MPIEXEC_ENV} instead, the one launch command "
                              f"of runs, sweeps and the planner ({MPIEXEC_ENV}={value})")
    text = os.environ.get(MPIEXEC_ENV, DEFAULT_MPIEXEC)
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{MPIEXEC_ENV}={text!r} cannot be split into words: {exc}") from None
    if not words:
        raise ConfigError(f"{MPIEXEC_ENV} is empty: name the launch command, e.g. {MPIEXEC_ENV}=mpiexec "
                          f"or {MPIEXEC_ENV}='mpirun --bind-to none'")
    return words


def launch_command(ranks: int, program: Sequence[str], launcher: Sequence[str] | None = None,
                   ranks_flag: str = "-n", unbind: bool = False, extra: Sequence[str] = ()) -> list[str]:
    """``launcher ranks_flag RANKS [flags] extra program``: the command that starts ``program`` on
    ``ranks`` ranks. ``launcher`` defaults to :func:`mpiexec_command`; the flags are the MPI
    library's binding off (``unbind``) and Open MPI's ``--oversubscribe`` when the ranks exceed the
    CPUs, each left out where the launcher already has it."""
    launcher = list(launcher or mpiexec_command())
    exe = launcher[0]
    binding = NO_BIND_ARGS.get(mpi_flavour(exe), []) if unbind else []
    if binding and binding[0] in launcher:
        binding = []
    oversubscribe = [a for a in oversubscribe_args(exe, ranks) if a not in launcher]
    return [*launcher, ranks_flag, str(ranks), *binding, *oversubscribe, *extra, *program]


@contextlib.contextmanager
def checking_sweep_jobs() -> Iterator[None]:
    """While the sweep launcher composes and checks its jobs: a job's size is its ``world_size=``
    (:func:`size_refusal` says so), not a launch command."""
    token = _IN_SWEEP.set(True)
    try:
        yield
    finally:
        _IN_SWEEP.reset(token)


def size_refusal(needs: str, have: int, fits: int, *overrides: str, more: bool = False) -> str:
    """The line refusing a job of ``have`` ranks where ``needs`` (``topology=p2p needs exactly 2
    ranks``) and ``fits`` ranks would do (``more``: or more): in a sweep, the job's ``world_size=``;
    elsewhere the launch command that would start it right."""
    if _IN_SWEEP.get():
        return f"{needs} (world_size={fits}{' or more' if more else ''}), the job has world_size={have}"
    try:
        launcher = mpiexec_command()
    except ConfigError:
        launcher = [DEFAULT_MPIEXEC]
    command = shlex.join([*launcher, "-n", str(fits), "python", "-m", "mpi4py", "-m", "drlmpi", *overrides])
    return f"{needs}, but the job has {have}: launch it with '{command}'"


def mpi_flavour(exe: str) -> str:
    """``openmpi``, ``mpich`` or ``other`` for a launcher command (asks ``exe --version`` once)."""
    if Path(exe).name not in MPIEXEC_NAMES:
        return "other"  # srun, aprun, ...: binding is the resource manager's
    if exe not in _FLAVOURS:
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
            text = (out.stdout + out.stderr).lower()
        except (OSError, subprocess.SubprocessError):
            text = ""
        if any(k in text for k in ("open mpi", "open-mpi", "openrte", "prrte")):
            _FLAVOURS[exe] = "openmpi"
        elif "hydra" in text or "mpich" in text:
            _FLAVOURS[exe] = "mpich"
        else:
            _FLAVOURS[exe] = "other"
    return _FLAVOURS[exe]


def oversubscribe_args(exe: str, ranks: int, cpus: int | None = None) -> list[str]:
    """``["--oversubscribe"]`` when ``exe`` is Open MPI's and ``ranks`` exceed ``cpus`` (default:
    the CPUs this process may run on), else nothing. Open MPI counts a slot per core and refuses
    a job of more ranks; MPICH starts them (drlmpi's waiting ranks yield their core:
    :func:`~drlmpi.job_control.process.yield_when_oversubscribed`)."""
    if cpus is None:
        cpus = len(usable_cpus())
    return ["--oversubscribe"] if ranks > cpus and mpi_flavour(exe) == "openmpi" else []


def parse_cores(cores: Any) -> int | None:
    """``cores`` option: ``None`` (one job at a time), ``auto``/``all`` or a positive integer."""
    if cores is None or str(cores).lower() in ("null", "none", ""):
        return None
    if str(cores).lower() in ("auto", "all"):
        return len(usable_cpus())
    try:
        value = int(cores)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise ValueError(f"hydra.launcher.cores must be null, 'auto' or an integer >= 1, got {cores!r}")
    return value


#: the sweep launcher's settings that take one of a few words
LAUNCHER_CHOICES = {"invalid": ("skip", "fail"), "bind": ("auto", "none"),
                    "order": ("auto", "cost", "listed")}
#: its settings in seconds (null: none)
LAUNCHER_SECONDS = ("timeout_s", "deadline_s")


def check_launcher_setting(key: str, value: Any) -> None:
    """Raise ValueError, in one line, for a value ``hydra.launcher.KEY`` does not take (its
    word settings, ``cores`` and its seconds; other keys pass)."""
    if key in LAUNCHER_CHOICES and value not in LAUNCHER_CHOICES[key]:
        *first, last = (repr(choice) for choice in LAUNCHER_CHOICES[key])
        raise ValueError(f"hydra.launcher.{key} must be {', '.join(first)} or {last}, got {value!r}")
    if key == "cores":
        parse_cores(value)
    if key in LAUNCHER_SECONDS and value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise ValueError(f"hydra.launcher.{key} must be null or a number of seconds > 0, got {value!r}")
