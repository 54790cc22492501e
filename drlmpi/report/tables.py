"""Group runs by (env, algo, topology label, world size), average seeds, compute speedups.

Speedups compare a group with the baseline group of the same env+algo (the baseline topology
label at its smallest world size, by default the sequential topology on 1 rank):

* fixed budget: ``mean(baseline train_seconds) / mean(train_seconds)`` (the DQN paper's t(s));
* to threshold: ``mean(baseline train_seconds_to_threshold) / mean(train_seconds_to_threshold)``,
  each mean over the solved runs only (and the same with medians for the learning table);
* throughput: ``mean(env_steps_per_s) / mean(baseline env_steps_per_s)``;
* parallel efficiency: speedup / world size (speedup / (world size / baseline world size) when the
  baseline runs on more than one rank).

Topology rows are ordered by the runs' topology sort key (:class:`~drlmpi.report.labels.TopologyInfo`),
never by name.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from drlmpi.report.labels import UNKNOWN_ORDER
from drlmpi.report.runs import MissingRun, Run

TABLE_COLUMNS = [
    "env", "algo", "topology", "world_size", "n", "solved", "seeds", "max_env_steps",
    "train_s_mean", "train_s_std", "threshold_s_mean", "threshold_steps_mean",
    "speedup_fixed", "efficiency_fixed", "speedup_threshold", "efficiency_threshold",
    "env_steps_per_s", "updates_per_s", "mpi_wait_share", "policy_lag_mean",
    # learning: medians and ranges over the solved runs, the step budget
    "missing", "threshold_steps_median", "threshold_steps_min", "threshold_steps_max",
    "threshold_s_median", "threshold_s_min", "threshold_s_max", "budget_env_steps",
    "budget_source", "budget_met", "speedup_threshold_median",
    # throughput
    "speedup_throughput", "efficiency_throughput", "ceiling_env_steps_per_s",
    # why a numeric cell of the row is empty (:func:`write_csv`)
    "note",
]
#: the columns of table.csv that hold words; every other one holds a number or nothing
TABLE_TEXT = ("env", "algo", "topology", "seeds", "budget_source", "budget_met")
RUN_COLUMNS = [
    "run_dir", "env", "algo", "topology", "world_size", "seed", "solved", "stop_reason", "resumes",
    "train_seconds", "train_seconds_to_threshold", "env_steps_to_threshold", "updates_to_threshold",
    "env_steps", "updates", "env_steps_per_s", "updates_per_s", "mpi_wait_share", "policy_lag_mean",
    "best_eval_return", "reward_threshold", "sim_cost_ms", "num_envs", "max_env_steps", "note",
]
RUN_TEXT = ("run_dir", "env", "algo", "topology", "seed", "solved", "stop_reason")


def _budget(run: Run) -> Any:
    """The run's ``run.max_env_steps`` (``?``: its config could not be read)."""
    return "?" if run.settings is None else run.settings.run.max_env_steps


def _budget_text(run: Run) -> str:
    """The run's ``run.max_env_steps`` as one writes it (``null``: no step budget)."""
    budget = _budget(run)
    return "null" if budget is None else str(budget)


def _num_key(text: str) -> tuple:
    return (0, float(text), "") if text.replace(".", "", 1).isdigit() else (1, 0.0, text)


def _mean(values: list[Any]) -> float | None:
    values = [float(v) for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _median(values: list[Any]) -> float | None:
    values = [float(v) for v in values if v is not None]
    return float(np.median(values)) if values else None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def run_budget(run: Run) -> int | None:
    """The step budget a learning run is judged against: the config's ``budget_env_steps`` (a
    study's reference budget, e.g. rl-baselines3-zoo's), else its own ``run.max_env_steps``."""
    settings = run.settings
    if settings is None:
        return None
    return settings.budget_env_steps if settings.budget_env_steps is not None else settings.run.max_env_steps


@dataclass
class Group:
    env: str
    algo: str
    topology: str
    world_size: int
    runs: list[Run] = field(default_factory=list)
    row: dict[str, Any] = field(default_factory=dict)
    missing: int = 0    # run directories of this cell without a readable summary.json

    @property
    def pair(self) -> tuple[str, str]:
        return (self.env, self.algo)

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.env, self.algo, self.topology, self.world_size)

    @property
    def name(self) -> str:
        return f"{self.topology}({self.world_size})"

    @property
    def order(self) -> int:
        return min((r.order for r in self.runs), default=UNKNOWN_ORDER)

    @property
    def paper(self) -> str | None:
        """The group's column name in the DQN paper's layout (``None``: not one of its columns)."""
        return next((r.paper for r in self.runs if r.paper), None)

    def sort_key(self) -> tuple:
        return (self.env, self.algo, self.order, self.topology, self.world_size)

    def solved_runs(self) -> list[Run]:
        return [r for r in self.runs if r.get("solved", False)]

    def train_mean(self) -> float | None:
        return _mean([r.get("train_seconds") for r in self.runs])

    def threshold_mean(self) -> float | None:
        return _mean([r.get("train_seconds_to_threshold") for r in self.solved_runs()])


