"""How data-parallel ranks share the job's batch: ``topology.batch_rule`` (and ``lr_scale``).

In ``allgather`` and ``parameter_server`` N ranks each sample a minibatch from their own replay
or rollout, and every update averages their N gradients. What one update *is* then depends on
how the configured algorithm relates to N. The rule is applied as a transformation of the
algorithm's config, per rank (:func:`per_rank_algo_config`), to the learner each data rank
builds; algorithms never see it, and acting-only instances (simulators) keep the job's config
(TD3's ``learning_starts`` and DQN's ``exploration_steps`` there count job-wide steps already).

``global`` (the default) - the configured algorithm describes the JOB, as if one process ran it,
so learning per sample is the sequential topology's:

=====================  ==========================  ==========================================
option (when present)  per rank                    job-wide
=====================  ==========================  ==========================================
``batch_size`` B       ``B / N``, nearest integer  the minibatch of one update: N x (B / N)
``rollout_steps`` R    ``ceil(R / N)``             one rollout (PPO: same minibatches per epoch)
``buffer_size`` S      ``ceil(S / N)``             the replay (N replays of S / N rows each)
``learning_starts`` L  ``ceil(L / N)``             the first update after L job-wide steps
``updates_per_step`` U ``U x N`` per local step    U updates per job-wide step (sequential's)
learning rates         unchanged                   unchanged
=====================  ==========================  ==========================================

``B / N`` rounds to the nearest integer (halves up); a batch that would then move the job's
minibatch more than :data:`BATCH_TOLERANCE` (10 %) from ``B`` (``B < N`` among them) is refused
before any rank starts. ``R / N`` needs no such care: a rollout already takes every row pending
when it is reached.

``per_rank`` - the algorithm describes each RANK (this was the only behaviour before the rule
existed): every rank samples ``B`` (a job minibatch of N x B), keeps ``S`` rows, waits for ``L``
of its own transitions, and the job runs ``U`` updates per rank-local step (``U / N`` per
job-wide step: 1/N of sequential's optimizer steps per sample); PPO's rollout is ``R`` rows per
rank (N x R job-wide). ``lr_scale`` may then scale every learning rate (``lr`` and ``*_lr``) for
the N x larger minibatch: ``linear`` (x N, Goyal et al. 2017, derived for SGD) or ``sqrt``
(x sqrt(N), the usual rule for Adam); ``none`` (the default) keeps them.

N is the number of ranks that sample (:meth:`DataParallelTopology.data_ranks`): every rank of
``allgather``, the workers (all ranks but rank 0) of ``parameter_server``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from drlmpi.config.errors import ConfigError
from drlmpi.config.options import plain
from drlmpi.config.scopes import AlgoSettings, TopologySettings
from drlmpi.config.settings import Settings, choice, read_only
from drlmpi.topologies.core.base import SyncFields, Topology
from drlmpi.topologies.core.context import RunPlan
from drlmpi.topologies.core.pace import Pace, Probe, batch_share, device_turns, sync_rows

#: ``topology.batch_rule``'s and ``topology.lr_scale``'s choices (the first of each: the default)
BATCH_RULES, LR_SCALES = ("global", "per_rank"), ("none", "linear", "sqrt")
DEFAULT_RULE, DEFAULT_LR_SCALE = BATCH_RULES[0], LR_SCALES[0]
#: largest relative change of the job's minibatch ``global`` accepts when ``B / N`` is rounded.
BATCH_TOLERANCE = 0.1

_SPLIT_UP = ("rollout_steps", "buffer_size", "learning_starts")  # ceil(value / N) per rank


@dataclass(frozen=True)
class BatchRuleFields(SyncFields):
    """``topology.batch_rule`` and ``topology.lr_scale``: how every data-parallel topology shares
    the job's batch among the ranks that sample (:func:`per_rank_algo_config`), beside the
    experience each rank collects per round (:class:`~drlmpi.topologies.core.base.SyncFields`)."""

    batch_rule: str = choice(DEFAULT_RULE, "global: algo options describe the job (batch_size/N per rank, "
                                           "updates_per_step per job-wide step); per_rank: each rank's",
                             *BATCH_RULES)
    lr_scale: str = choice(DEFAULT_LR_SCALE, "batch_rule=per_rank: learning rates x N (linear), x sqrt(N) "
                                             "(sqrt) or as set (none)", *LR_SCALES)


@dataclass(frozen=True)
class BatchRule:
    """One rule applied to one job: the per-rank algorithm config and what changed.

    Attributes:
        rule: ``global`` or ``per_rank``.
        ranks: N, the ranks that sample minibatches.
        lr_scale: ``none``, ``linear`` or ``sqrt`` (``per_rank`` only).
        algo_cfg: the settings each data rank builds its learner from (the algorithm's settings
            class; a read-only mapping for an algorithm that declares none).
        changed: option -> (job value, per-rank value) for every option the rule rewrote.
        values: the per-rank options as plain values.
    """

    rule: str
    ranks: int
    lr_scale: str
    algo_cfg: AlgoSettings | Mapping[str, Any]
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def per_rank_batch(self) -> int | None:
        """The minibatch each rank samples (``None``: the algorithm has no ``batch_size``)."""
        return self.values.get("batch_size")

    def stats(self, per_rank_batch: int | None = None) -> dict[str, Any]:
        """The summary's ``topology_stats`` entries: the rule, N, the minibatch per rank (as the
        built algorithm reports it, when given) and per job, and the rewritten options."""
        batch = self.per_rank_batch if per_rank_batch is None else int(per_rank_batch)
        return {
            "batch_rule": self.rule,
            "lr_scale": self.lr_scale,
            "data_ranks": self.ranks,
            "per_rank_batch_size": batch,
            "global_batch_size": None if batch is None else batch * self.ranks,
            "per_rank_algo": {key: per_rank for key, (_, per_rank) in self.changed.items()},
        }


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def split_batch(batch_size: int, ranks: int) -> int:
    """``batch_size / ranks`` rounded to the nearest integer (halves up); raises
    :class:`ConfigError` when the job's minibatch would move more than :data:`BATCH_TOLERANCE`."""
    per_rank = _round_half_up(batch_size / ranks)
    if per_rank < 1 or abs(per_rank * ranks - batch_size) > BATCH_TOLERANCE * batch_size:
        below = max(ranks, batch_size // ranks * ranks)
        above = -(-batch_size // ranks) * ranks
        choices = " or ".join(str(v) for v in sorted({below, above}))
        raise ConfigError(
            f"topology.batch_rule=global needs algo.batch_size divisible by the {ranks} data-parallel "
            f"ranks (within {BATCH_TOLERANCE:.0%} once rounded): use algo.batch_size={choices}, or "
            f"topology.batch_rule=per_rank, got algo.batch_size={batch_size}")
    return per_rank


def per_rank_algo_config(algo_cfg: AlgoSettings | Mapping[str, Any], ranks: int, rule: str = DEFAULT_RULE,
                         lr_scale: str = DEFAULT_LR_SCALE) -> BatchRule:
    """The algorithm config each of ``ranks`` data-parallel ranks learns with under ``rule``
    (see the module docstring); options an algorithm does not have are left alone, so
    ``algo=random`` passes through. Pure: ``algo_cfg`` is not modified. Raises
    :class:`ConfigError` (one line) for a rule, scale or batch it cannot apply."""
    if rule not in BATCH_RULES:
        raise ConfigError(f"topology.batch_rule must be one of {', '.join(BATCH_RULES)}, got {rule!r}")
    if lr_scale not in LR_SCALES:
        raise ConfigError(f"topology.lr_scale must be one of {', '.join(LR_SCALES)}, got {lr_scale!r}")
    if rule == "global" and lr_scale != "none":
        raise ConfigError(
            f"topology.lr_scale={lr_scale} scales the learning rate for the N x larger minibatch of "
            f"topology.batch_rule=per_rank; batch_rule=global keeps sequential's minibatch and learning "
            f"rate: use topology.lr_scale=none, got topology.batch_rule=global")
    if ranks < 1:
        raise ConfigError(f"a data-parallel job needs at least one rank that samples, got {ranks}")
    typed = isinstance(algo_cfg, Settings)
    cfg = algo_cfg.as_dict() if typed else dict(plain(algo_cfg))  # rewritten by option name
    changed: dict[str, tuple[Any, Any]] = {}

    def rewrite(key: str, value: Any) -> None:
        if value != cfg[key]:
            changed[key] = (cfg[key], value)
            cfg[key] = value

    if rule == "global" and ranks > 1:
        if cfg.get("batch_size") is not None:
            rewrite("batch_size", split_batch(cfg["batch_size"], ranks))
        for key in _SPLIT_UP:
            if cfg.get(key) is not None:
                rewrite(key, -(-cfg[key] // ranks))
        if cfg.get("updates_per_step") is not None:
            rewrite("updates_per_step", cfg["updates_per_step"] * ranks)
    elif lr_scale != "none" and ranks > 1:
        factor = ranks if lr_scale == "linear" else math.sqrt(ranks)
        for key in [k for k in cfg if k == "lr" or k.endswith("_lr")]:
            rewrite(key, cfg[key] * factor)
    per_rank = type(algo_cfg).build(cfg) if typed else MappingProxyType(read_only(cfg))
    return BatchRule(rule, ranks, lr_scale, per_rank, changed, cfg)


class DataParallelTopology(Topology):
    """A topology whose ranks each sample minibatches and average their gradients: it builds
    its learners from :meth:`batch_rule`'s ``algo_cfg`` (``topology.batch_rule``) and refuses,
    in :meth:`check`, a rule it cannot apply before any rank starts. Its settings derive from
    :class:`BatchRuleFields`."""

    #: ranks that hold no data and sample nothing (a parameter server: 1).
    server_ranks: ClassVar[int] = 0

    @classmethod
    def data_ranks(cls, world_size: int) -> int:
        """N: the ranks that sample minibatches."""
        return world_size - cls.server_ranks

    @classmethod
    def env_ranks(cls, world_size: int, topo_cfg: TopologySettings | Mapping[str, Any]) -> int:
        """Every data rank simulates (a server rank does not)."""
        return max(1, cls.data_ranks(world_size))

    @classmethod
    def batch_rule(cls, settings: BatchRuleFields, algo_cfg: Mapping[str, Any], world_size: int) -> BatchRule:
        """``settings.batch_rule`` and ``lr_scale`` applied to ``algo_cfg`` (``algo.*``) for a job
        of ``world_size`` ranks."""
        return per_rank_algo_config(algo_cfg, cls.data_ranks(world_size), settings.batch_rule,
                                    settings.lr_scale)

    @classmethod
    def check(cls, plan: RunPlan) -> None:
        super().check(plan)
        cls.batch_rule(cls.settings_of(plan.cfg.topology), plan.cfg.algo, plan.world_size)

    @classmethod
    def pace(cls, ranks: int, p: Probe, settings: BatchRuleFields) -> Pace:
        """The N data ranks step their share in turn with every update of the job, each on its
        share of the batch, paying the exchange and the slowest rank's update:
        (s + c)/N + rho (u(batch/N) T + exchange(N) + straggler(N)) + the round's step counts,
        T the device learners that take turns on one GPU (:func:`device_turns`)."""
        workers, f = cls.data_ranks(ranks), p.slowdown_at(ranks)
        rule = settings.batch_rule
        per_update = (p.learner_update_at(batch_share(p.batch_size, workers, rule)) * f
                      * device_turns(p, workers)
                      + p.straggler_s(workers, f) + cls.exchange_s(ranks, p))
        rho = p.updates_per_step if rule == "global" else p.updates_per_step / workers
        round_comm = p.allreduce_at(ranks) / (workers * sync_rows(p, settings.sync_every))
        return Pace(sim=(p.sim_step_s + p.ingest_row_s) * f / workers, learn=rho * per_update,
                    comm=round_comm, serial=True)

    @classmethod
    def exchange_s(cls, ranks: int, p: Probe) -> float:
        """Seconds of one update's gradient exchange over ``ranks`` ranks (an all-reduce)."""
        return p.allreduce_at(ranks)
