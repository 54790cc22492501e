"""The planner's model: env steps/s and updates/s of each topology at N ranks, from a
:class:`~drlmpi.topologies.core.pace.Probe` and each topology's own ``pace`` class method
(docs/topologies.md, "Predicting throughput").

Every topology writes itself as the seconds its job spends per job-wide environment step, once
updates run (``learn``) and before ``learning_starts`` (``warm``); a run of ``B`` steps then takes
``L * warm + (B - L) * learn`` seconds, or where longer the learner's wait for its first round
(``start``) plus its own seconds for those steps; a run of ``T`` seconds of training reaches the
steps whose seconds are ``T`` (:func:`model_steps`). What
the probe cannot see in one process - how a full job slows its own ranks down, and what its first
moments cost - a calibration (:mod:`drlmpi.planner.calibration`) measures in a short real job at
the largest size: its ratio of measured to modelled throughput over the job's second half is the
topology's load factor there, spread over the sizes in between geometrically in the number of
ranks (none at one rank, all of it at the calibrated size; through a second job's at half the
size where the first lay far from 1), and its seconds beyond the loaded
model are a warm-up every run of that topology pays, spread the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from drlmpi.config.scopes import RunSettings
from drlmpi.topologies.core.pace import Pace, Probe

#: a prediction within this share of the measured throughput counts as right
TOLERANCE = 0.25
#: cells within this share of the best predicted rate count as as good: the fewest ranks is chosen
RECOMMEND_MARGIN = 0.03
#: a calibration's load factor is kept within these bounds (beyond them the job was disturbed)
LOAD_BOUNDS = (0.05, 20.0)
#: a load factor at the largest size outside these bounds is measured again in a launch of its
#: own, at that size and at half of it (a load that far from 1 need not spread geometrically:
#: allgather's CUDA learners on one GPU lost x0.14 on 16 ranks but x0.44 on 8, where the
#: geometric spread gave x0.23; :func:`drlmpi.planner.calibration.calibrate`)
RECHECK = (0.5, 2.0)
#: the cheap end of a cell's range scales the costs by 1 - spread, but never below this: a spread
#: of the probe's repeats beyond 90% (one repeat hit a pause) would otherwise make costs negative
CHEAPEST_END = 0.1


@dataclass
class Prediction:
    """One cell of the plan."""

    topology: str
    ranks: int
    env_steps_per_s: float | None = None
    updates_per_s: float | None = None
    bound: str = ""           # simulators | learner | exchange | stepping and learning in turn
    refused: str | None = None  # why a job of this topology and size would not start
    low: float | None = None   # the range of env_steps_per_s from the probe's own spread
    high: float | None = None
    load: float = 1.0          # the calibrated load factor applied to this cell (1: none)
    games: int | None = None   # env.num_envs of each simulator, where the plan varies it (--games)

    @property
    def label(self) -> str:
        """The cell's row in the plan's tables: the topology, with its games where they vary."""
        return self.topology if self.games is None else f"{self.topology}, {self.games} games"

    def to_json(self) -> dict[str, Any]:
        return {"topology": self.topology, "ranks": self.ranks, "env_steps_per_s": self.env_steps_per_s,
                "updates_per_s": self.updates_per_s, "bound": self.bound, "refused": self.refused,
                "low": self.low, "high": self.high, "load": self.load, "games": self.games}


def topology_names() -> list[str]:
    """Every topology a config can name (conf/ and plugin directories): adding one adds it here."""
    from drlmpi.topologies.core.registry import names

    return names()


def modelled(cls: type) -> bool:
    """Whether the topology class brings a pace model."""
    return callable(getattr(cls, "pace", None))


def _share(ranks: int, calibration: dict[str, Any] | None) -> float:
    """How much of a calibration at N ranks a cell of ``ranks`` takes: ``log n / log N``, all
    of it at N and beyond, none at one rank (and none without a usable calibration); a
    calibration on one rank is all of a one-rank cell's and none of any other's."""
    if not calibration or "load" not in calibration:
        return 0.0
    if int(calibration.get("ranks", 1)) <= 1:  # a job of one rank: for one rank only
        return 1.0 if ranks == 1 else 0.0
    return min(1.0, math.log(max(ranks, 1)) / math.log(int(calibration["ranks"])))


def one_rank(calibrations: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The calibration of a job on one rank, if the plan ran one."""
    return next((c for c in calibrations.values() if c.get("ranks") == 1 and "load" in c), None)