def group_runs(runs: list[Run], missing: list[MissingRun] = ()) -> list[Group]:
    """Complete runs grouped by (env, algo, topology label, world size); each group counts the
    missing runs of its cell too."""
    groups: dict[tuple, Group] = {}
    for run in runs:
        if run.key not in groups:
            groups[run.key] = Group(*run.key)
        groups[run.key].runs.append(run)
    for m in missing:
        group = groups.get((m.env, m.algo, m.topology, m.world_size))
        if group is not None:
            group.missing += 1
    return sorted(groups.values(), key=Group.sort_key)


def find_baselines(groups: list[Group], baseline: str) -> dict[tuple[str, str], Group]:
    """Per env+algo, the ``baseline`` group with the fewest ranks."""
    found: dict[tuple[str, str], Group] = {}
    for g in groups:
        if g.topology == baseline and (g.pair not in found or g.world_size < found[g.pair].world_size):
            found[g.pair] = g
    return found


def speedup(base: float | None, value: float | None, no_base: str, no_value: str) -> float | str:
    if base is None:
        return no_base
    if value is None or value <= 0:
        return no_value
    return base / value


def efficiency(s: float | str, rank_ratio: float) -> float | str:
    """speedup / (ranks / baseline ranks): speedup / world size for a 1-rank baseline."""
    return s / rank_ratio if isinstance(s, float) else s


def build_table(groups: list[Group], baseline: str) -> list[dict[str, Any]]:
    """Fill ``group.row`` for every group (and return the rows, in table order)."""
    baselines = find_baselines(groups, baseline)
    no_run = f"n/a (no {baseline} run)"
    for g in groups:
        runs, base = g.runs, baselines.get(g.pair)
        ratio = g.world_size / base.world_size if base is not None else 1.0
        if base is None:
            fixed = thr = no_run
        else:
            fixed = speedup(base.train_mean(), g.train_mean(), no_run, "n/a (no train time)")
            thr = speedup(base.threshold_mean(), g.threshold_mean(),
                          f"n/a ({baseline} not solved)", "n/a (not solved)")
        train = [float(r.get("train_seconds")) for r in runs if r.get("train_seconds") is not None]
        g.row = {
            "env": g.env, "algo": g.algo, "topology": g.topology, "world_size": g.world_size,
            "n": len(runs), "solved": len(g.solved_runs()),
            "seeds": " ".join(str(s) for s in sorted({r.seed for r in runs}, key=str)),
            "max_env_steps": "/".join(sorted({_budget_text(r) for r in runs}, key=_num_key)),
            "train_s_mean": g.train_mean(),
            "train_s_std": float(np.std(train, ddof=1)) if len(train) > 1 else None,
            "threshold_s_mean": g.threshold_mean(),
            "threshold_steps_mean": _mean([r.get("env_steps_to_threshold") for r in g.solved_runs()]),
            "speedup_fixed": fixed, "efficiency_fixed": efficiency(fixed, ratio),
            "speedup_threshold": thr, "efficiency_threshold": efficiency(thr, ratio),
            "env_steps_per_s": _mean([r.get("env_steps_per_s") for r in runs]),
            "updates_per_s": _mean([r.get("updates_per_s") for r in runs]),
            "mpi_wait_share": _mean([r.get("mpi_wait_share") for r in runs]),
            "policy_lag_mean": _mean([r.get("policy_lag_mean") for r in runs]),
        }
        g.row.update(learning_fields(g, base, baseline))
        g.row.update(throughput_fields(g, base, baseline, ratio))
    ceilings = raw_stepping_ceilings(groups)
    for g in groups:
        g.row["ceiling_env_steps_per_s"] = ceilings.get((g.env, g.world_size))
    return [g.row for g in groups]


def budget_verdict(steps: list[float], missing: int, budget: int | None) -> str:
    """``yes`` when the median steps to threshold over the runs of a cell (an unsolved run
    counting as never) is within ``budget``, ``no`` when it is not, ``incomplete`` when the
    cell's missing runs could still change that, ``n/a`` without a budget or any run."""
    if budget is None or not (steps or missing):
        return "n/a"
    best = float(np.median(steps + [0.0] * missing))          # every missing run solved at once
    worst = float(np.median(steps + [float("inf")] * missing))  # none of them solved
    if worst <= budget:
        return "yes"
    if best > budget:
        return "no"
    return "incomplete"


