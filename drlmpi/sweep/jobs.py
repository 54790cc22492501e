"""``jobs.json``: the record of every job of a sweep (its overrides, run directory, ranks, status,
exit code, log tail), written by the launcher as the sweep goes and read by the report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any  # noqa: UP035 (OmegaConf needs typing generics)

import yaml

LOG_TAIL_LINES = 15
JOBS_FILE = "jobs.json"


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """A finished run's ``summary.json`` (``None`` when absent or unreadable)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def stopped_by_signal(run_dir: Path, since: float) -> bool:
    """Whether the run in ``run_dir`` stopped on a signal with a checkpoint, by the
    ``summary.json`` it wrote after ``since`` (epoch seconds): what a launcher's exit code does
    not always say (MPICH's ``mpiexec`` passes on the run's exit code 4; Open MPI's ``mpirun``,
    signalled with its job, exits with 1)."""
    try:
        if (run_dir / "summary.json").stat().st_mtime < since:
            return False  # an earlier run's, not this job's
    except OSError:
        return False
    summary = read_summary(run_dir)
    return summary is not None and summary.get("stop_reason") == "signal"


def recorded_overrides(run_dir: Path) -> list[str] | None:
    """The overrides a run directory was made with (``.hydra/overrides.yaml``), if known; without
    ``run.overwrite=``, which says how the run started, not what it ran."""
    try:
        value = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(value, list):
        return None
    return [str(v) for v in value if not str(v).startswith("run.overwrite=")]


def read_records(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """Every record of a ``jobs.json``, and a warning line when it cannot be read."""
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return [], f"{path}: unreadable ({exc})"
    if not isinstance(records, list):
        return [], f"{path}: expected a list of jobs"
    return [r for r in records if isinstance(r, dict)], None


def write_records(path: Path, earlier: list[dict[str, Any]], current: list[dict[str, Any]]) -> None:
    """``jobs.json``: the earlier records with those of this launch's run directories replaced
    (a resumed sweep lists each job once, with its latest outcome; a reused job keeps what its
    earlier record says of the run - command, seconds, start and end)."""
    mine = {r["run_dir"] for r in current}
    old = {r.get("run_dir"): r for r in earlier}
    current = [{**old[r["run_dir"]], **{k: v for k, v in r.items() if v is not None}}
               if r.get("status") == "reused" and r["run_dir"] in old else r for r in current]
    records = [r for r in earlier if r.get("run_dir") not in mine] + current
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(records, indent=2) + "\n")
    tmp.replace(path)
