"""The planner's model: env steps/s and updates/s of each topology at N ranks, from a
:class:`~drlmpi.planner.probe.Probe` (docs/topologies.md, "Predicting throughput", says which
resource bounds each topology).

Every topology is written as the seconds its job spends per job-wide environment step, once
updates run (``learn``) and before ``learning_starts`` (``warm``); a run of ``B`` steps then takes
``L * warm + (B - L) * learn`` seconds. Where simulation and learning overlap (p2p, star, async,
groups, central) the slower side sets the pace; where one rank does both in turn (sequential,
allgather, parameter_server) the parts add up. Messages cost ``latency + bytes / bandwidth``
(the probe's ping-pong); a collective over N ranks costs ``ceil(log2 N)`` such steps, an
all-reduce twice that with ``2 (N-1)/N`` of its bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from drlmpi.planner.probe import Probe


@dataclass
class Prediction:
    """One cell of the plan."""

    topology: str
    ranks: int
    env_steps_per_s: float | None = None
    updates_per_s: float | None = None
    bound: str = ""           # simulators | learner | exchange | stepping and learning in turn
    refused: str | None = None  # why a job of this topology and size would not start

    def to_json(self) -> dict[str, Any]:
        return {"topology": self.topology, "ranks": self.ranks, "env_steps_per_s": self.env_steps_per_s,
                "updates_per_s": self.updates_per_s, "bound": self.bound, "refused": self.refused}


@dataclass
class Pace:
    """Seconds per job-wide env step of each side, once learning runs (and before)."""

    sim: float
    learn: float
    comm: float = 0.0
    serial: bool = False      # one rank simulates and learns in turn: the sides add up
    learn_warm: float = 0.0   # the learner side before learning_starts

    def step_s(self, learning: bool = True) -> float:
        learner = self.learn if learning else self.learn_warm
        core = self.sim + learner if self.serial else max(self.sim, learner)
        return core + self.comm

    def bound(self) -> str:
        if self.comm > 0.25 * self.step_s():
            return "exchange"
        if self.serial:
            return "stepping and learning in turn"
        return "learner" if self.learn >= self.sim else "simulators"


def log2(n: int) -> int:
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def _share(batch: int | None, ranks: int, rule: str) -> int | None:
    if batch is None or rule == "per_rank":
        return batch
    return max(1, round(batch / ranks))


def pace(topology: str, ranks: int, p: Probe, cfg: Any) -> Pace:
    """The :class:`Pace` of ``topology`` (its composed config ``cfg.topology``) on ``ranks``.

    Compute (env steps, updates, storing rows) runs ``p.slowdown_at(ranks)`` times slower than
    alone: a full job's other ranks spin while they wait in MPI."""
    t = cfg.topology
    e = p.num_envs
    k = max(1, int(t.get("sync_every", 64)))
    rows = k * e                                   # rows a simulator sends per round or chunk
    f = p.slowdown_at(ranks)
    rho, c, s = p.updates_per_step, p.ingest_row_s * f, p.sim_step_s * f
    u = p.learner_update_at(p.batch_size) * f
    rule = str(t.get("batch_rule", "global"))
    weights = p.weight_bytes
    if topology == "sequential":
        return Pace(sim=s + c, learn=rho * u, serial=True)
    if topology in ("p2p", "star"):
        sims = ranks - 1
        comm = sims * p.message_s(rows * p.row_bytes) + max(1, log2(ranks)) * p.message_s(weights)
        return Pace(sim=s / sims, learn=c + rho * u, comm=comm / (sims * rows), learn_warm=c)
    if topology == "async":
        sims = ranks - 1
        publish = max(1, int(t.get("publish_every", 32)))
        per_step = p.message_s(rows * p.row_bytes) / rows + rho * sims * p.message_s(weights) / publish
        return Pace(sim=s / sims, learn=c + rho * u + per_step, learn_warm=c + per_step)
    if topology in ("allgather", "parameter_server"):
        workers = ranks if topology == "allgather" else ranks - 1
        per_update = (p.learner_update_at(_share(p.batch_size, workers, rule)) * f
                      + p.straggler_s(workers, f))
        if topology == "allgather":
            per_update += p.allreduce_at(ranks)
        else:  # a Reduce of the gradients to the server and a Bcast of the parameters back
            per_update += p.allreduce_at(ranks) + max(1, log2(ranks)) * p.message_s(weights)
        job_rho = rho if rule == "global" else rho / workers
        round_comm = p.allreduce_at(ranks) / (workers * rows)  # the round's step-count Allgather
        return Pace(sim=(s + c) / workers, learn=job_rho * per_update, comm=round_comm, serial=True)
    if topology == "groups":
        learners = max(1, int(t.get("learners", 2)))
        sims = ranks - learners
        per_update = (p.learner_update_at(_share(p.batch_size, learners, rule)) * f
                      + p.allreduce_at(learners) + p.straggler_s(learners, f))
        job_rho = rho if rule == "global" else rho / learners
        group = ranks // learners
        comm = (group - 1) * p.message_s(rows * p.row_bytes) + max(1, log2(group)) * p.message_s(weights)
        return Pace(sim=s / max(1, sims), learn=c / learners + job_rho * per_update,
                    comm=comm / (max(1, sims) * rows), learn_warm=c / learners)
    if topology == "central":
        sims = ranks - 1
        groups = max(1, min(int(t.get("env_groups", 2)), e))
        serve_rows = max(1, sims * e // groups)
        per_message = max(1, e // groups)  # the rows of one group's step message
        per_row = (p.act_at(serve_rows) * f / serve_rows
                   + 2 * p.message_s(per_message * p.row_bytes) / per_message)
        sim = p.env_step_s * f / sims
        if groups == 1:  # no other group steps while one waits for its actions
            sim += per_row * serve_rows / (sims * e)
        return Pace(sim=sim, learn=c + rho * u + per_row, learn_warm=c + per_row)
    raise ValueError(f"no model for topology {topology!r}")


def predict(topology: str, ranks: int, p: Probe, cfg: Any) -> Prediction:
    """env steps/s and updates/s of a run of ``cfg`` (``run.max_env_steps`` steps, the first
    ``learning_starts`` without updates) under ``topology`` on ``ranks`` ranks."""
    model = pace(topology, ranks, p, cfg)
    budget = cfg.run.get("max_env_steps")
    learning = model.step_s(True)
    if budget is None or p.updates_per_step == 0:
        seconds, steps, updating = learning, 1.0, 1.0
    else:
        warm_steps = min(int(budget), p.learning_starts)
        steps = float(budget)
        updating = float(budget) - warm_steps
        seconds = warm_steps * model.step_s(False) + updating * learning
    env_rate = steps / seconds
    return Prediction(topology, ranks, env_steps_per_s=env_rate,
                      updates_per_s=p.updates_per_step * updating / seconds, bound=model.bound())
