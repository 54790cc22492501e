"""``report.md``: the main table, the learning and throughput tables, the scaling grids (ranks x
envs per rank), the DQN paper's runtime-table layout, missing runs, failed jobs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from drlmpi.outputs.figures import fmt, percent, table
from drlmpi.report.curves import metric_file, training_metrics
from drlmpi.report.discovery import RunSet
from drlmpi.report.jobs import Job
from drlmpi.report.labels import topology_class
from drlmpi.report.returns import returns_section
from drlmpi.report.runs import MissingRun
from drlmpi.report.scaling import Cell, Grid, strong_missing, weak_missing
from drlmpi.report.tables import Group, paper_columns, paper_header
from drlmpi.report.train_returns import train_returns_section
from drlmpi.report.trials import trials_section

# (row key, header, decimals; None = as is, "%" = share as percent)
MAIN_COLUMNS: list[tuple[str, str, Any]] = [
    ("env", "env", None), ("algo", "algo", None), ("topology", "topology", None),
    ("world_size", "ranks", None), ("n", "n", None), ("solved", "solved", None),
    ("max_env_steps", "budget (steps)", None),
    ("train_s_mean", "train s", 1), ("threshold_s_mean", "to threshold s", 1),
    ("threshold_steps_mean", "to threshold steps", 0),
    ("speedup_fixed", "speedup (fixed budget)", 2), ("efficiency_fixed", "efficiency", 2),
    ("speedup_threshold", "speedup (to threshold)", 2), ("efficiency_threshold", "efficiency (thr.)", 2),
    ("env_steps_per_s", "env steps/s", 0), ("updates_per_s", "updates/s", 1),
    ("mpi_wait_share", "MPI wait", "%"), ("policy_lag_mean", "policy lag", 1),
]
PLOTS = {
    "return_vs_time.png": "Greedy evaluation return vs training wall-clock",
    "return_vs_steps.png": "Greedy evaluation return vs job-wide environment steps",
    "speedup.png": "Speedup vs ranks (thick: fixed budget, thin dashed: to threshold; dotted: ideal)",
    "time_breakdown.png": "Where rank time goes, per topology",
    "train_return_vs_time.png": "Training episode return (mean of the last 100 episodes; Atari: raw "
                                "game scores) vs training wall-clock",
    "train_return_vs_steps.png": "Training episode return (mean of the last 100 episodes; Atari: raw "
                                 "game scores) vs job-wide environment steps",
}


def fmt_steps(value: Any) -> str:
    """Env steps compactly: 850, 5.1k, 35k, 1.20M."""
    if value is None or isinstance(value, str):
        return "-" if value is None else value
    value = float(value)
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def spread(row: dict[str, Any], key: str, show: Any) -> str:
    """``median [min-max]`` of ``<key>_median``/``_min``/``_max`` (``-`` without values)."""
    median, low, high = row[f"{key}_median"], row[f"{key}_min"], row[f"{key}_max"]
    if median is None:
        return "-"
    return f"{show(median)} [{show(low)}-{show(high)}]" if low != high else show(median)


LEARNING_HEADER = ["env", "algo", "topology", "ranks", "solved/run",
                   "steps to threshold: median [min-max]", "s to threshold: median [min-max]",
                   "budget (steps)", "budget met", "speedup to threshold (medians)"]


def learning_table(groups: list[Group], missing: list[MissingRun]) -> list[str]:
    """One row per cell: solved runs, steps and seconds to threshold, the budget verdict. Cells
    with only missing runs get a row too."""
    rows, seen = [], set()
    for g in groups:
        r = g.row
        seen.add(g.key)
        solved = f"{r['solved']}/{r['n']}" + (f" (+{r['missing']} missing)" if r["missing"] else "")
        budget = fmt_steps(r["budget_env_steps"])
        if r["budget_env_steps"] is not None and r["budget_source"] != "budget_env_steps":
            budget += " (run)"
        rows.append([g.env, g.algo, g.topology, str(g.world_size), solved,
                     spread(r, "threshold_steps", fmt_steps),
                     spread(r, "threshold_s", lambda v: f"{v:,.1f}"), budget, r["budget_met"],
                     fmt(r["speedup_threshold_median"], 2)])
    lost: dict[tuple, int] = defaultdict(int)
    for m in missing:
        key = (m.env, m.algo, m.topology, m.world_size)
        if key not in seen:
            lost[key] += 1
    for (env, algo, topology, ws), count in sorted(lost.items(), key=str):
        rows.append([env, algo, topology, "?" if ws is None else str(ws), f"0/0 (+{count} missing)",
                     "-", "-", "-", "incomplete", "-"])
    return table(LEARNING_HEADER, rows)


THROUGHPUT_COLUMNS: list[tuple[str, str, Any]] = [
    ("env", "env", None), ("algo", "algo", None), ("topology", "topology", None),
    ("world_size", "ranks", None), ("n", "n", None), ("env_steps_per_s", "env steps/s", 0),
    ("updates_per_s", "updates/s", 1), ("speedup_throughput", "speedup", 2),
    ("efficiency_throughput", "efficiency", 2), ("ceiling_env_steps_per_s", "raw-stepping ceiling", 0),
    ("mpi_wait_share", "MPI wait", "%"),
]


def throughput_table(groups: list[Group]) -> list[str]:
    return table([h for _, h, _ in THROUGHPUT_COLUMNS],
                 [[fmt(g.row[k], d) for k, _, d in THROUGHPUT_COLUMNS] for g in groups])


def main_table(groups: list[Group]) -> list[str]:
    return table([h for _, h, _ in MAIN_COLUMNS],
                 [[fmt(g.row[k], d) for k, _, d in MAIN_COLUMNS] for g in groups])


def paper_table(columns: list[Group], baselines: dict) -> list[str]:
    header = [""] + [paper_header(g, baselines) for g in columns]
    rows = [
        ["t(s)"] + [fmt(g.row["train_s_mean"], 1) for g in columns],
        ["Speedup"] + [fmt(g.row["speedup_fixed"], 2) for g in columns],
        ["t to threshold (s)"] + [fmt(g.row["threshold_s_mean"], 1) for g in columns],
        ["Speedup to threshold"] + [fmt(g.row["speedup_threshold"], 2) for g in columns],
        ["n (solved)"] + [f"{g.row['n']} ({g.row['solved']})" for g in columns],
    ]
    return table(header, rows)


def paper_tables(groups: list[Group], baselines: dict, baseline: str) -> list[str]:
    by_pair: dict[tuple[str, str], list[Group]] = defaultdict(list)
    for g in groups:
        by_pair[g.pair].append(g)
    out = ["## Runtime tables in the DQN paper's layout", "",
           f"`Standard` = {baseline} on the fewest ranks; the other columns of the first table are "
           "the topologies that name a column of the paper's table (`2 Processes`: 1 learner and 1 "
           "simulator exchanging point to point, `MP(n)`: 1 learner and n-1 simulators); the others "
           "are columns `label(ranks)` of the second table. `t(s)` = mean training seconds (fixed "
           "budget), `Speedup` = Standard's t(s) / t(s); the threshold rows use the solved runs only.",
           ""]
    for (env, algo), pair_groups in by_pair.items():
        main, other = paper_columns(pair_groups, baselines)
        out += [f"### {env} / {algo}", ""]
        if main:
            out += paper_table(main, baselines) + [""]
        if other:
            out += ["Other topologies:", ""] + paper_table(other, baselines) + [""]
    return out


def topology_sections(groups: list[Group]) -> list[str]:
    """The sections the topologies of these runs add to the report (``report_section`` of the
    class a run's ``topology._target_`` names, given that topology's runs: ``(env / algo,
    topology label, run)``), in the order the topologies first appear."""
    by_class: dict[Any, list[tuple[str, str, Any]]] = {}
    for g in groups:
        for run in g.runs:
            cls = topology_class(run.config)
            if callable(getattr(cls, "report_section", None)):
                by_class.setdefault(cls, []).append((f"{g.env} / {g.algo}", g.name, run))
    out: list[str] = []
    for cls, runs in by_class.items():
        out += cls.report_section(runs)
    return out


def _ranks(grid: Grid, world_size: int) -> str:
    """``N``, plus ``(W simulating)`` when fewer ranks step environments."""
    workers = {c.workers for (ws, _), c in grid.cells.items() if ws == world_size}
    simulating = max(workers, default=world_size)
    return str(world_size) if simulating == world_size else f"{world_size} ({simulating} simulating)"


def _grid_table(grid: Grid, show) -> list[str]:
    """Rows: world sizes; columns: envs per rank; cells: ``show(cell)`` (``-``: no run)."""
    header = ["ranks"] + [f"e={e}" for e in grid.envs_per_rank]
    rows = [[_ranks(grid, ws)] + [("-" if grid.cell(ws, e) is None else show(grid.cell(ws, e)))
                                  for e in grid.envs_per_rank] for ws in grid.world_sizes]
    return table(header, rows)


def _samples_cell(cell: Cell) -> str:
    text = fmt(cell.sps, 0)
    if cell.ceiling is not None and cell.fraction is not None:
        text += f" (ceiling {fmt(cell.ceiling, 0)}: {percent(cell.fraction)})"
    return text


def scaling_grid(grid: Grid, plot: str | None) -> list[str]:
    """One grid's tables: samples/s (with the ceiling), weak scaling, strong scaling."""
    counts = sorted({len(c.runs) for c in grid.cells.values()})
    runs = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    out = [f"### {grid.title}", "",
           f"Samples/s (env steps per training second, job-wide; mean over {runs} run(s) per cell), "
           "rows: ranks, columns: `e` = environments per simulating rank"
           + ("; `ceiling`: the same cell without learning (raw stepping), and this cell's share of it"
              if any(c.ceiling is not None for c in grid.cells.values()) else "") + ":", ""]
    out += _grid_table(grid, _samples_cell) + [""]
    out += [f"- {note}" for note in grid.notes] + ([""] if grid.notes else [])
    if any(c.weak is not None for c in grid.cells.values()):
        bases = {c.num_envs: c.weak_base for c in grid.cells.values() if c.weak_base is not None}
        base = (f"N0 = {next(iter(bases.values()))} rank(s)" if len(set(bases.values())) == 1 else
                "N0 per column: " + ", ".join(f"e={e}: {n}" for e, n in sorted(bases.items())))
        out += [f"Weak scaling (same envs per rank), efficiency E = sps(N, e) / (W / W0 x sps(N0, e)), "
                f"{base}:", ""]
        out += _grid_table(grid, lambda c: fmt(c.weak, 2)) + [""]
    else:
        out += [weak_missing(grid), ""]
    strong = grid.strong_rows()
    if strong:
        out += ["Strong scaling (same total environments T = W x e over more ranks), speedup "
                "S = sps(N, T / W) / sps(N_min, T / W_min), efficiency S / (W / W_min):", ""]
        out += table(["total envs", "ranks", "envs/rank", "samples/s", "speedup", "efficiency"],
                     [[str(c.total), _ranks(grid, c.world_size), str(c.num_envs), fmt(c.sps, 0),
                       fmt(c.strong, 2), fmt(c.strong_efficiency, 2)] for c in strong]) + [""]
    else:
        out += [strong_missing(grid), ""]
    if plot:
        out += [f"![Scaling of {grid.title}]({plot})", ""]
    return out


