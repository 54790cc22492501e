"""The report's "Tuning trials" table: the runs of a tuning sweep (``run.objective`` set, e.g.
``+experiment=tune_dqn_cartpole``), best first, with the values each trial was given and the
Optuna sweeper's verdict (``optimization_results.yaml``) when the sweep wrote one."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from drlmpi.outputs.figures import table
from drlmpi.report.runs import Run
from drlmpi.run.objective import objective_value
from drlmpi.sweep.jobs import recorded_overrides

RESULTS_FILE = "optimization_results.yaml"


def optimization_results(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every ``optimization_results.yaml`` under ``paths`` (Hydra's Optuna sweeper writes one at
    the sweep's root), with its folder."""
    found = []
    for root in paths:
        for path in sorted(Path(root).rglob(RESULTS_FILE)):
            try:
                data = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(data, dict):
                found.append((path.parent, data))
    return found


def _objective(run: Run) -> tuple[str | None, Any]:
    if run.settings is None:
        return None, None
    return run.settings.run.objective, run.settings.run.objective_unsolved


def _direction(run: Run) -> str:
    sweeper = ((run.config.get("hydra") or {}).get("sweeper") or {})
    return str(sweeper.get("direction") or "minimize")


def _given(run: Run) -> dict[str, str]:
    """The run's overrides, option -> value (``+``/``~`` prefixes dropped)."""
    given = {}
    for override in recorded_overrides(run.path) or []:
        key, _, value = override.partition("=")
        given[key.lstrip("+~")] = value
    return given


def _trial_values(run: Run, names: list[str]) -> list[str]:
    given = _given(run)
    return [given.get(name, "") for name in names]


def _swept(runs: list[Run], best_params: dict[str, Any]) -> list[str]:
    """The options the trials were given: the sweeper's parameters when known, else every
    override whose value differs between the runs."""
    if best_params:
        return list(best_params)
    seen: dict[str, set[str]] = {}
    for run in runs:
        for key, value in _given(run).items():
            seen.setdefault(key, set()).add(value)
    return [key for key, values in seen.items() if len(values) > 1 and not key.startswith("hydra.")]


def _number(value: float) -> str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"


def trials_section(runs: list[Run], paths: list[Path]) -> list[str]:
    """Markdown: one table per objective the runs were tuned for (none: no lines)."""

    tuned = [r for r in runs if _objective(r)[0]]
    if not tuned:
        return []
    results = optimization_results(paths)
    out = ["## Tuning trials", "",
           "Runs made with `run.objective` (a tuner's trials), best first; the value is the summary "
           "field named, or for a run that left it empty its `run.objective_unsolved` (null: the run's "
           "own total, it took at least that much). Failed trials are listed under the failed jobs.",
           ""]
    for name in sorted({_objective(r)[0] for r in tuned}):
        group = [r for r in tuned if _objective(r)[0] == name]
        best_params: dict[str, Any] = {}
        for folder, data in results:
            if any(folder.resolve() in r.path.resolve().parents for r in group):
                best_params = dict(data.get("best_params") or {})
                out += [f"Optuna's result (`{folder / RESULTS_FILE}`): best value "
                        f"{_number(float(data.get('best_value')))} with "
                        + ", ".join(f"`{k}={v}`" for k, v in best_params.items()) + ".", ""]
        maximise = "max" in _direction(group[0]).lower()
        scored = sorted(((objective_value(r.summary, name, _objective(r)[1]), r) for r in group),
                        key=lambda vr: -vr[0] if maximise else vr[0])
        swept = _swept(group, best_params)
        header = ["#", "trial", f"{name} ({'max' if maximise else 'min'})", "solved", *swept,
                  "env steps", "train s"]
        rows = [[str(i + 1), r.path.name, _number(value), "yes" if r.get("solved") else "no",
                 *_trial_values(r, swept), f"{int(r.get('env_steps', 0)):,}",
                 f"{float(r.get('train_seconds', 0.0)):.1f}"]
                for i, (value, r) in enumerate(scored)]
        out += [f"**{name}**, {len(group)} trial(s):", "", *table(header, rows), ""]
    return out
