"""The synchronous round of the one-learner topologies (p2p, star, and the simulators of
``topology=groups``'s star wiring), written once.

A round: every simulator collects ``sync_every`` steps (or episodes) with the weights it has and
sends them; the learner ingests them, evaluates, sends the :class:`~drlmpi.mpi.wire.Control`
message (stop or go on, job-wide steps) and the current weights, *then* trains on what it
received - so simulation of round k+1 overlaps training on round k (a policy lag of one round).
How the messages move is a :class:`Link`: point to point (:class:`PointToPointLink`, one
simulator) or collective (:class:`CollectiveLink`, ``Gatherv``/``Bcast``, any number).

With ``run.eval_on=simulators`` the learner does not pause to evaluate: the round's control
message asks the simulators to play the evaluation that is due with the weights that follow,
each its share of the episodes (:class:`~drlmpi.roles.evaluate.EvaluationShare`), and they send
the returns with the next round's rows; the learner records it stamped with the moment it asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from drlmpi.mpi.timed import TimedComm
from drlmpi.mpi.wire import Control, Tag
from drlmpi.roles.actor import Actor
from drlmpi.roles.evaluate import EvaluationShare, merge_shares, message_width
from drlmpi.roles.learner import Learner
from drlmpi.roles.stopping import Moment
from drlmpi.topologies.core.base import control_message, empty_control, round_sizes
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.reports import RankReport, learner_report, simulator_report

LEARNER_RANK = 0


class Link(Protocol):
    """How one round's messages move between the learner (rank 0) and its simulators."""

    def send_weights(self, weights: np.ndarray) -> None:
        """Learner: the current policy weights to every simulator."""

    def receive_weights(self, weights: np.ndarray) -> None:
        """Simulator: the learner's weights, into ``weights`` (the actor's flat buffer)."""

    def gather(self, layout: Any) -> list[tuple[int, np.ndarray]]:
        """Learner: ``(source rank, rows)`` of every simulator that sent rows this round."""

    def send_rows(self, rows: np.ndarray) -> None:
        """Simulator: this round's experience."""

    def send_control(self, control: np.ndarray) -> None:
        """Learner: the control message to every simulator."""

    def receive_control(self, control: np.ndarray) -> None:
        """Simulator: the learner's control message, into ``control``."""

    def gather_returns(self, width: int) -> np.ndarray:
        """Learner: every simulator's share of an evaluation (float64, one row of ``width`` per
        simulator, in rank order)."""

    def send_returns(self, returns: np.ndarray) -> None:
        """Simulator: its share of an evaluation (float64, ``width`` long)."""


