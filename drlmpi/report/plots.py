"""The report's PNG plots (matplotlib Agg, no pyplot state): :func:`write_plots` writes them all.

The learning curves (``return_vs_time.png``, ``return_vs_steps.png``, ``train_return_vs_time.png``,
``metrics_<metric>.png``) are drawn by :mod:`drlmpi.report.curves`; drawn here are the plots of
how fast the runs went and where their time went, one subplot per env+algo each:

* ``speedup.png``: speedup vs ranks per topology, with the ideal line y = x;
* ``time_breakdown.png``: simulate / learn / MPI wait / other as shares of rank wall time;
* ``scaling_<env>_<algo>.png``: per ranks x envs-per-rank grid of that env+algo (one row of
  panels per topology), samples/s, weak-scaling efficiency and strong-scaling speedup vs ranks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from drlmpi.report.curves import (
    metric_file,
    plot_returns,
    plot_train_returns,
    plot_training_metric,
    training_metrics,
)
from drlmpi.report.drawing import (
    assign_colors,
    by_pair,
    empty_figure,
    new_figure,
    save_figure,
    say,
    topology_color,
)
from drlmpi.report.scaling import Grid, strong_missing, weak_missing
from drlmpi.report.tables import Group

PLOT_FILES = ("return_vs_time.png", "return_vs_steps.png", "speedup.png", "time_breakdown.png",
              "train_return_vs_time.png", "train_return_vs_steps.png")
BREAKDOWN = [("simulate", "simulate_s", "tab:blue"), ("learn", "learn_s", "tab:orange"),
             ("MPI wait", "mpi_wait_s", "tab:red")]


def plot_speedup(groups: list[Group], baselines: dict, baseline: str, path: Path) -> None:
    pairs = by_pair(groups)
    title = "Speedup vs ranks (thick: fixed budget t(s), thin dashed: time to threshold)"
    if not pairs:
        return empty_figure(path, title)
    fig, axes = new_figure(len(pairs))
    fig.suptitle(title)
    for ax, ((env, algo), pair_groups) in zip(axes, pairs.items()):
        ax.set_title(f"{env} / {algo}")
        ax.set_xlabel("ranks (world size)")
        ax.set_ylabel(f"speedup vs {baseline}")
        ax.grid(alpha=0.3)
        base = baselines.get((env, algo))
        if base is None:
            say(ax, f"No speedup: the runs read hold no {baseline} run of {env} / {algo} to compare "
                    f"with. Run one with the same options and topology={baseline}, then report both "
                    "together (python -m drlmpi.report DIR DIR ...).")
            continue
        top = max(g.world_size for g in pair_groups)
        ax.plot([1, max(top, 2)], [1, max(top, 2)], color="grey", linestyle=":", label="ideal (y = x)")
        ax.plot([base.world_size], [1.0], marker="*", markersize=12, color="black", linestyle="none",
                label=f"{baseline} (baseline)")
        labels: dict[str, list[Group]] = defaultdict(list)
        for g in pair_groups:
            if g is not base:
                labels[g.topology].append(g)
        for label, gs in labels.items():
            gs.sort(key=lambda g: g.world_size)
            color = topology_color(label)
            # fixed budget: thick, pale, filled; to threshold: thin, dashed, hollow, drawn on top,
            # so both stay visible where they coincide (stop_on_solve runs)
            for key, suffix, style in (
                    ("speedup_fixed", "", dict(linestyle="-", linewidth=3.0, alpha=0.55, markersize=9,
                                                markerfacecolor=color)),
                    ("speedup_threshold", " (to threshold)", dict(linestyle="--", linewidth=1.3,
                                                                   markersize=5, markerfacecolor="white"))):
                pts = [(g.world_size, g.row[key]) for g in gs if isinstance(g.row[key], float)]
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, color=color, marker="o", label=label + suffix, **style)
        ax.set_xticks(sorted({g.world_size for g in pair_groups} | {1}))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="best")
    save_figure(fig, path)


def breakdown_shares(group: Group) -> dict[str, float]:
    """simulate / learn / MPI wait / other as shares of the rank wall time summed over ranks and runs."""
    sums = defaultdict(float)
    for run in group.runs:
        for rank in run.summary.get("per_rank") or []:
            for _, field, _ in BREAKDOWN:
                sums[field] += float(rank.get(field) or 0.0)
            sums["wall_s"] += float(rank.get("wall_s") or 0.0)
    wall = sums["wall_s"]
    shares = {name: (sums[field] / wall if wall > 0 else 0.0) for name, field, _ in BREAKDOWN}
    shares["other"] = max(0.0, 1.0 - sum(shares.values())) if wall > 0 else 0.0
    return shares


def plot_breakdown(groups: list[Group], path: Path) -> None:
    pairs = by_pair(groups)
    title = "Time breakdown: shares of rank wall time (summed over ranks and seeds)"
    if not pairs:
        return empty_figure(path, title)
    fig, axes = new_figure(len(pairs))
    fig.suptitle(title)
    colors = {name: color for name, _, color in BREAKDOWN} | {"other": "lightgrey"}
    overlap = False
    for ax, ((env, algo), pair_groups) in zip(axes, pairs.items()):
        shares = [breakdown_shares(g) for g in pair_groups]
        x = np.arange(len(pair_groups))
        bottom = np.zeros(len(pair_groups))
        for name in colors:
            heights = np.array([s[name] for s in shares])
            ax.bar(x, heights, bottom=bottom, color=colors[name], label=name, width=0.7)
            bottom += heights
        for xi, total in zip(x, bottom):
            if total > 1.01:
                overlap = True
                ax.text(xi, total, f"{total:.2f}", ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
        ax.set_ylim(0, max(1.08, float(bottom.max()) * 1.08))
        ax.set_xticks(x, [g.name for g in pair_groups], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("share of rank wall time")
        ax.set_title(f"{env} / {algo}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    if overlap:
        fig.suptitle(title + "\nbars above the dashed line: the ranks' timers overlap (MPI inside "
                     "updates, or a device learner's updates running while it waits for rows)", fontsize=10)
    save_figure(fig, path)


def scaling_file(env: str, algo: str, taken: set[str]) -> str:
    """``scaling_<env>_<algo>.png`` with every character outside ``[A-Za-z0-9.-]`` as ``_``
    (a numbered suffix where two labels come out the same)."""
    stem = "scaling_" + re.sub(r"[^A-Za-z0-9.-]+", "_", f"{env}_{algo}").strip("_")
    name, i = f"{stem}.png", 2
    while name in taken:
        name, i = f"{stem}_{i}.png", i + 1
    taken.add(name)
    return name


def _scaling_row(axes, grid: Grid) -> None:
    """One grid's panels: samples/s (ceilings dashed, ideal weak scaling dotted), weak-scaling
    efficiency, strong-scaling speedup, each against ranks on a log2 axis."""
    rate_ax, weak_ax, strong_ax = axes
    sizes = grid.world_sizes
    for i, envs in enumerate(grid.envs_per_rank):
        color = f"C{i % 10}"
        cells = [c for c in (grid.cell(ws, envs) for ws in sizes) if c is not None and c.sps]
        if not cells:
            continue
        xs = [c.world_size for c in cells]
        rate_ax.plot(xs, [c.sps for c in cells], color=color, marker="o", label=f"e={envs}")
        base = cells[0]
        rate_ax.plot(xs, [base.sps * c.workers / base.workers for c in cells], color=color,
                     linestyle=":", linewidth=0.9)
        ceil = [(c.world_size, c.ceiling) for c in cells if c.ceiling]
        if ceil:
            rate_ax.plot(*zip(*ceil), color=color, linestyle="--", marker="x", linewidth=1.0,
                         label=f"e={envs} ceiling (no learning)")
        weak = [(c.world_size, c.weak) for c in cells if c.weak is not None]
        if weak:
            weak_ax.plot(*zip(*weak), color=color, marker="o", label=f"e={envs}")
    rates = [v for c in grid.cells.values() for v in (c.sps, c.ceiling) if v]
    if rates and max(rates) > 20 * min(rates):
        rate_ax.set_yscale("log")
    weak_ax.axhline(1.0, color="grey", linestyle=":", label="linear")
    missing = weak_missing(grid)
    if missing:
        say(weak_ax, missing)
    totals: dict[int, list] = defaultdict(list)
    for c in grid.strong_rows():
        totals[c.total].append(c)
    top = 1.0
    for i, (total, cells) in enumerate(sorted(totals.items())):
        xs = [c.world_size for c in cells]
        strong_ax.plot(xs, [c.strong for c in cells], color=f"C{i % 10}", marker="s", label=f"T={total}")
        ideal = [c.workers / cells[0].workers for c in cells]
        strong_ax.plot(xs, ideal, color=f"C{i % 10}", linestyle=":", linewidth=0.9)
        top = max(top, *ideal)
    missing = strong_missing(grid)
    if missing:
        say(strong_ax, missing)
    for ax, ylabel in ((rate_ax, "samples/s (env steps / training s)"),
                       (weak_ax, "weak-scaling efficiency"), (strong_ax, "strong-scaling speedup")):
        ax.set_title(f"{grid.topology}", fontsize=9)
        ax.set_xlabel("ranks (world size)")
        ax.set_ylabel(ylabel)
        if len(sizes) > 1:
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    weak_ax.set_ylim(bottom=0)
    strong_ax.set_ylim(0, top * 1.1 if totals else 1.1)


def plot_scaling(grids: list[Grid], out: Path) -> dict[tuple[str, str], Path]:
    """``scaling_<env>_<algo>.png`` per env+algo with a grid; one row of panels per topology."""
    by: dict[tuple[str, str], list[Grid]] = defaultdict(list)
    for g in grids:
        by[(g.env, g.algo)].append(g)
    files: dict[tuple[str, str], Path] = {}
    taken: set[str] = set()
    for (env, algo), pair in by.items():
        fig = Figure(figsize=(15.0, 4.2 * len(pair)), layout="constrained")
        axes = fig.subplots(len(pair), 3, squeeze=False)
        fig.suptitle(f"Scaling of {env} / {algo} over ranks x environments per rank "
                     "(dotted: linear from the fewest ranks; dashed: raw-stepping ceiling)")
        for row, grid in zip(axes, pair):
            _scaling_row(row, grid)
        files[(env, algo)] = out / scaling_file(env, algo, taken)
        save_figure(fig, files[(env, algo)])
    return files


def write_plots(groups: list[Group], baselines: dict, baseline: str, out: Path) -> list[Path]:
    paths = [out / name for name in PLOT_FILES]
    assign_colors(groups)
    plot_returns(groups, paths[0], 0, "training wall-clock (s, evaluation excluded)", "training time")
    plot_returns(groups, paths[1], 1, "environment steps (job-wide)", "environment steps")
    plot_speedup(groups, baselines, baseline, paths[2])
    plot_breakdown(groups, paths[3])
    plot_train_returns(groups, paths[4], 0, "training wall-clock (s, evaluation excluded)", "training time")
    plot_train_returns(groups, paths[5], 1, "environment steps (job-wide)", "environment steps")
    for metric in training_metrics(groups):
        paths.append(out / metric_file(metric))
        plot_training_metric(groups, metric, paths[-1])
    return paths
