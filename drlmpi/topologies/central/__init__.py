"""Central inference: 1 learner + N simulators that only step environments (SEED RL's split).

Simulators (ranks 1..N) hold no policy. Each steps its ``env.num_envs`` environments in
``topology.env_groups`` groups that take turns (two: double buffering). For a group it sends a
*step message* to the learner (``Isend``: it never waits for the learner to take it,
:mod:`drlmpi.topologies.central.simulator`) and waits for that group's actions, while its other
groups step:

* the observations to act on next (uint8 images as their bytes, as experience rows hold them);
* what the previous step of the group did: the action each environment took (Atari's FIRE after
  a lost life may differ from the one sent: a ``forced`` flag says so), the reward, the
  terminated / truncated flags and, where an episode (an Atari game) ended, its return and
  length;
* for each environment whose episode ended, one extra row with its final observation (the
  observation to act on is then the reset one).

The learner (rank 0) keeps a receive posted for every group of every simulator and serves
whichever have arrived (``Testsome``; ``Waitany`` when none has and no update is owed): ONE
batched forward pass of the learning network on its device over every waiting group's
observations, then the actions back with ``Isend``. The pass is launched, and while the device
runs it the learner takes in the groups that arrived meanwhile (builds and stores their rows);
then it sends the launched serve's actions and launches the next (one pass in flight). It
builds experience rows from what it already holds - the observations it acted on, its own
log-probabilities (PPO) - and the step message, so nothing crosses the wire twice and no
weights are ever sent. Between serves it runs at most
``topology.updates_per_serve`` of the updates the data entitles (``algo.updates_per_step``, a
PPO rollout's minibatches); when more than ``max_pending_updates`` are owed it trains them all
before serving again, so simulators wait rather than the ratio drifting.

The policy that acted is the learner's current one: the lag between acting and learning (in
updates) is recorded as in ``async``. Shutdown: once the learner stops, each group's next
message is answered with a stop flag instead of actions; every group is answered exactly once,
so no request is left pending. The summary's ``topology_stats`` hold the serves, the rows per
serve, the learner's inference, update and ingest seconds (rows built and stored); each simulator
reports its mean round trip (a group's message sent to its actions received). The learner's
rank (role ``learner+acting``) counts its inference as ``simulate_s``: the acting that other
topologies' simulators do, so its busy share includes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from drlmpi.config import scopes
from drlmpi.config.settings import choice, integer
from drlmpi.device.acting import Acting
from drlmpi.mpi.timed import Request, TimedComm
from drlmpi.outputs.figures import fmt, percent, table
from drlmpi.roles.learner import Learner
from drlmpi.topologies.central.rows import RowBuilder
from drlmpi.topologies.central.simulator import simulate
from drlmpi.topologies.central.wire import (
    LEARNER_RANK,
    CentralFields,
    Group,
    StepWire,
    simulator_groups,
)
from drlmpi.topologies.core.base import Topology
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.pace import Pace, Probe, learner_side
from drlmpi.topologies.core.reports import RankReport, learner_report

#: batches of updates a learner acting beside them keeps queued on its device (the oldest is
#: waited for before queueing more): bounds how far the acting copy lags behind
QUEUED_BATCHES = 2


@dataclass(frozen=True)
class Serving:
    """A serve whose forward pass is in flight: its groups (and their indices among the
    learner's), what :meth:`Acting.start` returned, the policy version it acts with."""

    arrived: list[Group]
    ready: list[int]
    started: Any
    version: int


@dataclass(frozen=True)
class CentralSettings(CentralFields, scopes.TopologySettings):
    scope: ClassVar[str] = "topology/central"
    _target_: str = scopes.target("drlmpi.topologies.central.Central")
    name: str = scopes.label("central", "topology")
    max_pending_updates: int | None = integer(
        None, "owed updates above which the learner trains them all before serving again (null: twice one "
              "PPO rollout's updates, else twice updates_per_serve)", nullable=True)
    overlap: str = choice(
        "auto", "act while updates run: serve from a copy of the policy on a CUDA stream of its own while "
                "the updates queued since run on the default one, the copy refreshed after each batch of "
                "them (auto: on a CUDA learner unless run.deterministic; on: also on the CPU, where nothing "
                "overlaps; off: wait for each batch of updates)", "auto", "on", "off")


def pending_limit(setting: int | None, learner: Learner, per_serve: int) -> int:
    """``max_pending_updates`` resolved: as set, else (null) twice a PPO rollout's updates, else
    twice ``per_serve``."""
    return setting if setting is not None else 2 * (learner.rollout_updates() or per_serve)


def updates_now(owed: int, per_serve: int, limit: int) -> int:
    """The updates a learner that acts for its simulators runs before serving again: at most
    ``per_serve`` of the ``owed`` ones, all of them once more than ``limit`` are owed."""
    return owed if owed > limit else min(owed, per_serve)


def serving(p: Probe, sims: int, env_groups_setting: int, f: float,
            beside_updates: bool = False) -> tuple[float, float]:
    """(the simulators' seconds per step they make together, the learner's seconds per row it
    serves) for one learner acting for ``sims`` simulators of ``p.num_envs`` games in
    ``env_groups_setting`` groups: a serve's forward pass shared by its rows and two messages per
    group step. A simulator steps its other groups while one waits for its actions, so a group's
    period is the longer of stepping all groups and stepping its own plus its round trip
    (:func:`round_trip`): with one group it always waits, with few simulators the trip outlasts
    the other groups' steps."""
    e = p.num_envs
    groups = max(1, min(env_groups_setting, e))
    serve_rows, per_message = max(1, sims * e // groups), max(1, e // groups)
    per_row = (p.act_at(serve_rows) * f / serve_rows
               + 2 * p.message_s(per_message * p.row_bytes) / per_message)
    own = per_message * p.env_step_s * f  # stepping one group's games
    period = max(groups * own, own + round_trip(p, serve_rows, per_message, f, beside_updates))
    return period / (sims * e), per_row


def round_trip(p: Probe, serve_rows: int, per_message: int, f: float, beside_updates: bool) -> float:
    """A group's seconds from its step message sent to its actions received: two messages and
    the serve's forward pass, and, acting beside updates on a CUDA learner, half of one update:
    the learner keeps batches of updates queued and waits for the oldest before queueing more,
    so a message arrives on average half an update into such a wait (fitted on PPO Breakout,
    central on 4 ranks: 3 simulators waited +60% longer than a trip without it)."""
    trip = 2 * p.message_s(per_message * p.row_bytes) + p.act_at(serve_rows) * f
    if beside_updates:
        trip += 0.5 * p.learner_update_at(p.batch_size) * f
    return trip


class Central(Topology):
    """Rank 0 acts for every simulator and learns; ranks 1..N only step environments."""

    name = "central"
    settings_class = CentralSettings
    cfg: CentralSettings
    min_ranks = 2
    max_ranks = None
    report_order = 45

    @classmethod
    def report_section(cls, runs: list[tuple[str, str, Any]]) -> list[str]:
        """``## Central inference`` of ``python -m drlmpi.report``: per run (``(env / algo,
        topology label, run)``), how the learner served its simulators."""
        rows = []
        for pair, label, run in runs:
            stats = run.summary.get("topology_stats") or {}
            if "serves" not in stats:
                continue
            part = run.summary.get("part") or {}  # a resumed run's stats cover its last part
            wall = max(1e-9, float(part.get("train_seconds", run.get("train_seconds", 0.0))))
            trips = [r["round_trip_ms"] for r in run.summary.get("per_rank", []) if "round_trip_ms" in r]
            rows.append([pair, label, str(run.seed), fmt(run.get("env_steps_per_s"), 0),
                         fmt(stats["serves"], 0), fmt(stats["rows_per_serve"], 1),
                         percent(stats["inference_s"] / wall), percent(stats["update_s"] / wall),
                         fmt(sum(trips) / len(trips), 2) if trips else "-"])
        if not rows:
            return []
        return ["## Central inference", "",
                "Per run: the learner's batched forward passes (serves) and the rows each acted on; its "
                "inference and update seconds as shares of the training time; the simulators' mean round "
                "trip (a group's observations sent to its actions received), in ms.", "",
                *table(["env / algo", "topology", "seed", "env steps/s", "serves", "rows/serve", "inference",
                        "updates", "round trip ms"], rows), ""]

    @classmethod
    def pace(cls, ranks: int, p: Probe, settings: CentralSettings) -> Pace:
        """Simulators only step; the learner serves each group's actions in one forward pass and
        trains: max(s_env/(N-1), c + rho u + a serve's pass per row + two messages per group step).
        Acting beside the updates (``topology.overlap`` on a CUDA learner), the device runs the
        updates while the host stores rows and serves: the learner's side is the slower of the
        two, max(c + a serve per row, rho u)."""
        f = p.slowdown_at(ranks)
        on_cuda = p.device.startswith("cuda")  # on the CPU nothing runs beside the updates
        beside = on_cuda and cls.acts_beside_updates(settings.overlap, "cuda", p.deterministic)
        sim, per_row = serving(p, ranks - 1, settings.env_groups, f, beside)
        learn, warm = learner_side(p, f, per_row)
        if beside:
            learn = max(warm, p.updates_per_step * p.learner_update_at(p.batch_size) * f)
        return Pace(sim=sim, learn=learn, learn_warm=warm, coupled=True)

    def run(self, ctx: RunContext) -> RankReport:
        if ctx.comm.rank == LEARNER_RANK:
            return self._learn(ctx)
        return self._simulate(ctx)

    # -- learner ---------------------------------------------------------------------------------
    def _learn(self, ctx: RunContext) -> RankReport:
        learner = ctx.make_learner()
        comm, layout = ctx.comm, learner.layout
        wire = StepWire(layout)
        builder = RowBuilder(wire)
        groups = simulator_groups(comm.size, ctx.rank, ctx.cfg.env.num_envs, self.cfg.env_groups, wire)
        requests = [group.post(comm) for group in groups]
        per_serve = self.cfg.updates_per_serve
        limit = pending_limit(self.cfg.max_pending_updates, learner, per_serve)
        acting = learner.acting_for_simulators(len(groups) * max(g.n for g in groups),
                                               self._overlaps(ctx, learner))
        queue = {"settle": not acting.beside_updates, "ahead": QUEUED_BATCHES}
        learner.successive_rows()  # every row is built here, each game's in step order
        after = ctx.after_round(learner)
        stats = {"serves": 0, "rows_served": 0, "inference_s": 0.0, "ingest_s": 0.0,
                 "env_groups": len(groups) // (comm.size - 1)}
        in_flight: Serving | None = None  # the serve whose forward pass is in flight
        while True:
            ready = comm.testsome(requests)
            if not ready and in_flight is None:
                if learner.pending_updates > 0 and self._room(learner, queue):
                    self._train(learner, acting, per_serve, queue)  # nothing to serve: train meanwhile
                    after()
                    continue
                ready = [comm.waitany(requests), *comm.testsome(requests)]
            arrived = [groups[i] for i in ready]
            if arrived:  # (while the last serve's pass runs on the device)
                t0 = time.perf_counter()
                self._ingest(arrived, learner, builder)
                stats["ingest_s"] += time.perf_counter() - t0
            if in_flight is not None:
                self._answer(comm, in_flight, acting, stats)
                for i in in_flight.ready:
                    requests[i] = groups[i].post(comm)
                in_flight = None
            learner.maybe_evaluate()
            if learner.stop_reason() is not None:
                break
            if arrived:
                in_flight = self._launch(arrived, ready, learner, acting, stats)
            owed = learner.pending_updates
            # (nothing owed: no call at all - a call for none would wait for the queued batches)
            if owed and (owed > limit or self._room(learner, queue)):
                self._train(learner, acting, updates_now(owed, per_serve, limit), queue)
            after()
        self._shut_down(comm, groups, requests, ready, learner, builder)
        learner.finish()
        stats["rows_per_serve"] = stats["rows_served"] / max(1, stats["serves"])
        stats["update_s"] = learner.part_learn_s
        stats["overlap"] = acting.beside_updates
        report = learner_report(comm.rank, learner, role="learner+acting", stats=stats)
        report.simulate_s = stats["inference_s"]  # acting, which other topologies' simulators do
        return report

    def _overlaps(self, ctx: RunContext, learner: Learner) -> bool:
        """Whether the learner acts beside its queued updates (``topology.overlap``)."""
        return self.acts_beside_updates(self.cfg.overlap, learner.device.type, ctx.cfg.run.deterministic)

    @staticmethod
    def acts_beside_updates(mode: str, device_type: str, deterministic: bool) -> bool:
        """``topology.overlap`` resolved: ``auto`` on a CUDA learner unless the run is deterministic."""
        if mode == "auto":
            return device_type == "cuda" and not deterministic
        return mode == "on"

    @staticmethod
    def _room(learner: Learner, queue: dict[str, Any]) -> bool:
        """Whether updates may be started now: always when each batch is waited for; acting
        beside them, while fewer than ``QUEUED_BATCHES`` batches are queued (the learner goes on
        serving rather than wait for the device)."""
        return queue["settle"] or learner.queued_batches() < QUEUED_BATCHES

    @staticmethod
    def _train(learner: Learner, acting: Acting, n: int, queue: dict[str, Any]) -> None:
        """``n`` of the owed updates; acting beside them, they are queued and the acting copy
        refreshed behind them."""
        if learner.train(n, **queue):
            acting.refresh()

    @staticmethod
    def _ingest(arrived: list[Group], learner: Learner, builder: RowBuilder) -> None:
        """The experience rows of the arrived groups' step messages, built in one array
        (:class:`~drlmpi.topologies.central.rows.RowBuilder`) and stored as one chunk."""
        counts = [group.n if group.obs is not None else 0 for group in arrived]
        rows = learner.row_buffer(sum(counts))  # a device learner's pinned staging rows
        parts = [(count, group.source, learner.updates - group.version)
                 for group, count in zip(arrived, counts)]
        builder.build(arrived, learner, rows)
        learner.ingest_parts(rows, parts)

    @staticmethod
    def _serve(comm: TimedComm, arrived: list[Group], learner: Learner, acting: Acting,
               stats: dict[str, Any]) -> None:
        """One batched forward pass over every arrived group's observations; actions back."""
        Central._answer(comm, Central._launch(arrived, [], learner, acting, stats), acting, stats)

    @staticmethod
    def _launch(arrived: list[Group], ready: list[int], learner: Learner, acting: Acting,
                stats: dict[str, Any]) -> Serving:
        """Queue one batched forward pass over every arrived group's observations (the device
        computes it while the host takes in the next arrivals); the policy version it acts with
        is recorded now, before any update queued after it."""
        layout = learner.layout
        slots = np.concatenate([group.obs for group in arrived]) if len(arrived) > 1 else arrived[0].obs
        t0 = time.perf_counter()
        started = acting.start(layout.obs_array(slots), learner.env_steps)
        stats["inference_s"] += time.perf_counter() - t0
        stats["serves"] += 1
        stats["rows_served"] += slots.shape[0]
        version = learner.updates if acting.published_at is None else acting.published_at
        return Serving(arrived, ready, started, version)

    @staticmethod
    def _answer(comm: TimedComm, serving: Serving, acting: Acting, stats: dict[str, Any]) -> None:
        """Wait for a launched serve's forward pass; each of its groups gets its actions."""
        t0 = time.perf_counter()
        actions, extras, out = acting.finish(serving.started)
        stats["inference_s"] += time.perf_counter() - t0
        start = 0
        for group in serving.arrived:
            part = slice(start, start + group.n)
            group.extras = None if extras is None else extras[part]
            group.out = None if out is None else out[part]
            group.version = serving.version
            group.answer(comm, actions[part])
            start += group.n

    @staticmethod
    def _shut_down(comm: TimedComm, groups: list[Group], requests: list[Request], ready: list[int],
                   learner: Learner, builder: RowBuilder) -> None:
        """Every group gets exactly one stop: the ones just arrived now, the others when their
        next message arrives (taken in, as every step is counted). Then every reply is sent."""
        for i in ready:
            groups[i].answer(comm, None)
        answered = set(ready)
        outstanding = [i for i in range(len(groups)) if i not in answered]
        while outstanding:
            index = comm.waitany([requests[i] for i in outstanding])
            i = outstanding.pop(index)
            Central._ingest([groups[i]], learner, builder)
            groups[i].answer(comm, None)
        for group in groups:
            if group.send is not None:
                comm.wait(group.send)

    # -- simulators --------------------------------------------------------------------------------
    def _simulate(self, ctx: RunContext) -> RankReport:
        return simulate(ctx, self.cfg.env_groups)
