"""Which MPI library a launcher command belongs to, and the flags drlmpi adds for it: binding off
for jobs packed side by side (the sweep launcher), and Open MPI's ``--oversubscribe`` for a job
of more ranks than this machine's CPUs, which Open MPI refuses without it ("not enough slots")
where MPICH runs it (``python -m drlmpi world_size=N`` and every sweep job).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from drlmpi.job_control.process import usable_cpus

#: launcher commands whose MPI library is asked for its flavour (``exe --version``)
MPIEXEC_NAMES = ("mpiexec", "mpirun", "mpiexec.hydra", "orterun", "prterun", "mpiexec.mpich",
                 "mpirun.mpich", "mpiexec.openmpi", "mpirun.openmpi")
#: each flavour's flags that switch its own process binding off
NO_BIND_ARGS = {"openmpi": ["--bind-to", "none"], "mpich": ["-bind-to", "none"]}

_FLAVOURS: dict[str, str] = {}


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
