"""``provenance.json``: where a sweep's results came from - the command, the commit, the date, the
machine (CPU model, cores, each GPU with its driver, clocks, power limit and MIG mode) and the
library versions. The sweep launcher writes one into every sweep directory it starts; a sweep
continued in the same directory keeps the earlier launches' records under ``earlier``.

The commit is ``$DRLMPI_COMMIT`` when set (a copied working tree may carry a stale ``.git``), else
``git rev-parse`` of drlmpi's own checkout with ``+dirty`` when it has uncommitted changes, else
``unknown`` (an installed package: ``versions.drlmpi`` then says which). Nothing here needs a GPU,
``nvidia-smi``, git or ``lscpu``: what cannot be read is left empty. Nothing here imports torch
or initialises MPI (the sweeping process never does).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from drlmpi.job_control.process import usable_cpus

FILE = "provenance.json"
#: the packages whose versions decide a run's speed and results (as imported: as installed)
DISTRIBUTIONS = {"drlmpi": "drlmpi", "torch": "torch", "numpy": "numpy", "gymnasium": "gymnasium",
                 "mpi4py": "mpi4py", "ale_py": "ale-py", "mujoco": "mujoco", "hydra": "hydra-core",
                 "omegaconf": "omegaconf"}
#: what nvidia-smi tells of each GPU beside its name: two hosts with the same GPU model ran the
#: same DQN round 25% apart, and clocks, power limits, the driver or MIG are where that shows
GPU_FIELDS = ("name", "driver_version", "clocks.max.sm", "clocks.max.memory", "power.limit",
              "mig.mode.current", "pcie.link.gen.current", "memory.total")
SOURCE = Path(__file__).resolve().parent.parent.parent  # drlmpi's checkout (or site-packages)


def _output(*cmd: str, cwd: Path | None = None) -> str:
    """``cmd``'s standard output, stripped; '' when it cannot run or fails."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=cwd,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def commit() -> str:
    """``$DRLMPI_COMMIT``, else the checkout's short commit (``+dirty`` with uncommitted changes)."""
    if os.environ.get("DRLMPI_COMMIT"):
        return os.environ["DRLMPI_COMMIT"]
    head = _output("git", "rev-parse", "--short", "HEAD", cwd=SOURCE)
    if not head:
        return "unknown"
    dirty = _output("git", "status", "--porcelain", "--untracked-files=no", cwd=SOURCE)
    return head + ("+dirty" if dirty else "")


def cpu_model() -> str:
    for line in _output("lscpu").splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def gpus() -> list[dict[str, str]]:
    """One ``{field: value}`` per GPU (:data:`GPU_FIELDS`); none without nvidia-smi."""
    lines = _output("nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader")
    return [dict(zip(GPU_FIELDS, (v.strip() for v in line.split(",")), strict=False))
            for line in lines.splitlines() if line.strip()]


def versions() -> dict[str, str | None]:
    """Python's and each distribution's version (``None``: not installed), and the MPI library's
    (asked in a process of its own: importing ``mpi4py.MPI`` here would initialise MPI)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name, distribution in DISTRIBUTIONS.items():
        try:
            out[name] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            out[name] = None
    library = _output(sys.executable, "-c", "import mpi4py; mpi4py.rc.initialize = False; "
                      "from mpi4py import MPI; print(MPI.Get_library_version().strip().splitlines()[0])")
    out["mpi_library"] = library.strip("\x00 ") or None
    return out


def record(command: list[str], launcher: list[str] | None = None) -> dict[str, Any]:
    """The provenance of ``command`` run now on this machine (``launcher``: its MPI launch command)."""
    gpu_list = gpus()
    result: dict[str, Any] = {
        "command": " ".join(command), "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cpus": len(usable_cpus()),
                    "host": platform.node(), "platform": platform.platform(),
                    "gpus": [g["name"] for g in gpu_list],
                    "gpu_details": [{k: v for k, v in g.items() if k != "name"} for g in gpu_list],
                    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")},
        "versions": versions(),
    }
    if launcher is not None:
        result["launcher"] = launcher
    return result


def write(folder: Path, command: list[str], launcher: list[str] | None = None) -> Path:
    """Write ``folder/provenance.json`` for ``command``; a record already there (an earlier launch
    into the same folder) is kept, with its own earlier ones, under ``earlier``."""
    path = folder / FILE
    new = record(command, launcher)
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = None
    if isinstance(old, dict):
        new["earlier"] = [*old.pop("earlier", []), old]
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(new, indent=1) + "\n")
    return path
