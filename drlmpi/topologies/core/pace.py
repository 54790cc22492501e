"""The vocabulary of a topology's pace model (the planner, :mod:`drlmpi.planner`): what the probe
measured on this machine (:class:`Probe`) and what a topology answers with (:class:`Pace`).

A topology models itself with a class method next to its ``run``::

    @classmethod
    def pace(cls, ranks: int, p: Probe, settings: StarSettings) -> Pace: ...

(``settings``: its typed settings, :meth:`~drlmpi.topologies.core.base.Topology.settings_of`) the
seconds its job spends per job-wide environment step on ``ranks`` ranks, once updates run
and before ``learning_starts``. Where simulation and learning overlap the slower side sets the
pace; where one rank does both in turn (``serial``) the parts add up. Messages cost ``latency +
bytes / bandwidth`` (the probe's ping-pong). A topology without ``pace`` is listed by the planner
as "not modelled". This module imports nothing of drlmpi: topologies and the planner both read it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np


def interpolate(table: dict[int, float], x: float) -> float:
    """``table`` (size -> seconds) at ``x``, linear between its sizes, flat beyond them."""
    sizes = sorted(table)
    return float(np.interp(x, sizes, [table[n] for n in sizes]))


@dataclass
class Probe:
    """What the probe measured (every time in seconds)."""

    cores: int
    device: str
    num_envs: int
    sim_step_s: float
    env_step_s: float
    act_s: dict[int, float]
    update_s: dict[int, float]
    update_jitter_s: float
    learner_update_s: float
    batch_size: int | None
    updates_per_step: float
    learning_starts: int
    ingest_row_s: float
    slowdown: dict[int, float]
    allreduce_s: dict[int, float]
    row_bytes: int
    weight_bytes: int
    latency_s: float
    bandwidth_bytes_per_s: float
    comm_source: str
    probe_seconds: float = 0.0
    #: GPUs of this host (device learners on more ranks than GPUs take turns on one)
    gpus: int = 1
    #: the config's ``run.deterministic`` (a deterministic run serialises what would overlap)
    deterministic: bool = False
    #: the observations are images (a calibration job then trains longer: its warm-up is long)
    image: bool = False
    notes: list[str] = field(default_factory=list)
    #: relative half-width of each measured figure's spread between repeats (``sim_step_s``,
    #: ``update_s``): a cell's range is the model at the low and the high ends
    spread: dict[str, float] = field(default_factory=dict)

    def scaled(self, factor: float) -> Probe:
        """This probe with every compute cost (steps, updates, storing rows, forward passes)
        multiplied by ``factor`` (a cell's range at the ends of the measured spread)."""
        return replace(
            self, sim_step_s=self.sim_step_s * factor, env_step_s=self.env_step_s * factor,
            act_s={b: t * factor for b, t in self.act_s.items()},
            update_s={b: t * factor for b, t in self.update_s.items()},
            learner_update_s=self.learner_update_s * factor, ingest_row_s=self.ingest_row_s * factor)

    def update_at(self, batch: int | None) -> float:
        """Seconds per update at ``batch`` rows, interpolated linearly between measured sizes."""
        if not self.update_s:
            return 0.0
        if batch is None or len(self.update_s) == 1:
            return self.update_s[max(self.update_s)]
        return interpolate(self.update_s, batch)

    def learner_update_at(self, batch: int | None) -> float:
        """A learner's seconds per update at ``batch``: the bare update there, scaled by what
        the run's learner adds to the bare update at the job's batch (its bookkeeping)."""
        bare = self.update_at(self.batch_size)
        return self.learner_update_s * (self.update_at(batch) / bare if bare > 0 else 1.0)

    def slowdown_at(self, ranks: int) -> float:
        """Compute slows down by this factor with ``ranks`` busy processes on the machine."""
        return interpolate({1: 1.0, **self.slowdown}, ranks)

    def allreduce_at(self, ranks: int) -> float:
        """An all-reduce of the weights over ``ranks`` ranks (measured sizes, else log2 steps of
        the point-to-point cost)."""
        if ranks <= 1:
            return 0.0
        if self.allreduce_s:
            sizes = sorted(self.allreduce_s)
            if ranks <= sizes[-1]:
                return interpolate(self.allreduce_s, ranks)
            return self.allreduce_s[sizes[-1]] * np.log2(ranks) / max(1.0, np.log2(sizes[-1]))
        return 2 * np.log2(ranks) * self.message_s(self.weight_bytes)

    def straggler_s(self, ranks: int, slowdown: float = 1.0) -> float:
        """The expected wait of a collective for the slowest of ``ranks`` ranks' updates: the
        spread of one update times sqrt(2 ln N) (the expected maximum of N normal draws)."""
        return self.update_jitter_s * slowdown * float(np.sqrt(2 * np.log(ranks))) if ranks > 1 else 0.0

    def act_at(self, rows: int) -> float:
        """Seconds of one batched forward pass of ``rows`` observations on the learner's device."""
        return interpolate(self.act_s, rows)

    def with_games(self, games: int) -> Probe:
        """This probe for simulators of ``games`` environments (``env.num_envs``; the planner's
        ``--games``): an environment's own step costs what it did, a simulator's acting is one
        pass over ``games`` rows instead of :attr:`num_envs` (``sim_step_s`` moved by the
        difference of its share per step; never below the step without acting)."""
        acting = self.act_at(games) / games - self.act_at(self.num_envs) / self.num_envs
        return replace(self, num_envs=games, sim_step_s=max(self.env_step_s, self.sim_step_s + acting))

    def message_s(self, nbytes: float) -> float:
        """One-way seconds of a point-to-point message of ``nbytes``."""
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s

    def to_json(self) -> dict[str, Any]:
        return {k: ({str(b): t for b, t in v.items()} if isinstance(v, dict) else v)
                for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Probe:
        """The probe :meth:`to_json` wrote (a plan.json's ``probe``); keys it does not know are
        left out, fields it lacks take their defaults."""
        known = {f.name: f.type for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key in (name for name, kind in known.items() if kind == "dict[int, float]"):  # sizes -> seconds
            values[key] = {int(size): float(t) for size, t in (values.get(key) or {}).items()}
        return cls(**values)


#: the norm of a coupled pace's two sides (:meth:`Pace.step_s`): at equal paces a step takes
#: 2**(1/4) = 1.19x the slower side, at a 2:1 ratio 1.03x (fitted on PPO Breakout, central on 8
#: ranks, where the learner's and the simulators' modelled paces were 1.2x apart and the job ran
#: 10% under the slower one)
COUPLING = 4.0


@dataclass
class Pace:
    """Seconds per job-wide env step of each side, once learning runs (and before)."""

    sim: float
    learn: float
    comm: float = 0.0
    serial: bool = False      # one rank simulates and learns in turn: the sides add up
    learn_warm: float = 0.0   # the learner side before learning_starts
    start: float = 0.0        # seconds once per run before the learner has its first rows
    #: each step waits for the learner's answer (central): see :meth:`step_s`
    coupled: bool = False
    #: job-wide steps of one round where a run ends only at a round's end (star, p2p): a budget
    #: of 10,000 steps runs 11,520 on 16 ranks in rounds of 3,840 (0: it ends at its budget)
    round_steps: int = 0

    def steps_run(self, budget: int) -> int:
        """The env steps a run of ``budget`` steps makes: the first whole round at or past it."""
        if self.round_steps <= 0:
            return budget
        return -(-budget // self.round_steps) * self.round_steps

    def step_s(self, learning: bool = True) -> float:
        """Seconds per job-wide step: the sides in turn (``serial``), else the slower side - or,
        ``coupled``, the 4-norm of the two (:data:`COUPLING`): simulators that wait for every
        answer and a learner that waits for their rows each wait for the other part of the time
        when their paces are near, neither keeping a queue that hides the other's jitter."""
        learner = self.learn if learning else self.learn_warm
        if self.serial:
            core = self.sim + learner
        elif self.coupled:
            core = (self.sim ** COUPLING + learner ** COUPLING) ** (1.0 / COUPLING)
        else:
            core = max(self.sim, learner)
        return core + self.comm

    def learner_s(self, learning: bool = True) -> float:
        """The learner's own seconds per job-wide step (the simulators' too where they take
        turns): what follows :attr:`start`, which only the learner waits out - the simulators'
        steps during it count once their first rows arrive."""
        learner = self.learn if learning else self.learn_warm
        return (self.sim + learner if self.serial else learner) + self.comm

    def bound(self) -> str:
        if self.comm > 0.25 * self.step_s():
            return "exchange"
        if self.serial:
            return "stepping and learning in turn"
        return "learner" if self.learn >= self.sim else "simulators"


def device_turns(p: Probe, learners: int) -> int:
    """How many learner ranks take turns on one GPU: CUDA time-slices the processes that share
    a device, so their updates do not overlap (1 on the CPU, where each rank has its core)."""
    if not str(p.device).startswith("cuda"):
        return 1
    return max(1, math.ceil(learners / max(1, p.gpus)))


def log2(n: int) -> int:
    """Steps of a tree collective over ``n`` ranks."""
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def batch_share(batch: int | None, ranks: int, rule: str) -> int | None:
    """A learner's batch when ``ranks`` learners share one update (``batch_rule``)."""
    if batch is None or rule == "per_rank":
        return batch
    return max(1, round(batch / ranks))


def sync_rows(p: Probe, sync_every: int) -> int:
    """Rows a simulator sends per round or chunk: ``sync_every`` steps of its environments."""
    return max(1, sync_every) * p.num_envs


def learner_side(p: Probe, f: float, extra: float = 0.0) -> tuple[float, float]:
    """``(learn, learn_warm)`` of ONE learner that stores every row of the job (p2p, star, async,
    central): c + rho u + ``extra`` per job-wide step once learning runs, c + ``extra`` before,
    every compute cost slowed by ``f``."""
    c = p.ingest_row_s * f
    return c + p.updates_per_step * p.learner_update_at(p.batch_size) * f + extra, c + extra


def star_pace(sims: int, p: Probe, sync_every: int, f: float, whole_rounds: bool = True) -> Pace:
    """One learner fed by ``sims`` simulators in rounds of ``sync_every`` steps (p2p, star): the
    learner stores and trains while the simulators step; a round moves each simulator's rows and
    the weights. ``whole_rounds``: every round has ``sync_every`` steps, so a run ends at a round's
    end past its budget (not so for rounds of episodes or ramped up)."""
    rows = sync_rows(p, sync_every)
    comm = sims * p.message_s(rows * p.row_bytes) + max(1, log2(sims + 1)) * p.message_s(p.weight_bytes)
    learn, warm = learner_side(p, f)
    return Pace(sim=p.sim_step_s * f / sims, learn=learn, comm=comm / (sims * rows), learn_warm=warm,
                start=first_round(p, sync_every, f), round_steps=sims * rows if whole_rounds else 0)


def first_round(p: Probe, sync_every: int, f: float = 1.0) -> float:
    """The learner's wait for the first round or chunk: a simulator stepping ``sync_every``
    steps of its environments (it overlaps nothing; a short run pays it noticeably)."""
    return sync_rows(p, sync_every) * p.sim_step_s * f