def bounded(load: float) -> float:
    """A load factor kept within :data:`LOAD_BOUNDS` (beyond them the job was disturbed)."""
    return min(max(load, LOAD_BOUNDS[0]), LOAD_BOUNDS[1])


def load_at(ranks: int, calibration: dict[str, Any] | None) -> float:
    """The load factor at ``ranks`` from a calibration ``{"ranks": N, "load": r}``: ``r **
    (log n / log N)`` up to N (1 at one rank), ``r`` beyond. A calibration that also measured
    smaller sizes (``"points": [{"ranks": m, "load": q}, ...]``, :data:`RECHECK`) is followed
    through them: geometric in the ranks between two neighbouring sizes measured."""
    share = _share(ranks, calibration)
    if not share:
        return 1.0
    top, load = int(calibration["ranks"]), bounded(float(calibration["load"]))
    if ranks >= top:
        return load
    between = ((int(q["ranks"]), bounded(float(q["load"]))) for q in calibration.get("points") or ())
    known = sorted({(1, 1.0), (top, load), *((n, q) for n, q in between if 1 < n < top)})
    (a, la), (b, lb) = next((lo, hi) for lo, hi in zip(known, known[1:]) if ranks <= hi[0])
    return la * (lb / la) ** (math.log(ranks / a) / math.log(b / a))


def warmup_at(ranks: int, calibration: dict[str, Any] | None) -> float:
    """The seconds a run at ``ranks`` loses to its first moments, from a calibration's
    ``warmup_s`` (its job's seconds beyond the steady pace), spread as the load is."""
    return float((calibration or {}).get("warmup_s") or 0.0) * _share(ranks, calibration)


def warmup_steps(calibration: dict[str, Any] | None) -> float | None:
    """The job-wide env steps the calibration job's warm-up fell in: its first half, before the
    steady pace was taken (``warmup_steps``; a plan written before it was kept: half the job's
    steps). ``None``: no calibration."""
    if not calibration or "load" not in calibration:
        return None
    steps = calibration.get("warmup_steps") or 0.5 * float(calibration.get("env_steps") or 0)
    return float(steps) or None


def model_seconds(model: Pace, p: Probe, steps: float) -> float:
    """The model's seconds for a run's first ``steps`` env steps: the steps before
    ``learning_starts`` at the stepping pace, the rest at the learning pace - or, where the
    learner is the slower side, its wait for the first round (:attr:`Pace.start`) and then its own
    pace, whichever is longer. Simulators that set the pace step through that wait, and its rows
    count when they arrive: star on 16 ranks with rounds of 256 steps waits 12 s for its first
    round of 30,720 rows, which a wait added to every step's time counted as lost (a run without
    updates: every step at its pace, no wait)."""
    paced = paced_seconds(model, p, steps)
    if p.updates_per_step == 0:
        return paced
    warm = min(steps, p.learning_starts)
    return max(paced, model.start + warm * model.learner_s(False) + (steps - warm) * model.learner_s(True))


def paced_seconds(model: Pace, p: Probe, steps: float) -> float:
    """The seconds of a run's first ``steps`` env steps at the model's paces alone (no wait for a
    first round): what a stretch of a run after its start-up takes per step."""
    if p.updates_per_step == 0:
        return steps * model.step_s(True)
    warm = min(steps, p.learning_starts)
    return warm * model.step_s(False) + (steps - warm) * model.step_s(True)


def model_steps(model: Pace, p: Probe, seconds: float) -> float:
    """The env steps a run's first ``seconds`` model seconds reach: :func:`model_seconds`
    inverted (it grows with the steps; bisection to a millionth of a step's share)."""
    if seconds <= 0:
        return 0.0
    low, high = 0.0, seconds / min(model.step_s(True), model.step_s(False)) + 1.0
    for _ in range(80):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if model_seconds(model, p, middle) <= seconds else (low, middle)
    return low