def scaling_section(grids: list[Grid], plots: dict[tuple[str, str], str]) -> list[str]:
    """``## Scaling``: every ranks x envs-per-rank grid (nothing when there is none)."""
    if not grids:
        return []
    out = ["## Scaling: ranks x environments per rank", "",
           "Per env, algo and topology whose runs differ in ranks or in environments per rank. "
           "sps = mean `env_steps_per_s` (job-wide env steps / training seconds) of a cell; N = "
           "ranks, W = ranks that step environments, e = `num_envs` (environments per simulating "
           "rank). Weak scaling keeps e fixed and compares with the fewest ranks N0 (1.00 = linear); "
           "strong scaling keeps the total T = W x e and splits it over more ranks. See "
           "docs/report.md.", ""]
    for grid in grids:
        out += scaling_grid(grid, plots.get((grid.env, grid.algo)))
    return out


def _code_block(text: str, indent: str = "  ") -> list[str]:
    return [indent + "```", *(indent + line for line in text.splitlines()), indent + "```"]


def missing_section(missing: list[MissingRun]) -> list[str]:
    out = [f"## Missing or partial runs ({len(missing)})", ""]
    if not missing:
        return out + ["None: every run directory has a summary.json.", ""]
    out += ["Run directories without a readable `summary.json` (crashed, killed or still running); "
            "not in the tables or plots.", ""]
    for m in missing:
        ws = "?" if m.world_size is None else m.world_size
        out.append(f"- `{m.path}`: {m.algo} / {m.env} / {m.topology}, {ws} rank(s), seed {m.seed} "
                   f"- {m.reason}")
        if m.launcher:
            out.append(f"  - launcher (jobs.json): {m.launcher}")
        if m.overrides:
            out.append("  - overrides: `" + " ".join(m.overrides) + "`")
        if m.last_eval:
            out.append(f"  - metrics.csv {m.last_eval}")
        if m.log_tail:
            out += ["  - tail of rank0.log:", *_code_block(m.log_tail, "    ")]
        else:
            rank0 = m.path / "rank0.log"
            out.append("  - rank0.log " + ("is empty" if rank0.is_file() else "not found"))
        if m.job_log_tail:
            out += ["  - tail of job.log (the launcher's capture of every rank's output):",
                    *_code_block(m.job_log_tail, "    ")]
    return out + [""]