def learning_fields(g: Group, base: Group | None, baseline: str) -> dict[str, Any]:
    """Solved runs' medians and ranges of steps and seconds to threshold, the budget verdict and
    the speedup of the median time to threshold."""
    solved = g.solved_runs()
    steps = [float(r.get("env_steps_to_threshold")) for r in solved
             if r.get("env_steps_to_threshold") is not None]
    secs = [float(r.get("train_seconds_to_threshold")) for r in solved
            if r.get("train_seconds_to_threshold") is not None]
    budget = next((b for b in (run_budget(r) for r in g.runs) if b is not None), None)
    source = ("budget_env_steps" if any(r.settings is not None and r.settings.budget_env_steps is not None
                                        for r in g.runs) else "run.max_env_steps")
    judged = steps + [float("inf")] * (len(g.runs) - len(steps))
    median_s = _median(secs)
    if base is None:
        speed: float | str = f"n/a (no {baseline} run)"
    else:
        speed = speedup(_median([r.get("train_seconds_to_threshold") for r in base.solved_runs()]),
                        median_s, f"n/a ({baseline} not solved)", "n/a (not solved)")
    return {
        "missing": g.missing,
        "threshold_steps_median": _median(steps), "threshold_steps_min": min(steps, default=None),
        "threshold_steps_max": max(steps, default=None),
        "threshold_s_median": median_s, "threshold_s_min": min(secs, default=None),
        "threshold_s_max": max(secs, default=None),
        "budget_env_steps": budget, "budget_source": source if budget is not None else None,
        "budget_met": budget_verdict(judged, g.missing, budget),
        "speedup_threshold_median": speed,
    }


def throughput_fields(g: Group, base: Group | None, baseline: str, ratio: float) -> dict[str, Any]:
    """Env steps/s relative to the baseline group, and per rank."""
    rate = g.row["env_steps_per_s"]
    if base is None:
        speed: float | str = f"n/a (no {baseline} run)"
    else:
        speed = speedup(rate, _mean([r.get("env_steps_per_s") for r in base.runs]),
                        "n/a (no throughput)", f"n/a (no {baseline} throughput)")
    return {"speedup_throughput": speed, "efficiency_throughput": efficiency(speed, ratio)}


def raw_stepping_ceilings(groups: list[Group]) -> dict[tuple[str, int], float]:
    """Per env label and world size, the highest env steps/s among groups whose runs did no
    update at all (``algo=random``): what the simulators manage when nothing learns."""
    out: dict[tuple[str, int], float] = {}
    for g in groups:
        rate = g.row.get("env_steps_per_s")
        if rate is None or any(r.get("updates", 0) for r in g.runs):
            continue
        key = (g.env, g.world_size)
        out[key] = max(out.get(key, 0.0), float(rate))
    return out


def run_rows(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        row = {c: r.summary.get(c) for c in RUN_COLUMNS}
        row.update(run_dir=str(r.path), env=r.env, algo=r.algo, topology=r.topology,
                   world_size=r.world_size, seed=r.seed,
                   max_env_steps=_budget(r))
        rows.append(row)
    return rows


# Settings that make runs of one env+algo incomparable when they differ (from config / summary).
COMPARED_SETTINGS = {
    "run.max_env_steps": lambda r: r.settings and r.settings.run.max_env_steps,
    "run.max_train_seconds": lambda r: r.settings and r.settings.run.max_train_seconds,
    "run.stop_on_solve": lambda r: r.settings and r.settings.run.stop_on_solve,
    "run.eval_every": lambda r: r.settings and r.settings.run.eval_every,
    "env.num_envs": lambda r: r.summary.get("num_envs"),
    "budget_env_steps": lambda r: r.settings and r.settings.budget_env_steps,
    "device": lambda r: r.summary.get("device"),
    "threads_per_rank": lambda r: r.summary.get("threads_per_rank"),
    # pinned ranks ran star 16 up to 1.5x faster than unbound ones (docs/results.md, "A core per
    # rank"); runs from before the setting was recorded read None
    "bind_ranks": lambda r: r.summary.get("bind_ranks"),
}


def comparability_notes(groups: list[Group]) -> list[str]:
    """One line per env+algo and setting whose value differs between its runs."""
    by_pair: dict[tuple[str, str], list[Group]] = defaultdict(list)
    for g in groups:
        by_pair[g.pair].append(g)
    notes = []
    for (env, algo), pair_groups in by_pair.items():
        for setting, read in COMPARED_SETTINGS.items():
            where: dict[str, list[str]] = defaultdict(list)
            for g in pair_groups:
                for r in g.runs:
                    where[repr(read(r))].append(f"{g.name} seed {r.seed}")
            if len(where) > 1:
                parts = "; ".join(f"{value}: {', '.join(runs)}" for value, runs in sorted(where.items()))
                notes.append(f"{env}/{algo}: `{setting}` differs between runs - {parts}")
    return notes


def paper_columns(groups: list[Group], baselines: dict[tuple[str, str], Group]
                  ) -> tuple[list[Group], list[Group]]:
    """Columns of the DQN paper's runtime table (the groups whose topology names one, e.g.
    ``2 Processes``, ``MP(n)``) and the others, for the groups of one env+algo. The baseline
    group heads both lists."""
    main, other = [], []
    for g in sorted(groups, key=Group.sort_key):
        if baselines.get(g.pair) is g:
            continue
        (main if g.paper else other).append(g)
    base = [baselines[groups[0].pair]] if groups and groups[0].pair in baselines else []
    return base + main, (base + other) if other else []


def paper_header(g: Group, baselines: dict[tuple[str, str], Group]) -> str:
    """``Standard`` for the baseline, else the paper's name for the group, else ``label(ranks)``."""
    if baselines.get(g.pair) is g:
        return "Standard"
    return g.paper or g.name