def rates(model: Pace, p: Probe, budget: int | None, seconds: float | None = None, load: float = 1.0,
          warmup_s: float = 0.0, warm_steps: float | None = None) -> tuple[float, float]:
    """(env steps/s, updates/s) of a run of ``budget`` steps, else of ``seconds`` seconds of
    training, else at the learning pace: the model's seconds divided by the calibrated ``load``,
    plus the calibration's ``warmup_s``. With both, the one the run reaches first ends it (a
    time-boxed run of a slow cell stops at its seconds). A budget counts the steps the run makes:
    star's and p2p's runs end at the end of a round (:meth:`~drlmpi.topologies.core.pace.Pace.steps_run`;
    10,000 steps ran 11,520 on 16 ranks). A run of fewer steps than ``warm_steps`` (where the
    calibration job's warm-up fell) pays that share of ``warmup_s``: the first rounds of a CUDA
    learner run slower than its later ones, and a run of three rounds has fewer of them (star on
    16 ranks, 1 ms a step: 11,520 steps paid 0.3 s beyond the pace and the first round, 53,760
    steps 0.4 s, the calibration's 38,400 0.56 s). A run without updates steps at its pace."""
    learning = model.step_s(True) / load
    rho = p.updates_per_step
    if rho == 0 or (budget is None and not seconds):
        return 1.0 / learning, rho / learning
    if budget is not None:
        budget = model.steps_run(int(budget))  # the steps the run makes: whole rounds
        warm = min(int(budget), p.learning_starts)
        if warm_steps:
            warmup_s *= min(1.0, budget / warm_steps)
        total = model_seconds(model, p, int(budget)) / load + warmup_s
        if not seconds or total <= float(seconds):
            return float(budget) / total, rho * (int(budget) - warm) / total
    steps = model_steps(model, p, max(0.0, float(seconds) - warmup_s) * load)  # at the model's paces
    warm = min(float(p.learning_starts), steps)
    return steps / float(seconds), rho * (steps - warm) / float(seconds)


def predict(cls: type, ranks: int, p: Probe, cfg: DictConfig, calibration: dict[str, Any] | None = None,
            budget: int | None = -1) -> Prediction:
    """The cell of topology ``cls`` on ``ranks`` ranks for ``cfg`` (``run.max_env_steps`` steps,
    else ``run.max_train_seconds`` of training, unless ``budget`` is given), with its range from
    ``p.spread`` and the calibrated load and warm-up."""
    name = str(cls.name)
    if not modelled(cls):
        return Prediction(name, ranks, refused="not modelled (the topology has no pace model)")
    seconds = None
    if budget == -1:
        run = RunSettings.coerce(cfg.run)
        budget, seconds = run.max_env_steps, run.max_train_seconds
    load = load_at(ranks, calibration)
    costs = (load, warmup_at(ranks, calibration), warmup_steps(calibration))  # what the calibration adds
    settings = cls.settings_of(cfg.topology)  # the typed settings each pace model reads
    model = cls.pace(ranks, p, settings)
    env_rate, update_rate = rates(model, p, budget, seconds, *costs)
    spread = max(p.spread.values(), default=0.0)
    ends = [rates(cls.pace(ranks, p.scaled(factor), settings), p, budget, seconds, *costs)[0]
            for factor in (1 + spread, max(1 - spread, CHEAPEST_END))]
    return Prediction(name, ranks, env_steps_per_s=env_rate, updates_per_s=update_rate,
                      bound=model.bound(), low=min(ends), high=max(ends), load=load)


def sequential_in_name_only(cell: Prediction) -> bool:
    """A topology other than ``sequential`` on one rank: one process stepping and learning in
    turn, which is what ``sequential`` is (never recommended; the table says so)."""
    return cell.ranks == 1 and cell.topology != "sequential"


def recommended(cells: list[Prediction]) -> Prediction | None:
    """The fastest cell; among cells within :data:`RECOMMEND_MARGIN` of it, the fewest ranks, then
    the fewest games a simulator (``--games``: smaller rollouts and replays for the same pace).
    A topology other than sequential on one rank is never chosen (:func:`sequential_in_name_only`)."""
    ok = [c for c in cells if c.env_steps_per_s and not sequential_in_name_only(c)]
    if not ok:
        return None
    best = max(c.env_steps_per_s for c in ok)
    return min((c for c in ok if c.env_steps_per_s >= (1 - RECOMMEND_MARGIN) * best),
               key=lambda c: (c.ranks, c.games or 0, -c.env_steps_per_s))
