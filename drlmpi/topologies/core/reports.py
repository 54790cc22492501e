"""What a rank reports when its topology's run ends: :class:`RankReport`, built by
:func:`simulator_report` and :func:`learner_report`; :mod:`drlmpi.run` gathers every rank's into
``summary.json``."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from drlmpi.roles.actor import Actor
from drlmpi.roles.evaluate import EvaluationShare
from drlmpi.roles.learner import Learner


@dataclass
class RankReport:
    """What one rank did, for the run summary (the learner rank also returns its Learner)."""

    rank: int
    role: str
    env_steps: int = 0
    episodes: int = 0
    updates: int = 0
    simulate_s: float = 0.0
    learn_s: float = 0.0
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    topology_stats: dict[str, Any] = field(default_factory=dict)  # the learner rank's, for the summary
    learner: Learner | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly fields (the learner object is dropped)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "learner"}


def simulator_report(rank: int, actor: Actor, role: str = "simulator",
                     evaluation: EvaluationShare | None = None) -> RankReport:
    """A :class:`RankReport` for a rank that only simulated (and maybe played a share of the
    evaluations, ``run.eval_on=simulators``: its seconds are the per-rank ``eval_s``)."""
    extra = {} if evaluation is None else {"eval_s": evaluation.seconds}
    return RankReport(rank=rank, role=role, env_steps=actor.steps, episodes=actor.episodes,
                      simulate_s=actor.sim_s, extra=extra)


def learner_report(rank: int, learner: Learner, role: str = "learner",
                   actor: Actor | None = None, stats: dict[str, Any] | None = None) -> RankReport:
    """A :class:`RankReport` for a rank that learned (and maybe also simulated); ``stats`` are
    the topology's own figures for the summary (``topology_stats``). Like the actor's counts,
    the learner's cover this part of the run: a resumed learner's restored ones are left out."""
    return RankReport(
        rank=rank, role=role,
        env_steps=actor.steps if actor else 0,
        episodes=actor.episodes if actor else 0,
        updates=learner.part_updates, simulate_s=actor.sim_s if actor else 0.0,
        learn_s=learner.part_learn_s, learner=learner, topology_stats=dict(stats or {}),
    )
