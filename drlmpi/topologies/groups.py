"""Grouped learners: L learners, each fed by its own simulators, averaging gradients every update
(Ape-X-style actors per learner, DD-PPO-style learners).

The world of W ranks is split (``Comm.Split``) into ``topology.learners`` = L groups of
G = W / L consecutive ranks; the first rank of each group is its learner, the others its
simulators. Inside a group the wiring is ``topology.group_wiring``, one of :data:`WIRINGS`, each
a :class:`~drlmpi.topologies.core.wiring.GroupWiring` that another topology provides and groups
drives through that interface alone (its simulator side, its learner side, the fields it reads,
which :class:`GroupsSettings` inherits):

* ``star`` (:class:`~drlmpi.topologies.star.StarWiring`) - the simulators run star's simulator
  loop over the group's communicator, and the learner its side of the same messages (``Gather``
  of counts, ``Gatherv`` of rows, ``Bcast`` of control and weights);
* ``async`` (:class:`~drlmpi.topologies.asynchronous.group.AsyncWiring`) - the simulators run
  async's simulator, the learner its nonblocking learner (credits, lag bound, publications)
  with the learning step replaced by a meeting of the learners.
* ``central`` (:class:`~drlmpi.topologies.central.group.CentralWiring`) - the simulators only
  step (central's simulator); the learner acts for them in batched forward passes, builds their
  rows and meets the other learners every pass of its loop.

The L learners share a second communicator (another ``Split``). Every round (star) or loop
iteration (async) they *meet*: one ``Allgather`` of (new steps, updates owed, episodes), the
group-0 learner (rank 0) logs every group's episodes, all count the job-wide steps, rank 0
evaluates and decides stop / checkpoint (one ``Bcast``); then every learner runs the same
number of updates (the fewest any of them is owed), each averaging the L gradients with one
all-reduce per network over ``topology.backend`` (MPI, or NCCL with one GPU per learner), so
the learners keep identical parameters - checked by checksum every ``check_every`` updates and
at the end. How the job's batch is shared among the L learners is ``topology.batch_rule``
(:mod:`drlmpi.topologies.core.data_parallel.batch_rule`, N = L).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from drlmpi.config.errors import ConfigError
from drlmpi.config.scopes import TopologySettings, label, target
from drlmpi.config.settings import choice, integer
from drlmpi.job_control.launchers import size_refusal
from drlmpi.mpi.timed import TimedComm
from drlmpi.mpi.wire import Control, RoundCounts
from drlmpi.roles.actor import episode_stats
from drlmpi.topologies.asynchronous.group import AsyncWiring
from drlmpi.topologies.asynchronous.settings import AsyncChunkFields
from drlmpi.topologies.central.group import CentralWiring
from drlmpi.topologies.central.wire import CentralFields
from drlmpi.topologies.core.base import SyncFields, control_message
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.data_parallel.backend import check_backend
from drlmpi.topologies.core.data_parallel.batch_rule import (
    DEFAULT_RULE,
    BatchRuleFields,
    DataParallelTopology,
    per_rank_algo_config,
)
from drlmpi.topologies.core.data_parallel.learners import AveragingFields, DataParallelLearner
from drlmpi.topologies.core.data_parallel.rounds import exchange_round_counts, gather_episodes
from drlmpi.topologies.core.pace import Pace, Probe, batch_share, device_turns, first_round, log2, sync_rows
from drlmpi.topologies.core.reports import RankReport, learner_report
from drlmpi.topologies.core.rounds import LEARNER_RANK
from drlmpi.topologies.core.wiring import GroupWiring, wiring_table
from drlmpi.topologies.star import StarWiring

#: ``topology.group_wiring`` -> the wiring (the first is the default)
WIRINGS = wiring_table(StarWiring, AsyncWiring, CentralWiring)


@dataclass(frozen=True)
class GroupSplit(SyncFields, TopologySettings):
    """groups' own options: how the world splits into groups and how each group is wired."""

    learners: int = integer(2, "L: the world splits into L groups of one learner and its simulators; the L "
                               "learners average gradients every update")
    group_wiring: str = choice(next(iter(WIRINGS)), "how each group's simulators feed its learner: star "
                               "(collective rounds), async (nonblocking chunks) or central (the learner "
                               "acts for simulators that only step)", *WIRINGS)


