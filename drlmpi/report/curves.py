"""The report's learning curves: how return and training metrics evolve over a run.

* ``return_vs_time.png`` / ``return_vs_steps.png``: eval return vs ``train_seconds`` / ``env_steps``;
  thin lines are single runs, thick lines the mean over seeds on a common grid;
* ``train_return_vs_time.png`` / ``train_return_vs_steps.png``: the rolling mean of training
  episode returns vs ``train_seconds`` / ``env_steps``;
* ``metrics_<metric>.png``: a training metric of the runs' TensorBoard files (``train/<metric>``,
  e.g. ``loss``) vs ``env_steps``, for each of :data:`TRAINING_METRICS` some run has.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from drlmpi.report.drawing import by_pair, empty_figure, new_figure, save_figure, say, topology_color
from drlmpi.report.tables import Group

TRAIN_WINDOW = 100  # training episodes per point of the training-return curves
#: the training metrics (``train/<metric>`` in ``tb/``) plotted as ``metrics_<metric>.png``.
TRAINING_METRICS = ("loss", "q_mean", "critic_loss", "actor_loss", "policy_loss", "value_loss",
                    "entropy", "approx_kl", "clip_fraction", "grad_norm")
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def mean_curve(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean of step functions on the union of their x values, where every curve has begun.

    Each curve holds its last value after its end (a run stopped at the threshold keeps its
    final policy)."""
    grid = np.unique(np.concatenate([x for x, _ in curves]))
    values = np.full((len(curves), len(grid)), np.nan)
    for i, (x, y) in enumerate(curves):
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        idx = np.searchsorted(x, grid, side="right") - 1
        values[i, idx >= 0] = y[idx[idx >= 0]]
    ok = ~np.isnan(values).any(axis=0)
    return grid[ok], values[:, ok].mean(axis=0)


def _return_panels(groups: list[Group], path: Path, title: str, xlabel: str, ylabel: str,
                   empty_text: str, curves_of: Callable[[Group], list], markers: bool,
                   thresholds: bool) -> None:
    """One panel per (env, algo) pair with every group's return curves (``curves_of(group)``:
    ``(x, y)`` per run), the reward thresholds (``thresholds``), then saved to ``path``."""
    pairs = by_pair(groups)
    if not pairs:
        return empty_figure(path, title)
    fig, axes = new_figure(len(pairs))
    fig.suptitle(title)
    for ax, ((env, algo), pair_groups) in zip(axes, pairs.items()):
        sizes = sorted({g.world_size for g in pair_groups})
        drawn = 0
        for g in pair_groups:
            i = sizes.index(g.world_size)
            style = dict(color=topology_color(g.topology), linestyle=LINESTYLES[i % len(LINESTYLES)])
            if markers:
                style.update(marker=MARKERS[i % len(MARKERS)], markersize=3)
            drawn += _draw_group(ax, g.name, curves_of(g), style, single_width=1.6)
        levels = {r.summary.get("reward_threshold") for g in pair_groups for r in g.runs} - {None}
        for thr in sorted(levels) if thresholds else ():
            ax.axhline(float(thr), color="black", linestyle=(0, (4, 3)), linewidth=1.0,
                       label=f"threshold {float(thr):g}")
        if not drawn:
            say(ax, empty_text)
        ax.set_title(f"{env} / {algo}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a panel with nothing drawn has no legend to show
            ax.legend(fontsize=7, loc="best")
    save_figure(fig, path)


def plot_returns(groups: list[Group], path: Path, column: int, xlabel: str, what: str) -> None:
    """Eval return vs column ``column`` of ``Run.evals`` (0: train_seconds, 1: env_steps)."""
    _return_panels(groups, path, f"Greedy evaluation return vs {what}", xlabel,
                   "eval return (mean over eval episodes)",
                   "No evaluation in these runs (no eval rows in metrics.csv): they ended before their "
                   "first, which comes every run.eval_every env steps. Lower run.eval_every or run longer.",
                   lambda g: [(r.evals[:, column], r.evals[:, 2]) for r in g.runs if len(r.evals)],
                   markers=True, thresholds=True)


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``min(window, i + 1)`` values at each position ``i``."""
    sums = np.cumsum(np.concatenate([[0.0], values]))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (sums[idx] - sums[lo]) / (idx - lo)


def plot_train_returns(groups: list[Group], path: Path, column: int, xlabel: str, what: str) -> None:
    """Training episode return (the mean of the last :data:`TRAIN_WINDOW` episodes of all
    simulators; Atari: raw game scores) vs training wall-clock (``column`` 0) or job-wide env
    steps (1): the learning curve of runs that evaluate rarely or never."""
    _return_panels(groups, path,
                   f"Training episode return (mean of the last {TRAIN_WINDOW}) vs {what}", xlabel,
                   f"training return (mean of last {TRAIN_WINDOW} episodes)",
                   "No training episode ended in these runs (no episode rows in metrics.csv). "
                   "Run longer (run.max_env_steps) or with shorter episodes (env.max_episode_steps).",
                   lambda g: [(r.episodes[:, column], rolling_mean(r.episodes[:, 2], TRAIN_WINDOW))
                              for r in g.runs if len(r.episodes)],
                   markers=False, thresholds=False)


def _draw_group(ax, name: str, curves: list, style: dict, single_width: float) -> bool:
    """One group's curves: a single run as one line; several as thin lines plus their mean.
    Returns whether anything was drawn."""
    if not curves:
        return False
    if len(curves) == 1:
        ax.plot(*curves[0], label=name, linewidth=single_width, **style)
        return True
    for x, y in curves:
        ax.plot(x, y, color=style["color"], linestyle=style["linestyle"], linewidth=0.7, alpha=0.35)
    ax.plot(*mean_curve(curves), label=f"{name} mean of {len(curves)}", linewidth=2.0, **style)
    return True


def training_metrics(groups: list[Group]) -> list[str]:
    """The :data:`TRAINING_METRICS` that at least one run of ``groups`` has curves of."""
    present = {name for g in groups for r in g.runs for name, curve in r.training.items() if len(curve)}
    return [name for name in TRAINING_METRICS if name in present]


def metric_file(metric: str) -> str:
    return f"metrics_{metric}.png"


def plot_training_metric(groups: list[Group], metric: str, path: Path) -> None:
    """``train/<metric>`` vs job-wide env steps: one subplot per env+algo whose runs have it,
    one line per group (thin lines per run and their mean when a group has several)."""
    pairs = {pair: [g for g in gs if any(metric in r.training for r in g.runs)]
             for pair, gs in by_pair(groups).items()}
    pairs = {pair: gs for pair, gs in pairs.items() if gs}
    fig, axes = new_figure(len(pairs))
    fig.suptitle(f"{metric} vs environment steps (TensorBoard train/{metric})")
    for ax, ((env, algo), pair_groups) in zip(axes, pairs.items()):
        sizes = sorted({g.world_size for g in pair_groups})
        for g in pair_groups:
            style = dict(color=topology_color(g.topology),
                         linestyle=LINESTYLES[sizes.index(g.world_size) % len(LINESTYLES)])
            curves = [(r.training[metric][:, 0], r.training[metric][:, 1]) for r in g.runs
                      if len(r.training.get(metric, ()))]
            _draw_group(ax, g.name, curves, style, single_width=1.4)
        ax.set_title(f"{env} / {algo}")
        ax.set_xlabel("environment steps (job-wide)")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a panel with nothing drawn has no legend to show
            ax.legend(fontsize=7, loc="best")
    save_figure(fig, path)

