"""Find the run directories and launcher records under the paths a report is asked for.

Folders are searched at any depth (a Hydra multirun sweep nests them); the search does not
descend into a run directory (:func:`~drlmpi.report.runs.is_run_dir`), and each directory is
read once however many paths reach it. A ``jobs.json`` (written by the sweep launcher) anywhere
in the tree adds its jobs: their non-zero-return jobs as *failed jobs*, and each job's record
to the missing run of its directory. Where runs of one env+algo differ in ``num_envs``, the
setting becomes part of their env label; where runs of one cell differ in an algorithm option,
the option becomes part of their algo label.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from drlmpi.report.jobs import Job, read_jobs
from drlmpi.report.runs import MissingRun, Run, is_run_dir, load_run
from drlmpi.sweep.jobs import JOBS_FILE


@dataclass
class RunSet:
    """What :func:`discover` found: complete and missing runs, launcher jobs, warnings."""

    runs: list[Run] = field(default_factory=list)
    missing: list[MissingRun] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failed_jobs(self) -> list[Job]:
        return [j for j in self.jobs if j.failed]

    @property
    def skipped_jobs(self) -> list[Job]:
        return [j for j in self.jobs if j.skipped]

    def empty(self) -> bool:
        return not (self.runs or self.missing or self.jobs)


def with_part(label: str, part: str, sep: str) -> str:
    """``label`` with ``part`` added inside its brackets after ``sep`` (``cartpole[sim=1ms envs=4]``),
    or in brackets of its own (``cartpole[envs=4]``)."""
    return f"{label[:-1]}{sep}{part}]" if label.endswith("]") else f"{label}[{part}]"


def label_swept_num_envs(runs: list[Run]) -> None:
    """Where runs of one env+algo differ in ``num_envs`` (the PPO-Tetris ranks x envs grid),
    make it part of the env label (``cartpole[envs=4]``) so each setting is its own group."""
    by_pair: dict[tuple[str, str], set[Any]] = {}
    for run in runs:
        by_pair.setdefault((run.env, run.algo), set()).add(run.get("num_envs"))
    for run in runs:
        if len(by_pair[(run.env, run.algo)]) > 1:
            run.env = with_part(run.env, f"envs={run.get('num_envs')}", " ")


def algo_settings(run: Run) -> dict[str, str]:
    """The run's algorithm options as written, from its typed settings (:attr:`Run.settings`:
    defaults filled in, so a run saved before an option existed reads its default), without
    ``_target_`` and ``name``; none for a run whose saved config cannot be read."""
    algo = None if run.settings is None else run.settings.algo
    if algo is None:
        return {}
    values = asdict(algo) if is_dataclass(algo) else dict(algo)
    return {key: _written(value) for key, value in values.items() if key not in ("_target_", "name")}


def _written(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_written(v) for v in value) + "]"
    return str(value)


def label_swept_algo_settings(runs: list[Run]) -> None:
    """Where runs of one cell (env, algo label, topology, world size) differ in an algorithm
    option (a sweep of ``algo.lr=1e-4,3e-4``), add each differing option to their algo label
    (``dqn[lr=0.0001]``), so that settings are never averaged together as seeds."""
    cells: dict[tuple[str, str, str, int], list[tuple[Run, dict[str, str]]]] = {}
    for run in runs:
        settings = algo_settings(run)
        if settings:  # a run without its config cannot say: it keeps its label
            cells.setdefault(run.key, []).append((run, settings))
    for members in cells.values():
        shared = set.intersection(*(set(s) for _, s in members))
        differ = sorted(k for k in shared if len({s[k] for _, s in members}) > 1)
        if not differ:
            continue
        for run, settings in members:
            run.algo = with_part(run.algo, ",".join(f"{k}={settings[k]}" for k in differ), ",")


def discover(paths: list[Path]) -> RunSet:
    """Every run directory and ``jobs.json`` under ``paths`` (each directory read once)."""
    found = RunSet()
    seen: set[Path] = set()
    for root in paths:
        root = Path(root)
        if not root.is_dir():
            found.warnings.append(f"{root}: not a directory, skipped")
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            real = here.resolve()
            if real in seen:
                dirnames[:] = []
                continue
            seen.add(real)
            if JOBS_FILE in filenames:
                jobs, warning = read_jobs(here / JOBS_FILE)
                found.jobs.extend(jobs)
                if warning:
                    found.warnings.append(warning)
            if is_run_dir(here):
                dirnames[:] = []
                item = load_run(here)
                (found.runs if isinstance(item, Run) else found.missing).append(item)
                if isinstance(item, Run) and item.training_error:
                    found.warnings.append(item.training_error)
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    found.runs.sort(key=lambda r: str(r.path))
    found.missing.sort(key=lambda r: str(r.path))
    label_swept_num_envs(found.runs)
    label_swept_algo_settings(found.runs)
    by_dir = {job.resolved_dir(): job for job in found.jobs}
    for m in found.missing:
        job = by_dir.get(m.path.resolve())
        if job is not None:
            m.launcher = job.describe() + (f": {job.reason}" if job.reason else "")
            m.world_size = job.ranks if job.ranks is not None else m.world_size
    return found
