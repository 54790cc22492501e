"""The report's "Training return over time" table: for runs that log training episodes, the mean
of the last :data:`~drlmpi.report.curves.TRAIN_WINDOW` episodes (Atari: raw game scores) at a
quarter, half, three quarters and the end of the cell's training time, and the first training
second at which that mean reached the run's reward threshold - the learning curve of runs that
evaluate rarely or never (image RL on a time budget), as numbers one can compare across seeds.
"""

from __future__ import annotations

import numpy as np

from drlmpi.report.curves import TRAIN_WINDOW, rolling_mean
from drlmpi.report.tables import Group

#: the points of the table, as shares of the cell's longest training time
SHARES = (0.25, 0.5, 0.75, 1.0)


def return_at(episodes: np.ndarray, seconds: float, window: int = TRAIN_WINDOW,
              column: int = 0) -> float | None:
    """The mean return of the last ``window`` training episodes that ended by ``seconds`` of
    training (``episodes``: rows of (train_seconds, env_steps, return)); None before any.
    ``column=1`` reads ``seconds`` as job-wide env steps instead."""
    ended = episodes[episodes[:, column] <= seconds + 1e-9]
    if not len(ended):
        return None
    return float(np.mean(ended[-window:, 2]))


def first_reaching_row(episodes: np.ndarray, level: float, window: int = TRAIN_WINDOW) -> int | None:
    """The index of the first episode after which the mean of the last ``window`` episodes (a
    full window) is at least ``level``; None if it never is."""
    if len(episodes) < window:
        return None
    means = rolling_mean(episodes[:, 2], window)
    reached = np.flatnonzero(means[window - 1:] >= level)
    return window - 1 + int(reached[0]) if len(reached) else None


def first_reaching(episodes: np.ndarray, level: float, window: int = TRAIN_WINDOW) -> float | None:
    """The training second of that episode (:func:`first_reaching_row`); None if it never is."""
    row = first_reaching_row(episodes, level, window)
    return None if row is None else float(episodes[row, 0])


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def train_returns_section(groups: list[Group]) -> list[str]:
    """One row per run with training episodes (and a median row per cell of several runs)."""
    rows, short = [], 0
    for group in groups:
        runs = [r for r in group.runs if len(r.episodes) >= TRAIN_WINDOW]
        short += sum(0 < len(r.episodes) < TRAIN_WINDOW for r in group.runs)
        if not runs:
            continue
        end = max(float(r.episodes[-1, 0]) for r in runs)
        points = [share * end for share in SHARES]
        table, trained_to = [], []
        for run in runs:
            threshold = run.get("reward_threshold")
            reached = None if threshold is None else first_reaching(run.episodes, float(threshold))
            resumes = run.get("resumes", 0)
            # past a run's own training time (a shorter budget in the cell) it has no score: "-"
            trained = max(float(run.get("train_seconds", 0.0)), float(run.episodes[-1, 0]))
            trained_to.append([t <= trained + 1e-6 for t in points])
            values = [return_at(run.episodes, t) if ok else None for t, ok in zip(points, trained_to[-1])]
            table.append(values)
            rows.append(f"| {group.env} | {group.algo} | {group.name} | {run.seed} | {end:,.0f} | "
                        f"{int(run.get('env_steps', 0)):,} | "
                        + " | ".join(_cell(v) for v in values)
                        + f" | {_cell(threshold, 0)} | {_cell(reached, 0)} | {resumes} |")
        if len(runs) > 1:  # a point some run never trained to has no median
            medians = [np.median(present) if all(every) and (present := [v for v in column if v is not None])
                       else None for column, every in zip(zip(*table), zip(*trained_to))]
            rows.append(f"| {group.env} | {group.algo} | {group.name} | **median of {len(runs)}** | "
                        f"{end:,.0f} | - | " + " | ".join(f"**{_cell(v)}**" for v in medians)
                        + " | - | - | - |")
    if not rows:
        return []
    left_out = (f" {short} run(s) that ended fewer than {TRAIN_WINDOW} training episodes are left "
                "out." if short else "")
    return ["## Training return over time", "",
            f"Per run: the mean return of the last {TRAIN_WINDOW} training episodes (Atari: raw "
            "game scores) at a quarter, half, three quarters and all of T, the cell's longest "
            "training time (`train_seconds`; `-` past a run's own, and then in the median row), "
            "and the first training second at which that mean "
            "reached the run's reward threshold; resumes: how many times the run was continued "
            "(`resume=`) after a stop." + left_out, "",
            "| env | algo | topology | seed | T (s) | env steps | at T/4 | at T/2 | at 3T/4 | at T | "
            "threshold | first reached (s) | resumes |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *rows, ""]