class PointToPointLink:
    """One simulator (rank 1): ``Send``/``Recv``; the learner sizes the rows with a timed
    ``Probe``."""

    SIMULATOR_RANK = 1

    def __init__(self, comm: TimedComm) -> None:
        self.comm = comm

    def send_weights(self, weights: np.ndarray) -> None:
        self.comm.Send(weights, dest=self.SIMULATOR_RANK, tag=Tag.WEIGHTS, kind="weights")

    def receive_weights(self, weights: np.ndarray) -> None:
        self.comm.Recv(weights, source=LEARNER_RANK, tag=Tag.WEIGHTS, kind="weights")

    def gather(self, layout: Any) -> list[tuple[int, np.ndarray]]:
        count = self.comm.probe_count(self.SIMULATOR_RANK, Tag.EXPERIENCE, itemsize=4)
        rows = np.empty((count // layout.width, layout.width), np.float32)
        self.comm.Recv(rows, source=self.SIMULATOR_RANK, tag=Tag.EXPERIENCE, kind="experience")
        return [(self.SIMULATOR_RANK, rows)]

    def send_rows(self, rows: np.ndarray) -> None:
        self.comm.Send(rows, dest=LEARNER_RANK, tag=Tag.EXPERIENCE, kind="experience")

    def send_control(self, control: np.ndarray) -> None:
        self.comm.Send(control, dest=self.SIMULATOR_RANK, tag=Tag.CONTROL, kind="control")

    def receive_control(self, control: np.ndarray) -> None:
        self.comm.Recv(control, source=LEARNER_RANK, tag=Tag.CONTROL, kind="control")

    def gather_returns(self, width: int) -> np.ndarray:
        table = np.empty((1, width))
        self.comm.Recv(table, source=self.SIMULATOR_RANK, tag=Tag.EVALUATION, kind="evaluation")
        return table

    def send_returns(self, returns: np.ndarray) -> None:
        self.comm.Send(returns, dest=LEARNER_RANK, tag=Tag.EVALUATION, kind="evaluation")


class CollectiveLink:
    """Any number of simulators: ``Gather`` of the row counts and ``Gatherv`` of the rows, then
    ``Bcast`` of the control message and of the weights."""

    def __init__(self, comm: TimedComm) -> None:
        self.comm = comm

    def send_weights(self, weights: np.ndarray) -> None:
        self.comm.Bcast(weights, root=LEARNER_RANK, kind="weights")

    receive_weights = send_weights  # a Bcast is the same call on every rank

    def gather(self, layout: Any) -> list[tuple[int, np.ndarray]]:
        from mpi4py import MPI

        comm = self.comm
        counts = np.zeros(comm.size, dtype=np.int64)
        comm.Gather(np.zeros(1, dtype=np.int64), counts, root=LEARNER_RANK, kind="counts")
        rows = layout.empty(int(counts.sum()))
        sizes = counts * layout.width
        displacements = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        comm.Gatherv(layout.empty(0), [rows, sizes, displacements, MPI.FLOAT], root=LEARNER_RANK,
                     kind="experience")
        parts, start = [], 0
        for source, count in enumerate(counts):
            if count:
                parts.append((source, rows[start : start + count]))
            start += count
        return parts

    def send_rows(self, rows: np.ndarray) -> None:
        self.comm.Gather(np.array([rows.shape[0]], dtype=np.int64), None, root=LEARNER_RANK, kind="counts")
        self.comm.Gatherv(rows, None, root=LEARNER_RANK, kind="experience")

    def send_control(self, control: np.ndarray) -> None:
        self.comm.Bcast(control, root=LEARNER_RANK, kind="control")

    receive_control = send_control

    def gather_returns(self, width: int) -> np.ndarray:
        table = np.empty((self.comm.size, width))
        self.comm.Gather(np.full(width, np.nan), table, root=LEARNER_RANK, kind="evaluation")
        return np.delete(table, LEARNER_RANK, axis=0)

    def send_returns(self, returns: np.ndarray) -> None:
        self.comm.Gather(returns, None, root=LEARNER_RANK, kind="evaluation")


def learner_rounds(ctx: RunContext, link: Link, simulators: int) -> RankReport:
    """The learner rank of p2p and star: :func:`learn_in_rounds` fed by ``simulators``."""
    learner = ctx.make_learner()
    stats = learn_in_rounds(learner, link, ctx.after_round(learner), evaluation_shares(ctx, simulators))
    return learner_report(ctx.comm.rank, learner, stats=stats)


def simulator_rounds(ctx: RunContext, link: Link, every: int, unit: str, simulators: int,
                     ramp_from: int | None = None) -> RankReport:
    """A simulator rank of p2p and star (and of topology=groups' star wiring): its actor, and
    its share of the evaluations with ``run.eval_on=simulators``, through
    :func:`simulate_in_rounds` (``ramp_from``: ``topology.ramp_from``)."""
    actor = ctx.make_actor()
    evaluation = simulator_share(ctx, actor, simulators)
    simulate_in_rounds(actor, link, every, unit, simulators, evaluation, ramp_from)
    actor.close()
    if evaluation is not None:
        evaluation.close()
    return simulator_report(ctx.comm.rank, actor, evaluation=evaluation)


def evaluation_shares(ctx: RunContext, simulators: int) -> int:
    """How many simulators share the evaluations: ``simulators`` with
    ``run.eval_on=simulators``, else 0 (the learner evaluates)."""
    return simulators if ctx.cfg.run.eval_on == "simulators" else 0


def simulator_share(ctx: RunContext, actor: Actor, simulators: int) -> EvaluationShare | None:
    """This simulator's share of the evaluations (simulator ranks follow the learner, rank 0),
    or ``None`` when the learner evaluates."""
    if not evaluation_shares(ctx, simulators):
        return None
    return ctx.make_evaluation_share(actor, ctx.comm.rank - 1, simulators, learner_rank=LEARNER_RANK)


def learn_in_rounds(learner: Learner, link: Link, after_round: Callable[[], None],
                    simulators: int = 0) -> dict[str, float]:
    """The learner's side: rounds until the learner stops (then the updates the last data
    entitled, :meth:`~drlmpi.roles.learner.Learner.finish`); ``after_round`` runs after each
    round's training (checkpoints, progress). Each round's rows record their policy lag: the
    updates the learner ran since it sent the weights that acted (the previous round's training;
    0 in the first round), so the summary's ``policy_lag_mean`` says how stale a round is. A
    device learner's updates run while it receives the next round's rows (it settles them once
    the rows are in, before anything reads the weights or pauses the clock).

    ``simulators``: with ``run.eval_on=simulators``, how many share the evaluations (0: the
    learner evaluates). The round that stops evaluates on the learner, if one is due then.
    Returns the summary's ``topology_stats``: the round clock (:class:`RoundClock`) and, with
    ``simulators``, ``simulator_eval_s``, the most seconds one simulator spent playing
    evaluations."""
    eval_s = np.zeros(simulators)
    clock = RoundClock()
    sent_at = learner.updates
    link.send_weights(learner.policy_weights())
    asked: tuple[int, Moment] | None = None  # the evaluation the simulators are playing
    while True:
        lag = learner.updates - sent_at
        started = time.perf_counter()
        parts = link.gather(learner.layout)
        waited = time.perf_counter() - started
        # the last round's updates ran on the device while the rows arrived: settled before the
        # rows are stored (a copy queued behind them would hold the next part's staging buffer)
        clock.settled(learner.settle())
        started = time.perf_counter()
        for source, rows in parts:
            learner.ingest(rows, source_rank=source, policy_lag=lag)
        clock.gathered(waited + time.perf_counter() - started)
        if asked is not None:
            eval_s += receive_evaluation(learner, link, simulators, asked[1])
            asked = None
        if not simulators:
            learner.maybe_evaluate()
        stop = learner.stop_reason() is not None
        if simulators and learner.evaluation_due():
            if stop:
                learner.maybe_evaluate()
            else:
                asked = (learner.take_evaluation(), learner.moment())
        control = control_message(stop, learner)
        if asked is not None:
            control[Control.EVALUATE] = asked[0] + 1
        link.send_control(control)
        if stop:
            learner.finish()
            return {**clock.stats(), **({"simulator_eval_s": float(eval_s.max())} if simulators else {})}
        sent_at = learner.updates
        link.send_weights(learner.policy_weights())
        started = time.perf_counter()
        learner.train(settle=False)
        clock.trained(time.perf_counter() - started)
        after_round()


class RoundClock:
    """Where a learner's rounds go: the seconds of each round's gather (waiting for the
    simulators' rows, and storing them) and of its training (the updates the rows entitle, while
    the simulators collect the next round). The summary's ``topology_stats`` gets ``rounds``,
    ``first_gather_s`` (the first round, which no training overlaps), ``gather_s_median`` and
    ``train_s_median`` (the later rounds): a learner-bound job gathers in almost no time, a
    simulator-bound one trains in less time than it gathers. On a device the learner gathers
    while the last round's updates run (``gather_s`` then overlaps them); ``queue_s_median`` is
    the host's time in the train call (on a device, queueing the updates: near ``train_s`` when
    the device's queue fills and the host waits for it)."""

    def __init__(self) -> None:
        self.gathers: list[float] = []
        self.trains: list[float] = []
        self.queues: list[float] = []  # the host's seconds in each round's train call

    def gathered(self, seconds: float) -> None:
        self.gathers.append(seconds)

    def trained(self, seconds: float) -> None:
        self.trains.append(seconds)
        self.queues.append(seconds)

    def settled(self, device_seconds: float) -> None:
        """The last round's updates, queued on a device (``Learner.train(settle=False)``), took
        ``device_seconds`` there: its training time is that, or the time queueing took if longer."""
        if self.trains:
            self.trains[-1] = max(self.trains[-1], device_seconds)

    def stats(self) -> dict[str, float]:
        if not self.gathers:
            return {}
        later = self.gathers[1:]
        return {"rounds": len(self.gathers), "first_gather_s": round(self.gathers[0], 6),
                "gather_s_median": round(float(np.median(later)), 6) if later else 0.0,
                "train_s_median": round(float(np.median(self.trains)), 6) if self.trains else 0.0,
                "queue_s_median": round(float(np.median(self.queues)), 6) if self.queues else 0.0}


def receive_evaluation(learner: Learner, link: Link, simulators: int, at: Moment) -> np.ndarray:
    """Receive the shares of the evaluation the simulators played and record it, stamped with
    the moment it was asked for (``at``); returns the seconds each simulator spent on it."""
    episodes = learner.eval_episodes
    table = link.gather_returns(message_width(episodes, simulators))
    returns, seconds = merge_shares(table, episodes)
    learner.record_evaluation(returns, at=at)
    return seconds


def simulate_in_rounds(actor: Actor, link: Link, every: int, unit: str, simulators: int,
                       evaluation: EvaluationShare | None = None, ramp_from: int | None = None) -> None:
    """A simulator's side: collect, send, receive the control message and the weights, until
    the learner says stop. ``simulators``: how many collect in parallel (job-wide steps are
    extrapolated with it between rounds). ``evaluation``: this simulator's share of the
    evaluations the learner asks for (``run.eval_on=simulators``), played with the weights just
    received and sent with the next round's rows. ``ramp_from``: the first round's steps,
    doubled each round up to ``every`` (:func:`~drlmpi.topologies.core.base.round_sizes`; the
    learner trains on whatever a round brings, so only the simulators need to know)."""
    control = empty_control()
    link.receive_weights(actor.weights)
    played = None
    sizes = round_sizes(every, ramp_from)
    while True:
        link.send_rows(actor.collect(next(sizes), unit))
        if played is not None:
            link.send_returns(played)
            played = None
        link.receive_control(control)
        if control[Control.STOP]:
            return
        link.receive_weights(actor.weights)
        actor.set_global_steps(int(control[Control.ENV_STEPS]), simulators)
        if control[Control.EVALUATE]:
            if evaluation is None:
                raise RuntimeError("the learner asked for an evaluation this simulator was not given")
            played = evaluation.play(int(control[Control.EVALUATE]) - 1)
