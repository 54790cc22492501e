"""Central inference's step messages and environment groups (:mod:`drlmpi.topologies.central`):
:class:`StepWire` (what a simulator sends for one group - the observations to act on next, what
its previous step did, the final observations of ended episodes - packed as one message and
read back on the learner), :class:`Group` (one group of one simulator as the learner holds it: its
receive buffer, its pending request, its answer; :func:`simulator_groups`: all of a learner's),
:func:`env_groups` (a simulator's
environments split into the groups that take turns) and :class:`CentralFields` (the options
a central simulator and its learner read)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drlmpi.config.settings import Settings, integer
from drlmpi.data.layout import ExperienceLayout
from drlmpi.mpi.timed import Request, TimedComm
from drlmpi.mpi.wire import Tag

LEARNER_RANK = 0
STEP_COLUMNS = ("reward", "terminated", "truncated", "episode_return", "episode_length")


@dataclass(frozen=True)
class CentralFields(Settings):
    """What a central simulator and its learner read, in ``topology=central`` and in each group of
    ``topology=groups`` with ``group_wiring=central``: ``env_groups`` and ``updates_per_serve``."""

    env_groups: int = integer(
        2, "groups each simulator's environments step in, taking turns (2: one group steps while the "
           "learner acts for the other; at most env.num_envs, and 8)", high=8)
    updates_per_serve: int = integer(
        8, "updates the learner runs between two serves of the simulators while updates are owed")


class StepWire:
    """The float32 columns of a step message: ``obs`` (the experience layout's packed slots),
    ``action``, :data:`STEP_COLUMNS` and ``forced``; one row per environment of the group, then
    one row per ended episode whose ``obs`` is that environment's final observation."""

    def __init__(self, layout: ExperienceLayout) -> None:
        if layout.slices["obs"].start != 0:
            raise ValueError("the step message reuses the layout's obs packing: obs must come first")
        self.layout = layout
        self.slices: dict[str, slice] = {"obs": slice(0, layout.obs_slots)}
        offset = layout.obs_slots
        for name, width in (("action", layout.action_dim), *((c, 1) for c in STEP_COLUMNS), ("forced", 1)):
            self.slices[name] = slice(offset, offset + width)
            offset += width
        self.width = offset

    def capacity(self, n_envs: int) -> np.ndarray:
        """A receive buffer for a group of ``n_envs`` (every episode may end at once)."""
        return np.zeros((2 * n_envs, self.width), dtype=np.float32)

    def first(self, obs: np.ndarray) -> np.ndarray:
        """A group's first message: its reset observations, no step."""
        msg = np.zeros((obs.shape[0], self.width), dtype=np.float32)
        self.layout.put_obs(msg, "obs", obs)
        return msg

    def pack(self, rows: np.ndarray, obs: np.ndarray, sent: np.ndarray) -> np.ndarray:
        """The message after a step: ``rows`` the actor's rows of that step, ``obs`` what the
        group acts on next, ``sent`` the actions the learner sent."""
        layout, n = self.layout, rows.shape[0]
        ended = np.nonzero(self.ended(rows, layout.slices))[0]
        msg = np.zeros((n + len(ended), self.width), dtype=np.float32)
        layout.put_obs(msg[:n], "obs", obs)
        for name in ("action", *STEP_COLUMNS):
            msg[:n, self.slices[name]] = rows[:, layout.slices[name]]
        msg[:n, self.slices["forced"]] = (rows[:, layout.slices["action"]] != sent).any(axis=1, keepdims=True)
        msg[n:, self.slices["obs"]] = rows[ended, layout.slices["next_obs"]]
        return msg

    @staticmethod
    def ended(rows: np.ndarray, slices: dict[str, slice]) -> np.ndarray:
        """Which rows end an episode (terminated or truncated)."""
        return (rows[:, slices["terminated"]][:, 0] + rows[:, slices["truncated"]][:, 0]) > 0


class Group:
    """The learner's view of one environment group of one simulator: its receive buffer and
    request, the reply buffer and its send, and what the learner holds from its last serve."""

    def __init__(self, source: int, index: int, n_envs: int, stream_base: int, wire: StepWire) -> None:
        self.source, self.index, self.n = source, index, n_envs
        self.streams = np.arange(stream_base, stream_base + n_envs, dtype=np.float32)
        #: two receive buffers taking turns: the observations held from the last message stay
        #: where they arrived while the next message lands in the other buffer
        self.buffers = (wire.capacity(n_envs), wire.capacity(n_envs))
        self.turn = 0
        self.reply = np.zeros(1 + n_envs * wire.layout.action_dim, dtype=np.float32)
        self.send: Request | None = None
        self.obs: np.ndarray | None = None  # packed slots acted on at the last serve
        self.extras: np.ndarray | None = None
        self.out: np.ndarray | None = None  # the forward pass's output for these rows
        self.version = 0  # learner updates when it acted

    @property
    def buffer(self) -> np.ndarray:
        """The buffer the latest message arrived in (or the next one will)."""
        return self.buffers[self.turn]

    def post(self, comm: TimedComm) -> Request:
        """Receive the next message into the buffer that does not hold the observations kept."""
        if self.obs is not None:
            self.turn = 1 - self.turn
        return comm.Irecv(self.buffer, source=self.source, tag=Tag.OBSERVATIONS + self.index,
                          kind="observations")

    def answer(self, comm: TimedComm, actions: np.ndarray | None) -> None:
        """Send this group its actions, or the stop flag (``None``)."""
        if self.send is not None:
            comm.wait(self.send)  # the simulator took the previous reply before this message
        self.reply[0] = 1.0 if actions is None else 0.0
        if actions is not None:
            self.reply[1:] = actions.reshape(-1)
        self.send = comm.Isend(self.reply, dest=self.source, tag=Tag.ACTIONS + self.index, kind="actions")


def simulator_groups(comm_size: int, learner_rank: int, n_envs: int, groups: int,
                     wire: StepWire) -> list[Group]:
    """The learner's :class:`Group` of every environment group of its simulators (ranks 1..
    ``comm_size`` - 1 of its communicator), stream ids numbered by job rank (the learner's is
    ``learner_rank``), so they stay unique across the groups of ``topology=groups``."""
    return [Group(source, g, count, (learner_rank + source) * n_envs + first, wire)
            for source in range(1, comm_size) for g, (first, count) in enumerate(env_groups(n_envs, groups))]


def env_groups(n_envs: int, groups: int) -> list[tuple[int, int]]:
    """``(first, count)`` of each of the (at most ``n_envs``) groups of a simulator."""
    parts = np.array_split(np.arange(n_envs), min(groups, n_envs))
    return [(int(part[0]), len(part)) for part in parts]
