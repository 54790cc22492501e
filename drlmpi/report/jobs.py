"""The sweep launcher's records: ``jobs.json`` at a sweep root and each job's ``job.log``.

``hydra_plugins/drlmpi_launcher`` writes ``jobs.json``: a list of
``{"overrides": [...], "returncode": int | null, "run_dir": str, "log_tail": str, ...}``, plus
``status`` (``ok`` / ``failed`` / ``skipped`` / ``reused`` / ``dry_run``, and ``queued`` /
``running`` while the sweep goes on), ``reason`` (why a job was skipped or reused) and
``ranks`` when it knows them. Each job's stdout and stderr go to
``<run_dir>/job.log``, whose first line is ``$ <the command>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drlmpi.config.errors import ConfigError
from drlmpi.config.overrides import find, value_text
from drlmpi.sweep.jobs import read_records

JOB_LOG = "job.log"
RANK_FLAGS = ("-n", "-np", "--np", "-N", "--ntasks")


@dataclass
class Job:
    """One ``jobs.json`` record."""

    source: Path
    overrides: list[str]
    returncode: Any
    run_dir: str
    log_tail: str
    status: str = ""
    reason: str = ""
    ranks: int | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed" or self.returncode not in (0, None)

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"

    def resolved_dir(self) -> Path | None:
        """``run_dir``, a relative one taken from the folder of ``jobs.json`` if it exists there."""
        if not self.run_dir:
            return None
        path = Path(self.run_dir)
        if not path.is_absolute() and (self.source.parent / path).exists():
            path = self.source.parent / path
        return path.resolve()

    def describe(self) -> str:
        state = self.status or ("failed" if self.failed else "ok")
        return f"{state}, return code {self.returncode}" if self.returncode is not None else state


def read_jobs(path: Path) -> tuple[list[Job], str | None]:
    """Every record of a ``jobs.json`` and a warning line when it cannot be read."""
    records, problem = read_records(path)
    jobs = []
    for rec in records:
        ranks = rec.get("ranks")
        jobs.append(Job(source=path, overrides=[str(o) for o in rec.get("overrides") or []],
                        returncode=rec.get("returncode"), run_dir=str(rec.get("run_dir") or ""),
                        log_tail=str(rec.get("log_tail") or "").rstrip(), status=str(rec.get("status") or ""),
                        reason=str(rec.get("reason") or ""),
                        ranks=int(ranks) if isinstance(ranks, int) else None))
    return jobs, problem


def job_log_command(run_dir: Path) -> tuple[int | None, list[str]]:
    """Ranks and Hydra overrides from the ``$ mpiexec -n N ... -m drlmpi k=v ...`` line of job.log."""
    try:
        with open(run_dir / JOB_LOG, errors="replace") as f:
            first = f.readline()
    except OSError:
        return None, []
    if not first.startswith("$ "):
        return None, []
    tokens = first[2:].split()
    ranks = None
    for flag, value in zip(tokens, tokens[1:]):
        if flag in RANK_FLAGS and value.isdigit():
            ranks = int(value)
            break
    after = tokens[tokens.index("drlmpi") + 1:] if "drlmpi" in tokens else []
    return ranks, [t for t in after if "=" in t and not t.startswith("hydra.")]


def override_value(overrides: list[str], key: str) -> str | None:
    """The value of ``key=...`` (or ``+key=``/``++key=``) among Hydra overrides, as Hydra's
    grammar reads it (``None`` if absent, a sweep, or unreadable)."""
    try:
        found = find(overrides, key)
    except ConfigError:
        return None
    return None if found is None else value_text(found)