@dataclass(frozen=True)
class GroupsSettings(CentralFields, AsyncChunkFields, BatchRuleFields, AveragingFields, GroupSplit):
    """groups' settings, composed: its own (:class:`GroupSplit`), its learners' (they average
    gradients: :class:`AveragingFields`, and share the job's batch: :class:`BatchRuleFields`) and
    the fields each wiring of :data:`WIRINGS` reads inside a group (``GroupWiring.fields``: star's
    are ``sync_every`` and ``sync_unit``, async's :class:`AsyncChunkFields`); each applies to the
    wiring that reads it."""

    scope: ClassVar[str] = "topology/groups"
    _target_: str = target("drlmpi.topologies.groups.Groups")
    name: str = label("groups", "topology")
    sync_every: int = integer(64, "steps (per environment) each simulator sends per round (star) or chunk "
                                  "(async)")


def group_sizes_hint(world_size: int) -> str:
    """The learner counts ``world_size`` ranks can be split into (2+ ranks per group), as text."""
    return "|".join(str(n) for n in range(1, world_size // 2 + 1) if world_size % n == 0)


class Groups(DataParallelTopology):
    """L groups of one learner and its simulators; the learners average gradients."""

    name = "groups"
    settings_class = GroupsSettings
    cfg: GroupsSettings
    min_ranks = 2
    max_ranks = None
    report_order = 60

    @classmethod
    def smallest_world(cls, cfg_topology: TopologySettings | Mapping[str, Any]) -> int:
        return 2 * max(1, cls.settings_of(cfg_topology).learners)

    @classmethod
    def env_ranks(cls, world_size: int, topo_cfg: TopologySettings | Mapping[str, Any]) -> int:
        """Every rank but the groups' learners."""
        return max(1, world_size - cls.settings_of(topo_cfg).learners)

    @classmethod
    def report_label(cls, topo_cfg: TopologySettings | Mapping[str, Any] | None) -> str:
        """``groups[Lxstar]``, with the backend and batch rule where not the defaults (an older
        run's config without ``group_wiring``: the default wiring, star, which it ran)."""
        settings = cls.settings_of(topo_cfg or {})
        parts = [f"{settings.learners}x{settings.group_wiring}"]
        if settings.backend not in ("mpi", "auto"):
            parts.append(settings.backend)
        if settings.batch_rule != DEFAULT_RULE:
            parts.append(settings.batch_rule)
        return f"{cls.name}[{','.join(parts)}]"

    @classmethod
    def batch_rule(cls, settings: GroupsSettings, algo_cfg: Mapping[str, Any], world_size: int):
        """The batch rule among the L learners (the ranks that sample)."""
        return per_rank_algo_config(algo_cfg, settings.learners, settings.batch_rule, settings.lr_scale)

    @classmethod
    def pace(cls, ranks: int, p: Probe, settings: GroupsSettings) -> Pace:
        """L learners, each fed by its group's simulators, averaging gradients every update:
        max(s/(N-L), c/L + rho (u(batch/L) + all-reduce(L) + straggler(L))) + round messages.
        A wiring whose learner acts for its simulators (``GroupWiring.serving``: central's): they
        only step, and each learner also serves its group's rows (over L learners at once)."""
        learners, f = max(1, settings.learners), p.slowdown_at(ranks)
        sims, group = max(1, ranks - learners), ranks // learners
        rule = settings.batch_rule
        per_update = (p.learner_update_at(batch_share(p.batch_size, learners, rule)) * f
                      * device_turns(p, learners)
                      + p.allreduce_at(learners) + p.straggler_s(learners, f))
        rho = p.updates_per_step if rule == "global" else p.updates_per_step / learners
        c = p.ingest_row_s * f / learners
        served = WIRINGS[settings.group_wiring].serving(p, settings, group - 1, f * device_turns(p, learners))
        if served is not None:  # the simulators only step; each learner serves its own group
            sim, per_row = served
            return Pace(sim=sim / learners, learn=c + per_row / learners + rho * per_update,
                        learn_warm=c + per_row / learners, coupled=True)
        rows = sync_rows(p, settings.sync_every)
        comm = ((group - 1) * p.message_s(rows * p.row_bytes)
                + max(1, log2(group)) * p.message_s(p.weight_bytes))
        return Pace(sim=p.sim_step_s * f / sims, learn=c + rho * per_update, comm=comm / (sims * rows),
                    learn_warm=c, start=first_round(p, settings.sync_every, f))

    @classmethod
    def check(cls, plan) -> None:
        world_size, topo = plan.world_size, cls.settings_of(plan.cfg.topology)
        learners = topo.learners
        if learners < 1 or world_size % learners or world_size // learners < 2:
            fits = group_sizes_hint(world_size)
            ranks = max(1, learners) * max(2, -(-world_size // max(1, learners)))
            raise ConfigError(size_refusal(
                f"topology=groups with topology.learners={learners} needs a world size that is a "
                f"multiple of {learners} with at least 2 ranks per group (a learner and its simulators)",
                world_size, ranks, "topology=groups")
                + (f", or use topology.learners={fits}" if fits else ""))
        super().check(plan)
        WIRINGS[topo.group_wiring].check(plan.with_world(world_size // learners), topo)
        check_backend(topo.backend, topo.reduce, plan.device)

    def run(self, ctx: RunContext) -> RankReport:
        comm = ctx.comm
        group, size, group_comm, learners_comm = split_groups(comm, self.cfg.learners)
        wiring = WIRINGS[self.cfg.group_wiring]
        if learners_comm is None:
            report = wiring.simulate(ctx.subcontext(group_comm), self.cfg)
        else:
            sub = ctx.subcontext(group_comm, lambda: group_comm.wait_s + learners_comm.wait_s)
            report = _GroupLearner(self, ctx, sub, learners_comm, group, size).run(wiring)
            report.extra["learners_comm"] = learners_comm.stats()
        # the rank's MPI wait is over all its communicators (their bytes stay apart, below)
        comm.add_wait(group_comm.wait_s + (learners_comm.wait_s if learners_comm is not None else 0.0))
        report.rank = comm.rank
        report.extra["group"] = group
        report.extra["group_comm"] = group_comm.stats()
        group_comm.free()
        if learners_comm is not None:
            learners_comm.free()
        return report


def split_groups(comm: TimedComm, learners: int) -> tuple[int, int, TimedComm, TimedComm | None]:
    """Split ``comm`` into ``learners`` groups of consecutive ranks: (this rank's group, the group
    size, the group's communicator, the learners' communicator - ``None`` on a simulator)."""
    from mpi4py import MPI

    size = comm.size // learners
    group, group_rank = divmod(comm.rank, size)
    group_comm = TimedComm(comm.Split(group, comm.rank))
    raw = comm.Split(0 if group_rank == LEARNER_RANK else MPI.UNDEFINED, comm.rank)
    return group, size, group_comm, (TimedComm(raw) if raw != MPI.COMM_NULL else None)


class _GroupLearner:
    """One group's learner: the meetings of the learners, and what its wiring's learner side
    uses of them (a :class:`~drlmpi.topologies.core.wiring.GroupLearner`)."""

    def __init__(self, topology: Groups, ctx: RunContext, sub: RunContext, lcomm: TimedComm,
                 group: int, group_size: int) -> None:
        self.cfg = topology.cfg
        self.ctx, self.sub, self.lcomm = ctx, sub, lcomm
        self.group, self.group_size = group, group_size
        self.is_root = lcomm.rank == 0  # the group-0 learner, rank 0 of the job
        self.peer = DataParallelLearner(sub, lcomm, self.cfg,
                                        topology.batch_rule(self.cfg, ctx.cfg.algo, ctx.comm.size),
                                        log=self.is_root)
        self.algo, self.learner = self.peer.algo, self.peer.learner
        # the job rank of every learner (for checkpoints and episode logging)
        self.learner_ranks = [g * group_size for g in range(lcomm.size)]
        self.group_steps = 0
        self.meetings = 0

    # -- the learners' meeting ----------------------------------------------------------------
    def meet(self, parts: list[tuple[int, np.ndarray]]) -> tuple[int, np.ndarray]:
        """Share this learner's new rows' counts and episodes with the others (it stored them
        already); returns (updates every learner runs now, the control message)."""
        learner, layout = self.learner, self.learner.layout
        self.meetings += 1
        rows = np.concatenate([r for _, r in parts]) if parts else layout.empty(0)
        self.group_steps += len(rows)
        episodes = len(episode_stats(rows, layout)) if len(rows) else 0
        table = exchange_round_counts(self.lcomm, len(rows), learner.pending_updates, episodes)
        if self.is_root:  # this group's episodes, with the simulator that ran them
            for source, part in parts:
                learner.log_episodes(part, self.group * self.group_size + source)
        gather_episodes(self.lcomm, rows, layout, table[:, RoundCounts.EPISODES], 0,
                        learner if self.is_root else None, names=self.learner_ranks, log_own=False)
        learner.count_steps(int(table[:, RoundCounts.NEW_STEPS].sum()))
        updates = int(table[:, RoundCounts.UPDATES_DUE].min())
        stop = checkpoint = False
        if self.is_root:
            learner.maybe_evaluate()
            stop = learner.stop_reason() is not None
            checkpoint = not stop and self.ctx.checkpoint_due()
        control = control_message(stop, learner, n_updates=updates, checkpoint=checkpoint)
        self.lcomm.Bcast(control, root=0, kind="control")
        return updates, control

    def train(self, updates: int) -> None:
        """``updates`` updates, every one averaging the learners' gradients."""
        self.peer.train(updates)

    def after_round(self, control: np.ndarray) -> None:
        if control[Control.CHECKPOINT]:  # every learner holds state: all save, together
            self.ctx.save_checkpoint(self.learner, ranks_with_state=self.learner_ranks, collective=True,
                                     comm=self.lcomm)
        self.ctx.progress()

    def finish(self) -> np.ndarray:
        """At a budget stop, the updates the last data entitled (the fewest any learner is
        owed; none after a solve), then the final checksums."""
        from mpi4py import MPI

        solved = self.is_root and self.learner.stop_reason() == "solved"
        owed = np.array([0 if solved else self.learner.pending_updates], dtype=np.int64)
        self.lcomm.Allreduce(MPI.IN_PLACE, owed, op=MPI.MIN, kind="counts")
        self.peer.train(int(owed[0]))
        return self.peer.check()

    # -- the run ------------------------------------------------------------------------------
    def run(self, wiring: type[GroupWiring]) -> RankReport:
        stats = wiring.learn(self)
        checksums = self.finish()
        per_learner = {"group": self.group, "rank": self.ctx.comm.rank, "device": str(self.algo.device),
                       "group_env_steps": self.group_steps, "updates": self.learner.part_updates,
                       "learn_s": round(self.learner.part_learn_s, 3),
                       "placement": asdict(self.peer.placement), **stats}
        calls = self.peer.close()
        if calls is not None:
            per_learner["backend_calls"] = calls
        table = self.lcomm.gather_objects(per_learner, root=0, kind="reports")
        topology_stats = {
            "learners": self.lcomm.size, "group_size": self.group_size, "group_wiring": wiring.name,
            "meetings": self.meetings, "per_learner": table, **self.peer.stats(checksums),
        }
        if table is not None:
            for key in wiring.summed_stats:
                topology_stats[key] = sum(int(row.get(key, 0)) for row in table)
        report = learner_report(self.ctx.comm.rank, self.learner,
                                stats=topology_stats if self.is_root else None)
        report.extra.update({k: v for k, v in per_learner.items() if k in ("device", "backend_calls")})
        return report

    def store(self, source: int, rows: np.ndarray) -> int:
        """Store rows from the group's rank ``source``, credited to its job rank."""
        return self.learner.store(rows, [self.group * self.group_size + source] * len(rows))
