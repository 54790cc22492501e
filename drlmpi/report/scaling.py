"""Scaling over a ranks x environments-per-rank grid (the PPO-Tetris study's "num_cores-num_envs").

A *grid* is the complete runs of one (env, algo, topology label) that differ in world size or in
``num_envs`` (at least two world sizes or two ``num_envs`` values); the env label here is the
one before :func:`~drlmpi.report.discovery.label_swept_num_envs` adds ``[envs=k]``. A *cell* is one
(world size, num_envs) of a grid. With ``sps`` = a cell's mean ``env_steps_per_s`` over its runs
(job-wide env steps per second of training time) and ``W`` = its simulating ranks (ranks whose
``per_rank`` entry stepped environments: the world size where every rank simulates, one less
with a learner-only rank):

* weak scaling (Gustafson: the work per rank fixed, i.e. the same envs per rank ``e``):
  ``E = sps(N, e) / (W / W0 * sps(N0, e))``, with ``N0`` the fewest ranks having ``e``;
* strong scaling (the same total environments ``T = W * e`` split over more ranks), for each
  ``T`` found at two world sizes or more: ``S = sps(N, T / W) / sps(N_min, T / W_min)`` and
  efficiency ``S / (W / W_min)``;
* raw-stepping ceiling: the mean ``env_steps_per_s`` of runs of the same env, topology and
  cell that did no update at all (``algo=random``), and the learning cell's fraction of it; a
  note names the ``env.*`` / ``topology.*`` settings in which the ceiling runs differ.

A grid's notes also name the budget and device settings (the main table's comparability check,
:data:`~drlmpi.report.tables.COMPARED_SETTINGS`) that differ between its runs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from drlmpi.report.labels import UNKNOWN_ORDER
from drlmpi.report.runs import Run
from drlmpi.report.tables import COMPARED_SETTINGS

SCALING_COLUMNS = [
    "env", "algo", "topology", "world_size", "num_envs", "simulating_ranks", "total_envs", "n",
    "env_steps_per_s", "weak_base_world_size", "weak_efficiency", "strong_base_world_size",
    "strong_speedup", "strong_efficiency", "ceiling_env_steps_per_s", "ceiling_fraction",
]


def _rate(run: Run) -> float | None:
    """The run's samples/s: ``env_steps_per_s``, else ``env_steps / train_seconds``."""
    rate = run.get("env_steps_per_s")
    if rate is None:
        steps, secs = run.get("env_steps"), run.get("train_seconds")
        rate = steps / secs if steps is not None and secs else None
    try:
        return float(rate) if rate is not None else None
    except (TypeError, ValueError):
        return None


def simulating_ranks(run: Run) -> int:
    """Ranks of ``per_rank`` that stepped environments (the world size without ``per_rank``)."""
    ranks = run.summary.get("per_rank")
    if isinstance(ranks, list):
        count = sum(1 for r in ranks if isinstance(r, dict) and (r.get("env_steps") or 0) > 0)
        if count:
            return count
    return run.world_size


def num_envs(run: Run) -> int:
    try:
        return int(run.get("num_envs", 1))
    except (TypeError, ValueError):
        return 1


def did_update(run: Run) -> bool:
    return bool(run.get("updates", 0))


@dataclass
class Cell:
    world_size: int
    num_envs: int
    runs: list[Run] = field(default_factory=list)
    workers: int = 0                      # simulating ranks W
    sps: float | None = None              # mean env_steps_per_s over the runs
    weak_base: int | None = None          # N0 of this cell's column
    weak: float | None = None             # weak-scaling efficiency E
    strong_base: int | None = None        # N_min of this cell's total T (None: T appears once)
    strong: float | None = None           # strong-scaling speedup S
    strong_efficiency: float | None = None
    ceiling: float | None = None          # raw-stepping ceiling's samples/s
    ceiling_n: int = 0                    # runs behind the ceiling

    @property
    def total(self) -> int:
        """Environments stepped by the whole job: ``W * e``."""
        return self.workers * self.num_envs

    @property
    def fraction(self) -> float | None:
        """The cell's share of its raw-stepping ceiling."""
        if self.sps is None or not self.ceiling:
            return None
        return self.sps / self.ceiling