def jobs_section(failed: list[Job], skipped: list[Job]) -> list[str]:
    out = []
    if failed:
        out += [f"## Failed launcher jobs ({len(failed)})", "",
                "Entries of the launcher's `jobs.json` that failed (non-zero return code).", ""]
        for job in failed:
            out.append(f"- {job.describe()}: `{' '.join(job.overrides) or '(no overrides)'}`"
                       f" - run dir `{job.run_dir or '?'}` (from `{job.source}`)")
            if job.reason:
                out.append(f"  - reason: {job.reason}")
            if job.log_tail:
                out += ["  - log tail:", *_code_block(job.log_tail, "    ")]
        out.append("")
    if skipped:
        out += [f"## Skipped launcher jobs ({len(skipped)})", "",
                "Jobs the launcher did not start: combinations that cannot run, or the sweep's "
                "deadline had passed.", ""]
        out += [f"- `{' '.join(job.overrides) or '(no overrides)'}`: {job.reason}" for job in skipped]
        out.append("")
    return out


def render(groups: list[Group], runset: RunSet, baselines: dict, baseline: str,
           notes: list[str], inputs: list[Path], grids: list[Grid] | None = None,
           scaling_plots: dict[tuple[str, str], str] | None = None) -> str:
    out = ["# drlmpi report", "",
           f"Inputs: {', '.join(f'`{p}`' for p in inputs)}. {len(runset.runs)} complete run(s) in "
           f"{len(groups)} group(s), {len(runset.missing)} missing/partial, "
           f"{len(runset.failed_jobs)} failed and {len(runset.skipped_jobs)} skipped launcher job(s). "
           f"Baseline: `{baseline}`.", "",
           "## Results per (env, algo, topology, ranks)", "",
           "Means over the runs (seeds) of each group; time/steps to threshold over solved runs only. "
           "Speedup = baseline mean / group mean; efficiency = speedup / ranks. "
           "See docs/report.md for every column.", ""]
    out += main_table(groups) + [""] if groups else ["No complete runs.", ""]
    if notes:
        out += ["**Comparability warnings**: the means and speedups above mix runs whose settings "
                "differ:", ""]
        out += [f"- {n}" for n in notes] + [""]
    if groups or runset.missing:
        out += ["## Learning: solved runs, steps and time to threshold", "",
                "Per cell: solved runs / complete runs (+ run directories without a summary); steps "
                "and training seconds to the reward threshold over the solved runs, median [min-max]; "
                "the budget is the study's `budget_env_steps`, else the run's `run.max_env_steps` "
                "(`(run)`); budget met = the median steps to threshold, an unsolved run counting as "
                f"never, is within it; speedup = {baseline}'s median seconds to threshold / this "
                "cell's.", ""]
        out += learning_table(groups, runset.missing) + [""]
    if groups:
        out += ["## Throughput", "",
                f"Mean env steps/s and updates/s over training time; speedup = env steps/s / {baseline}'s "
                "(same env and algo), efficiency = speedup / ranks; raw-stepping ceiling = the "
                "highest env steps/s at this env and world size among runs that never updated "
                "(`algo=random`).", ""]
        out += throughput_table(groups) + [""]
    out += returns_section(groups)
    out += train_returns_section(groups)
    out += topology_sections(groups)
    out += trials_section(runset.runs, inputs)
    out += scaling_section(grids or [], scaling_plots or {})
    if groups:
        out += paper_tables(groups, baselines, baseline)
    out += ["## Plots", ""]
    for name, title in PLOTS.items():
        out += [f"### {title}", "", f"![{title}]({name})", ""]
    for metric in training_metrics(groups):
        title = f"Training metric {metric} vs job-wide environment steps (TensorBoard train/{metric})"
        out += [f"### {title}", "", f"![{title}]({metric_file(metric)})", ""]
    out += missing_section(runset.missing)
    out += jobs_section(runset.failed_jobs, runset.skipped_jobs)
    if runset.warnings:
        out += ["## Warnings", ""] + [f"- {w}" for w in runset.warnings] + [""]
    return "\n".join(out)
