"""Central's simulator side: :func:`simulate` (a simulator rank of ``topology=central``, or of a
group wired ``central``) and :func:`step_groups`, which steps its environment groups in turn,
each on the actions the learner sent for it, and sends each group's step message without
waiting for the learner to take it.

A step message of images is far larger than MPI's eager limit (a group of 4 Atari games is
about 113 KB), so a blocking ``Send`` returns only once the learner has taken the message: the
learner's MPI calls take it (its ``Testsome`` between serving, storing rows and queueing
updates), so the simulator would wait out the learner's current work before stepping its next
group, and double buffering would hide nothing. Each group's message is sent with ``Isend``
instead; the simulator goes on to its next group, and waits for a group's send only before the
group's next message - by then the learner has answered that group, so the message was taken.

An MPI may move a large message only inside the sender's own MPI calls (a rendezvous: the
learner's receive matches the message's header, and the rest follows when the sender next calls
MPI). The simulator would then hold each message while it steps its other group, whatever the
learner is doing: on 4 ranks of PPO Breakout with ``Isend`` alone, the learner waited for
messages 45% of its training time while its simulators waited for actions
(docs/results/h200host_plan_check_breakout/). So after each ``Isend`` the simulator tests the
send for up to :data:`PUSH_S`: a learner waiting for messages takes it within that time, and a busy
one takes it at the simulator's next MPI call as before. Not on a host with more ranks than
cores: the test would spin on the core the learner needs (on 2 cores with 4 ranks one group of
groups[central] then stepped 5 env steps to the other's 251).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from drlmpi.job_control.process import oversubscribed
from drlmpi.mpi.timed import Request
from drlmpi.mpi.wire import Tag
from drlmpi.topologies.central.wire import LEARNER_RANK, StepWire, env_groups
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.reports import RankReport

#: seconds a simulator tests each step message's send after posting it (see above)
PUSH_S = 0.5e-3


class ServedActor(Protocol):
    """What :func:`step_groups` needs of a group's actor (:class:`~drlmpi.roles.actor.Actor`)."""

    obs: np.ndarray
    n_envs: int

    def step_served(self, actions: np.ndarray) -> tuple[np.ndarray, Any]:
        """Step on the learner's ``actions``; the rows of the step."""


def simulate(ctx: RunContext, groups: int) -> RankReport:
    """A simulator over ``ctx.comm`` (its learner: rank 0 of it): ``env.num_envs`` environments
    in ``groups`` groups, stepped on the learner's actions until it stops them; its report."""
    algo = ctx.make_algo(learner=False)  # the layout and action conversion; never acts
    actors = [ctx.make_actor(algo=algo, envs=part) for part in env_groups(ctx.cfg.env.num_envs, groups)]
    round_trip_ms = step_groups(ctx.comm, actors, StepWire(algo.layout))
    for actor in actors:
        actor.close()
    return RankReport(rank=ctx.comm.rank, role="simulator", env_steps=sum(a.steps for a in actors),
                      episodes=sum(a.episodes for a in actors), simulate_s=sum(a.sim_s for a in actors),
                      extra={"round_trip_ms": round_trip_ms})


def push(done: Callable[[], bool], seconds: float) -> bool:
    """Test a posted send (``done``: its test) until it completes or ``seconds`` pass, moving it
    while a waiting receiver can take it; whether it completed."""
    until = time.perf_counter() + seconds
    while not done():
        if time.perf_counter() > until:
            return False
    return True


def step_groups(comm: Any, actors: list[ServedActor], wire: StepWire) -> float:
    """Step ``actors`` (one a group, group ``g`` on tags ``OBSERVATIONS + g`` and ``ACTIONS + g``)
    until the learner answers each with the stop flag; the mean round trip in ms (a group's
    message sent to its actions received)."""
    dim = wire.layout.action_dim
    replies = [np.zeros(1 + actor.n_envs * dim, dtype=np.float32) for actor in actors]
    # each group's message in flight (a request holds its buffer until the send completes)
    sends: list[Request | None] = [None] * len(actors)
    push_s = 0.0 if oversubscribed() else PUSH_S

    def send(g: int, msg: np.ndarray) -> None:
        if sends[g] is not None:
            comm.wait(sends[g])
        request = comm.Isend(msg, dest=LEARNER_RANK, tag=Tag.OBSERVATIONS + g, kind="observations")
        sends[g] = request
        if push_s and push(lambda: comm.test(request), push_s):
            sends[g] = None  # taken (a busy learner takes it in a later call)

    sent_at = []
    for g, actor in enumerate(actors):
        send(g, wire.first(actor.obs))
        sent_at.append(time.perf_counter())
    round_trip_s, round_trips = 0.0, 0
    active = list(range(len(actors)))
    while active:
        for g in list(active):
            comm.Recv(replies[g], source=LEARNER_RANK, tag=Tag.ACTIONS + g, kind="actions")
            round_trip_s += time.perf_counter() - sent_at[g]
            round_trips += 1
            if replies[g][0]:
                active.remove(g)
                continue
            actor = actors[g]
            actions = replies[g][1:].reshape(actor.n_envs, dim)
            rows, _ = actor.step_served(actions)
            send(g, wire.pack(rows, actor.obs, actions))
            sent_at[g] = time.perf_counter()
    for pending in sends:  # the learner took every message before it sent the stop
        if pending is not None:
            comm.wait(pending)
    return 1000.0 * round_trip_s / max(1, round_trips)