@dataclass
class Grid:
    env: str
    algo: str
    topology: str
    order: int = UNKNOWN_ORDER
    cells: dict[tuple[int, int], Cell] = field(default_factory=dict)
    learning: bool = False                # some run updated (a ceiling applies)
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.env} / {self.algo} / {self.topology}"

    @property
    def world_sizes(self) -> list[int]:
        return sorted({ws for ws, _ in self.cells})

    @property
    def envs_per_rank(self) -> list[int]:
        return sorted({e for _, e in self.cells})

    def cell(self, world_size: int, envs: int) -> Cell | None:
        return self.cells.get((world_size, envs))

    def is_grid(self) -> bool:
        return len(self.world_sizes) >= 2 or len(self.envs_per_rank) >= 2

    def strong_rows(self) -> list[Cell]:
        """The cells whose total environments appear at two world sizes or more, by total then ranks."""
        return sorted((c for c in self.cells.values() if c.strong is not None),
                      key=lambda c: (c.total, c.workers, c.world_size))

    def sort_key(self) -> tuple:
        return (self.env, self.order, self.topology, not self.learning, self.algo)


def weak_missing(grid: Grid) -> str | None:
    """Why ``grid`` has no weak-scaling figure, and a run that would give one (``None``: it has one)."""
    if any(c.weak is not None for c in grid.cells.values()):
        return None
    c = min(grid.cells.values(), key=lambda c: (c.world_size, c.num_envs))
    other = next((ws for ws in grid.world_sizes if ws != c.world_size), 2 * c.world_size)
    return ("No weak scaling: each env.num_envs was run at one world size only. A run of "
            f"env.num_envs={c.num_envs} at world_size={other} gives it (the same environments per "
            f"rank as world_size={c.world_size}).")


def strong_missing(grid: Grid) -> str | None:
    """Why ``grid`` has no strong-scaling figure, and a run that would give one (``None``: it has
    one): a cell's total of environments at another world size of the grid, where it divides."""
    if grid.strong_rows():
        return None
    why = ("No strong scaling: no total of environments (simulating ranks x env.num_envs) was run "
           "at two world sizes.")
    workers = {ws: max(c.workers for c in grid.cells.values() if c.world_size == ws)
               for ws in grid.world_sizes}
    for c in sorted(grid.cells.values(), key=lambda c: (c.total, c.world_size)):
        for ws, w in workers.items():
            if 0 < w != c.workers and c.total % w == 0:
                return (f"{why} A run of env.num_envs={c.total // w} at world_size={ws} gives it "
                        f"({c.total} environments, as world_size={c.world_size} with "
                        f"env.num_envs={c.num_envs}).")
    return (f"{why} Runs with the same total at two world sizes give it, e.g. 8 environments as "
            "2 simulating ranks x env.num_envs=4 and 4 x env.num_envs=2.")


def _base_env(run: Run) -> str:
    return run.base_env or run.env


def _fill_weak(grid: Grid) -> None:
    for envs in grid.envs_per_rank:
        column = sorted((c for c in grid.cells.values() if c.num_envs == envs and c.sps),
                        key=lambda c: c.world_size)
        if len(column) < 2:
            continue
        base = column[0]
        for c in column:
            c.weak_base = base.world_size
            c.weak = c.sps / (c.workers / base.workers * base.sps)


def _fill_strong(grid: Grid) -> None:
    by_total: dict[int, list[Cell]] = defaultdict(list)
    for c in grid.cells.values():
        if c.sps:
            by_total[c.total].append(c)
    for cells in by_total.values():
        if len({c.workers for c in cells}) < 2:
            continue
        cells.sort(key=lambda c: (c.workers, c.world_size))
        base = cells[0]
        for c in cells:
            c.strong_base = base.world_size
            c.strong = c.sps / base.sps
            c.strong_efficiency = c.strong / (c.workers / base.workers)


def _settings(run: Run) -> dict[str, str]:
    """The run's ``env.*`` (but ``num_envs``, a grid axis) and ``topology.*`` settings, as text."""
    out = {}
    for group in ("env", "topology"):
        values = run.config.get(group) if isinstance(run.config.get(group), dict) else {}
        out.update({f"{group}.{k}": repr(v) for k, v in values.items() if k != "num_envs"})
    return out


