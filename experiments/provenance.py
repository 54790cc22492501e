"""Write ``provenance.json`` into a study's artifact folder: the command that produced it, the
commit, the date, the machine (CPU model, cores, GPUs with their driver, clocks, power limit and
MIG mode) and the library versions.

    python experiments/provenance.py OUT_DIR -- COMMAND...

The commit is ``$DRLMPI_COMMIT`` when set (a copied working tree may carry a stale ``.git``),
else ``git rev-parse HEAD`` with ``+dirty`` when the tree has uncommitted changes.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path


def _run(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _commit() -> str:
    if os.environ.get("DRLMPI_COMMIT"):
        return os.environ["DRLMPI_COMMIT"]
    head = _run("git", "rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if _run("git", "status", "--porcelain", "--untracked-files=no") else "")


def _cpu_model() -> str:
    for line in _run("lscpu").splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("torch", "numpy", "gymnasium", "mpi4py", "ale_py", "mujoco", "hydra"):
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "?")
        except ImportError:
            out[name] = None
    try:
        from mpi4py import MPI

        out["mpi_library"] = MPI.Get_library_version().strip().splitlines()[0].strip("\x00 ")
    except ImportError:
        out["mpi_library"] = None
    return out


#: what nvidia-smi tells of each GPU beside its name: two hosts with the same GPU model ran the
#: same DQN round 25% apart (docs/results/h200host_bind_ranks), and clocks, power limits, the
#: driver or MIG are where such a difference shows
GPU_FIELDS = ("driver_version", "clocks.max.sm", "clocks.max.memory", "power.limit", "mig.mode.current",
              "pcie.link.gen.current", "memory.total")


def _gpu_details() -> list[dict[str, str]]:
    """One ``{field: value}`` per GPU (:data:`GPU_FIELDS`; empty without nvidia-smi)."""
    lines = _run("nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader")
    return [dict(zip(GPU_FIELDS, (v.strip() for v in line.split(",")), strict=False))
            for line in lines.splitlines() if line.strip()]


def provenance(command: list[str]) -> dict[str, object]:
    gpus = [g for g in _run("nvidia-smi", "--query-gpu=name", "--format=csv,noheader").splitlines() if g]
    return {"command": " ".join(command), "commit": _commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "gpus": gpus,
                        "gpu_details": _gpu_details(), "host": platform.node()},
            "versions": _versions()}


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    (out / "provenance.json").write_text(json.dumps(provenance(argv[2:]), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
