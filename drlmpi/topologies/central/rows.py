"""The experience rows a central learner builds from its simulators' step messages
(:mod:`drlmpi.topologies.central`): :class:`RowBuilder` fills one array with the rows of every
group that arrived together.

A row is the observation the learner acted on (held from the group's last serve), what the
step message says the step did (the action taken and :data:`STEP_COLUMNS`), the next observation
(the message's, or an ended episode's final one), the environment's stream and, where the
algorithm has them, the extra columns of the serve (PPO: log-probabilities). Per group only the
two observation copies are made; the step columns of all groups are gathered and written at once,
so a serve of many small groups costs about what one of few large groups costs (a group's own
column-by-column writes were ~68 us on a host core: most of a 15-group Breakout serve's ingest).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from drlmpi.topologies.central.wire import STEP_COLUMNS, Group, StepWire


class RowBuilder:
    """Rows of arrived groups for one wire (:meth:`build`), with the wire's column mapping worked
    out once."""

    def __init__(self, wire: StepWire) -> None:
        layout = wire.layout
        self.wire, self.layout = wire, layout
        first = wire.slices["obs"].stop
        #: the message's columns after the observations (one view per group)
        self.tail = slice(first, wire.width)
        names = ("action", *STEP_COLUMNS)
        def columns(slices: dict[str, slice]) -> np.ndarray:
            return np.concatenate([np.arange(slices[n].start, slices[n].stop) for n in names])

        #: where the action and step columns go in a row, and where they are in the tail
        self.dst, self.src = columns(layout.slices), columns(wire.slices) - first
        #: the step columns' places in the tail (what :meth:`StepWire.ended` reads there)
        self.in_tail = {name: slice(wire.slices[name].start - first, wire.slices[name].stop - first)
                        for name in ("terminated", "truncated")}
        self.forced = wire.slices["forced"].start - first

    def build(self, groups: list[Group], learner: Any, rows: np.ndarray) -> None:
        """Fill ``rows`` with the experience of ``groups``' latest step messages, in order (a
        group's count: its environments, none the first time it arrives), then keep each
        group's observations to act on next (a view of the buffer its message arrived in).
        ``learner``: its ``extras_of`` recomputes the extra columns of actions the environment
        changed (Atari's forced FIRE)."""
        layout, obs = self.layout, self.wire.slices["obs"]
        taking = [group for group in groups if group.obs is not None]
        if taking:
            tails, start = [], 0
            for group in taking:  # per group: the two observation copies, a view of the rest
                n, msg = group.n, group.buffer
                rows[start : start + n, layout.slices["obs"]] = group.obs
                rows[start : start + n, layout.slices["next_obs"]] = msg[:n, obs]
                tails.append(msg[:n, self.tail])
                start += n
            tail = np.concatenate(tails) if len(tails) > 1 else tails[0]
            rows[:, self.dst] = tail[:, self.src]
            rows[:, layout.slices["stream"]] = np.concatenate([group.streams for group in taking])[:, None]
            ended = StepWire.ended(tail, self.in_tail)
            if ended.any():
                self._final_observations(taking, ended, rows)
            if any(group.extras is not None for group in taking):
                self._extras(taking, tail[:, self.forced] != 0, learner, rows)
        for group in groups:
            group.obs = group.buffer[: group.n, obs]

    def _final_observations(self, taking: list[Group], ended: np.ndarray, rows: np.ndarray) -> None:
        """An ended episode's next observation is its final one, sent after the group's rows."""
        start, next_obs, obs = 0, self.layout.slices["next_obs"], self.wire.slices["obs"]
        for group in taking:
            n = group.n
            which = np.nonzero(ended[start : start + n])[0]
            if len(which):
                rows[start + which, next_obs] = group.buffer[n : n + len(which), obs]
            start += n

    def _extras(self, taking: list[Group], forced: np.ndarray, learner: Any, rows: np.ndarray) -> None:
        """The serve's extra columns; where the environment took another action than the one
        sent, those of the action taken (from the forward pass's output if it has them, else
        another pass)."""
        layout, extras = self.layout, self.layout.extras_slice
        if all(group.extras is not None for group in taking):
            rows[:, extras] = np.concatenate([group.extras for group in taking])
        else:
            start = 0
            for group in taking:
                if group.extras is not None:
                    rows[start : start + group.n, extras] = group.extras
                start += group.n
        if not forced.any():
            return
        start = 0
        for group in taking:
            which = np.nonzero(forced[start : start + group.n])[0] if group.extras is not None else []
            if len(which):
                at = start + which
                taken = rows[at][:, layout.slices["action"]]
                out = None if group.out is None else group.out[which]
                rows[at, extras] = learner.extras_of(out, layout.obs_array(rows[at]), taken)
            start += group.n