def _fill_ceilings(grid: Grid, ceilings: dict[tuple, dict[str, list[Run]]]) -> None:
    """Each cell's raw-stepping ceiling: per non-updating algorithm the mean samples/s of its runs
    in the same env, topology and cell; the highest of those."""
    used: list[Run] = []
    for (ws, envs), c in grid.cells.items():
        best, best_runs = None, []
        for runs in ceilings.get((grid.env, grid.topology, ws, envs), {}).values():
            rate = _mean([_rate(r) for r in runs])
            if rate is not None and (best is None or rate > best):
                best, best_runs = rate, runs
        c.ceiling, c.ceiling_n = best, len(best_runs)
        used += best_runs
    if not used:
        return
    learning = [r for c in grid.cells.values() for r in c.runs]
    differ = []
    mine, theirs = [_settings(r) for r in learning], [_settings(r) for r in used]
    for key in sorted({k for s in mine + theirs for k in s}):
        here, there = {s.get(key) for s in mine}, {s.get(key) for s in theirs}
        if here != there:
            differ.append(f"`{key}` ({', '.join(sorted(map(str, here)))} here, "
                          f"{', '.join(sorted(map(str, there)))} in the ceiling runs)")
    if differ:
        grid.notes.append("The ceiling runs differ from this grid's in env or topology settings: "
                          + "; ".join(differ) + ".")


def _check_settings(grid: Grid) -> None:
    """A note per setting of the main table's comparability check (but ``env.num_envs``, an
    axis of the grid) whose value differs between the grid's runs."""
    runs = [r for c in grid.cells.values() for r in c.runs]
    for setting, read in COMPARED_SETTINGS.items():
        if setting == "env.num_envs":
            continue
        counts: dict[str, int] = defaultdict(int)
        for r in runs:
            counts[repr(read(r))] += 1
        if len(counts) > 1:
            values = ", ".join(f"{value} ({n} run(s))" for value, n in sorted(counts.items()))
            grid.notes.append(f"`{setting}` differs between the runs of this grid, so their samples/s "
                              f"are not comparable: {values}.")


def _mean(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def find_grids(runs: list[Run]) -> list[Grid]:
    """The ranks x envs grids among ``runs``, every figure filled in, in report order."""
    grids: dict[tuple[str, str, str], Grid] = {}
    ceilings: dict[tuple, dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        env = _base_env(run)
        key = (env, run.algo, run.topology)
        grid = grids.setdefault(key, Grid(env=env, algo=run.algo, topology=run.topology))
        grid.order = min(grid.order, run.order)
        cell = grid.cells.setdefault((run.world_size, num_envs(run)),
                                     Cell(world_size=run.world_size, num_envs=num_envs(run)))
        cell.runs.append(run)
        grid.learning = grid.learning or did_update(run)
    for run in runs:
        if not did_update(run) and not grids[(_base_env(run), run.algo, run.topology)].learning:
            ceilings[(_base_env(run), run.topology, run.world_size, num_envs(run))][run.algo].append(run)
    found = []
    for grid in grids.values():
        if not grid.is_grid():
            continue
        for c in grid.cells.values():
            c.workers = max(simulating_ranks(r) for r in c.runs)
            c.sps = _mean([_rate(r) for r in c.runs])
        _fill_weak(grid)
        _fill_strong(grid)
        _check_settings(grid)
        if grid.learning:
            _fill_ceilings(grid, ceilings)
        found.append(grid)
    return sorted(found, key=Grid.sort_key)


def scaling_rows(grids: list[Grid]) -> list[dict[str, Any]]:
    """One ``scaling.csv`` row per cell of every grid."""
    rows = []
    for g in grids:
        for (ws, envs), c in sorted(g.cells.items()):
            rows.append({
                "env": g.env, "algo": g.algo, "topology": g.topology, "world_size": ws,
                "num_envs": envs, "simulating_ranks": c.workers, "total_envs": c.total,
                "n": len(c.runs), "env_steps_per_s": c.sps, "weak_base_world_size": c.weak_base,
                "weak_efficiency": c.weak, "strong_base_world_size": c.strong_base,
                "strong_speedup": c.strong, "strong_efficiency": c.strong_efficiency,
                "ceiling_env_steps_per_s": c.ceiling, "ceiling_fraction": c.fraction,
            })
    return rows
