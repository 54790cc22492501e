"""Tables and plots from drlmpi run directories: ``python -m drlmpi.report PATH [PATH ...]``.

See docs/report.md. :func:`build_report` is the library entry point; ``__main__`` wraps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from drlmpi.report.checks import Check, check_section, run_checks
from drlmpi.report.csv_files import write_csv
from drlmpi.report.discovery import RunSet, discover
from drlmpi.report.jobs import Job
from drlmpi.report.markdown import render
from drlmpi.report.plots import plot_scaling, write_plots
from drlmpi.report.runs import MissingRun, Run
from drlmpi.report.scaling import SCALING_COLUMNS, Grid, find_grids, scaling_rows
from drlmpi.report.tables import (
    RUN_COLUMNS,
    RUN_TEXT,
    TABLE_COLUMNS,
    TABLE_TEXT,
    Group,
    build_table,
    comparability_notes,
    find_baselines,
    group_runs,
    run_rows,
)

__all__ = ["NoRunsError", "Report", "build_report", "discover", "Run", "MissingRun", "Job",
           "RunSet", "Group", "Grid"]


class NoRunsError(RuntimeError):
    """No run directory (and no jobs.json) under the given paths."""


@dataclass
class Report:
    out: Path
    runset: RunSet
    groups: list[Group]
    rows: list[dict]
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    grids: list[Grid] = field(default_factory=list)   # the ranks x envs-per-rank scaling grids
    checks: list[Check] = field(default_factory=list)  # the health checks (report.md's last section)

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def text_summary(self) -> str:
        rs = self.runset
        lines = [f"drlmpi.report: {len(rs.runs)} complete run(s) in {len(self.groups)} group(s), "
                 f"{len(rs.missing)} missing/partial, {len(rs.failed_jobs)} failed job(s)"
                 + (f", {len(rs.skipped_jobs)} skipped job(s)" if rs.skipped_jobs else ""),
                 f"  report: {self.out / 'report.md'}",
                 "  files:  " + ", ".join(p.name for p in self.files if p.name != "report.md")]
        for m in rs.missing:
            ws = "?" if m.world_size is None else m.world_size
            lines.append(f"  missing: {m.path} ({m.algo}/{m.env}/{m.topology}, {ws} rank(s), "
                         f"seed {m.seed}: {m.reason})")
        for job in rs.failed_jobs:
            lines.append(f"  failed:  {job.describe()}: {' '.join(job.overrides)} ({job.run_dir or '?'})")
        for job in rs.skipped_jobs:
            lines.append(f"  skipped: {' '.join(job.overrides)}: {job.reason}")
        if self.notes:
            lines.append(f"  {len(self.notes)} comparability warning(s) (settings differ between runs of "
                         "one env+algo): see report.md")
        for warning in rs.warnings:
            lines.append(f"  warning: {warning}")
        lines.append(f"  checks: {len(self.checks) - len(self.failed_checks)} passed, "
                     f"{len(self.failed_checks)} failed (report.md, Health checks)")
        return "\n".join(lines)


def build_report(paths: list[Path], out: Path | None = None, baseline: str = "sequential") -> Report:
    """Read every run under ``paths`` and write report.md, runs.csv, table.csv and the PNGs to ``out``
    (default ``<paths[0]>/report``), plus scaling.csv and scaling_*.png when some runs form a
    ranks x envs-per-rank grid. Raises :class:`NoRunsError` when nothing is found."""
    paths = [Path(p) for p in paths]
    runset = discover(paths)
    if runset.empty():
        raise NoRunsError("no run directories (summary.json or .hydra/config.yaml) under "
                          + " ".join(str(p) for p in paths)
                          + (f" ({'; '.join(runset.warnings)})" if runset.warnings else ""))
    out = Path(out) if out is not None else paths[0] / "report"
    out.mkdir(parents=True, exist_ok=True)
    groups = group_runs(runset.runs, runset.missing)
    rows = build_table(groups, baseline)
    baselines = find_baselines(groups, baseline)
    files = [out / "report.md", out / "table.csv", out / "runs.csv"]
    write_csv(files[1], rows, TABLE_COLUMNS, TABLE_TEXT)
    write_csv(files[2], run_rows(runset.runs), RUN_COLUMNS, RUN_TEXT)
    files += write_plots(groups, baselines, baseline, out)
    grids = find_grids(runset.runs)
    scaling_plots: dict[tuple[str, str], Path] = {}
    if grids:
        files.append(out / "scaling.csv")
        write_csv(files[-1], scaling_rows(grids), SCALING_COLUMNS)
        scaling_plots = plot_scaling(grids, out)
        files += list(scaling_plots.values())
    notes = comparability_notes(groups)
    text = render(groups, runset, baselines, baseline, notes, paths, grids,
                  {key: path.name for key, path in scaling_plots.items()})
    checks = run_checks(runset)
    files[0].write_text("\n".join([text, *check_section(checks)]) + "\n")
    return Report(out=out, runset=runset, groups=groups, rows=rows, files=files, notes=notes, grids=grids,
                  checks=checks)
