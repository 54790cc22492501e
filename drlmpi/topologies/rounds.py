"""The synchronous round of the one-learner topologies (p2p, star, and the simulators of
``topology=groups``'s star wiring), written once.

A round: every simulator collects ``sync_every`` steps (or episodes) with the weights it has and
sends them; the learner ingests them, evaluates, sends the :class:`~drlmpi.mpi.wire.Control`
message (stop or go on, job-wide steps) and the current weights, *then* trains on what it
received - so simulation of round k+1 overlaps training on round k (a policy lag of one round).
How the messages move is a :class:`Link`: point to point (:class:`PointToPointLink`, one
simulator) or collective (:class:`CollectiveLink`, ``Gatherv``/``Bcast``, any number).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from drlmpi.mpi.timed import TimedComm
from drlmpi.mpi.wire import Control, Tag
from drlmpi.roles.actor import Actor
from drlmpi.roles.learner import Learner
from drlmpi.topologies.base import control_message, empty_control

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


def learn_in_rounds(learner: Learner, link: Link, after_round: Callable[[], None]) -> None:
    """The learner's side: rounds until the learner stops (then the updates the last data
    entitled, :meth:`~drlmpi.roles.learner.Learner.finish`); ``after_round`` runs after each
    round's training (checkpoints, progress). Each round's rows record their policy lag: the
    updates the learner ran since it sent the weights that acted (the previous round's training;
    0 in the first round), so the summary's ``policy_lag_mean`` says how stale a round is."""
    sent_at = learner.updates
    link.send_weights(learner.policy_weights())
    while True:
        lag = learner.updates - sent_at
        for source, rows in link.gather(learner.layout):
            learner.ingest(rows, source_rank=source, policy_lag=lag)
        learner.maybe_evaluate()
        stop = learner.stop_reason() is not None
        link.send_control(control_message(stop, learner))
        if stop:
            learner.finish()
            return
        sent_at = learner.updates
        link.send_weights(learner.policy_weights())
        learner.train()
        after_round()


def simulate_in_rounds(actor: Actor, link: Link, every: int, unit: str, simulators: int) -> None:
    """A simulator's side: collect, send, receive the control message and the weights, until
    the learner says stop. ``simulators``: how many collect in parallel (job-wide steps are
    extrapolated with it between rounds)."""
    control = empty_control()
    link.receive_weights(actor.weights)
    while True:
        link.send_rows(actor.collect(every, unit))
        link.receive_control(control)
        if control[Control.STOP]:
            return
        link.receive_weights(actor.weights)
        actor.set_global_steps(int(control[Control.ENV_STEPS]), simulators)
