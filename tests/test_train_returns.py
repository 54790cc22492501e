"""The report's "Training return over time" table (drlmpi/report/train_returns.py) against
hand-computed numbers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from drlmpi.report.tables import Group
from drlmpi.report.train_returns import first_reaching, return_at, train_returns_section


def _episodes(n: int, step: float = 1.0) -> np.ndarray:
    """Episode i (0-based) ends at (i + 1) * step training seconds with return i."""
    return np.array([((i + 1) * step, 10 * (i + 1), i) for i in range(n)], dtype=float)


def test_the_mean_of_the_last_100_games_at_a_time_and_its_first_crossing():
    ep = _episodes(150)
    assert return_at(ep, 0.5) is None  # no game has ended yet
    assert return_at(ep, 10) == 4.5  # fewer than 100 games: all of them (0..9)
    assert return_at(ep, 100) == 49.5  # games 0..99
    assert return_at(ep, 1e9) == 99.5  # the last 100: 50..149
    # The full window ending with game i has mean i - 49.5: >= 60 first at i = 110, at 111 s.
    assert first_reaching(ep, 60) == 111.0
    assert first_reaching(ep, 99.5) == 150.0 and first_reaching(ep, 99.6) is None
    assert first_reaching(ep[:99], -1) is None  # never a full window


def _run(seed: int, episodes: np.ndarray, threshold: float | None,
         resumes: int | None = None) -> SimpleNamespace:
    summary = {"env_steps": int(episodes[-1, 1]), "reward_threshold": threshold, "resumes": resumes}
    # as Run.get: a field that is missing or null gives the default
    return SimpleNamespace(seed=seed, episodes=episodes,
                           get=lambda k, d=None: d if summary.get(k) is None else summary[k])


def test_the_table_has_a_row_per_run_and_the_cells_median():
    group = Group("cue", "dqn", "star", 3, runs=[_run(0, _episodes(200), 120.0),
                                                 _run(1, _episodes(200, step=2.0), None, resumes=2)])
    lines = train_returns_section([group])
    rows = [line for line in lines if line.startswith("| cue")]
    # T = 400 s (seed 1's end). Seed 0 has all 200 games by 200 s, its end: no score past it (a
    # shorter budget's last value is not its score at T); its mean of the last 100 reaches 120
    # with game 170 (mean 170 - 49.5), at 171 s.
    assert rows[0] == "| cue | dqn | star(3) | 0 | 400 | 2,000 | 49.5 | 149.5 | - | - | 120 | 171 | 0 |"
    # Seed 1: game i ends at 2 (i + 1) s - 50 games at 100 s, 100 at 200 s, 150 at 300 s.
    assert rows[1] == "| cue | dqn | star(3) | 1 | 400 | 2,000 | 24.5 | 49.5 | 99.5 | 149.5 | - | - | 2 |"
    assert rows[2] == ("| cue | dqn | star(3) | **median of 2** | 400 | - | **37.0** | **99.5** | "
                       "**-** | **-** | - | - | - |")
    # a run's own training time counts, not its last game's end: seed 0 trained to 400 s too
    trained = _run(0, _episodes(200), 120.0)
    trained_get = trained.get
    trained.get = lambda k, d=None: 400.0 if k == "train_seconds" else trained_get(k, d)
    same = train_returns_section([Group("cue", "dqn", "star", 3, runs=[trained, group.runs[1]])])
    assert " | 149.5 | 149.5 | 149.5 | 120 | 171 | 0 |" in [r for r in same if r.startswith("| cue")][0]
    assert train_returns_section([Group("cue", "dqn", "star", 3, runs=[_run(0, _episodes(99), 1.0)])]) == []
    # A run too short for the window is left out, and the table says so (a seed must not vanish).
    mixed = train_returns_section([Group("cue", "dqn", "star", 3, runs=[
        _run(0, _episodes(200), None), _run(1, _episodes(99), None)])])
    assert [line.split(" | ")[3] for line in mixed if line.startswith("| cue")] == ["0"]
    assert "1 run(s) that ended fewer than 100 training episodes are left out" in mixed[2]
    assert "left out" not in "\n".join(lines)
