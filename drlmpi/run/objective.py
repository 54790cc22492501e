"""``run.objective``: one number per run, for tuners (Hydra's Optuna sweeper).

A sweeper such as ``hydra/sweeper=optuna`` needs each job to return one float. With
``run.objective=<summary field>`` the task function (on rank 0) and the MPI launcher (for each
job of a sweep) return that field of the run's ``summary.json``. A field that a run leaves empty -
a ``*_to_threshold`` field of a run that never reached the threshold, or an evaluation return
of a run that never evaluated - is replaced by ``run.objective_unsolved`` when set, else by a
value that ranks the run behind every run that has one (:func:`objective_value`). A job that
failed or could not run counts as the worst value for the sweep's direction
(:func:`worst_value`), so one bad trial does not end a tuning session.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from drlmpi.config.scopes import RunSettings

#: the summary fields a run may be judged by, and for the ``*_to_threshold`` ones, the run's own
#: total of the same quantity (a run that did not solve took at least that much)
OBJECTIVES: dict[str, str | None] = {
    "train_seconds_to_threshold": "train_seconds",
    "env_steps_to_threshold": "env_steps",
    "updates_to_threshold": "updates",
    "best_eval_return": None,
    "last_eval_return": None,
    "env_steps_per_s": None,
    "updates_per_s": None,
}


def objective_value(summary: Mapping[str, Any], name: str, unsolved: float | None = None) -> float:
    """The value of objective ``name`` for a finished run's ``summary``.

    An empty field becomes ``unsolved`` when given; else, for a ``*_to_threshold`` field, the run's
    own total (``train_seconds``, ``env_steps`` or ``updates``: a run that did not solve within its
    budget ranks behind any run that solved within the same budget), and for an evaluation return,
    ``-inf`` (a run that never evaluated ranks last when returns are maximised)."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}: one of {', '.join(OBJECTIVES)}")
    value = summary.get(name)
    if value is not None:
        return float(value)
    if unsolved is not None:
        return float(unsolved)
    total = OBJECTIVES[name]
    if total is not None and summary.get(total) is not None:
        return float(summary[total])
    return -math.inf


def worst_value(direction: Any) -> float:
    """The value of a job that failed or could not run: ``+inf`` when the sweep minimises (the
    default of Hydra's Optuna sweeper), ``-inf`` when it maximises."""
    text = str(direction).lower()
    return -math.inf if "max" in text else math.inf


def direction_of(name: str) -> str:
    """The direction a tuner must take objective ``name``: the ``*_to_threshold`` fields (time,
    steps, updates to solve) are better smaller, returns and throughputs larger."""
    return "minimize" if OBJECTIVES[name] is not None else "maximize"


def check_tuning(config: Any) -> str | None:
    """A tuning sweep's checks, on the composed config before the sweeper starts (the ``hydra``
    node included). Hydra's Optuna sweeper needs one number from each run: without
    ``run.objective`` raise ValueError (its one line). Its direction defaults to ``minimize``,
    which for a return or a throughput would tune toward the worst run: the direction is set to
    the objective's (:func:`direction_of`), and the returned note says so. Other sweepers, and a
    multi-objective direction list, are left alone (``None``)."""
    from omegaconf import open_dict, read_write

    sweeper = config.hydra.get("sweeper") or {}
    if "optuna" not in str(sweeper.get("_target_", "")).lower():
        return None
    name = RunSettings.build(config.run).objective
    if not name:
        by_direction = {d: [n for n in OBJECTIVES if direction_of(n) == d] for d in ("minimize", "maximize")}
        raise ValueError("hydra/sweeper=optuna tunes by one number from each run: set run.objective to a "
                         f"summary field, smaller is better: {', '.join(by_direction['minimize'])}; larger "
                         f"is better: {', '.join(by_direction['maximize'])}")
    direction = sweeper.get("direction")
    wanted = direction_of(name)
    if isinstance(direction, (list, tuple)) or (direction is not None and not isinstance(direction, str)
                                                 and not hasattr(direction, "name")):
        return None
    given = str(getattr(direction, "name", direction) or "minimize").lower()
    if given == wanted:
        return None
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.sweeper.direction = wanted
    better = "larger" if wanted == "maximize" else "smaller"
    return (f"drlmpi: note: run.objective={name} is better {better}: the sweep will {wanted[:-1]}e it "
            f"(hydra.sweeper.direction={wanted}, was {given})")
