"""An on-policy learner's storage: the rows that have not made a rollout yet (on the learner's
device, copied there once per chunk) and the frozen rollouts in order, each with the minibatch
updates it entitles and, once training on it started, its minibatch table and schedule."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from drlmpi.algos.advantages import stream_order
from drlmpi.device.staging import Staging


class Rollout:
    """A frozen rollout: its rows (on the learner's device), and once started the minibatch
    table (``obs | action | log_prob | advantage | return | value`` columns, ``| weight`` with
    the V-trace correction) and schedule."""

    def __init__(self, rows: torch.Tensor | None, n_updates: int, boundary_rows: int | None = None) -> None:
        self.rows = rows
        self.n_updates = n_updates
        #: with rows that follow their streams (:meth:`RolloutStore.follow_streams`), how many
        #: rows end their stream in the rollout or were truncated (the rows whose ``V(next_obs)``
        #: is evaluated: every other row's next observation is the next row's); ``None``: all rows
        self.boundary_rows = boundary_rows
        self.table: torch.Tensor | None = None
        self.views: dict[str, slice] = {}
        self.schedule: list[torch.Tensor] = []
        self.position = 0

    def state(self) -> dict[str, Any]:
        """Its rows, or once started its table, column views, schedule and position (so a
        rollout in training continues exactly), on the CPU."""
        return {"n_updates": self.n_updates, "position": self.position,
                "rows": None if self.rows is None else self.rows.detach().cpu(),
                "table": None if self.table is None else self.table.detach().cpu(),
                "views": {name: [cols.start, cols.stop] for name, cols in self.views.items()},
                "schedule": [part.detach().cpu() for part in self.schedule]}

    @classmethod
    def from_state(cls, saved: Mapping[str, Any], device: torch.device) -> Rollout:
        rows = saved["rows"]
        rollout = cls(None if rows is None else rows.to(device), int(saved["n_updates"]))
        if saved["table"] is not None:
            rollout.table = saved["table"].to(device)
            rollout.views = {name: slice(a, b) for name, (a, b) in saved["views"].items()}
            rollout.schedule = [part.to(device) for part in saved["schedule"]]
        rollout.position = int(saved["position"])
        return rollout


class RolloutStore:
    """Rows gathered into rollouts of at least ``rollout_steps`` rows; ``updates_of(n_rows)`` is
    the minibatch updates a rollout of ``n_rows`` rows gets."""

    def __init__(self, width: int, device: torch.device, rollout_steps: int,
                 updates_of: Callable[[int], int]) -> None:
        self.device = device
        self.rollout_steps = rollout_steps
        self.updates_of = updates_of
        self.staging = Staging(width, device)
        self.pending: list[torch.Tensor] = []  # chunks, already on the learner's device
        self.pending_rows = 0
        #: (stream, truncated) column indices once the rows follow their streams, else None
        self.stream_columns: tuple[int, int] | None = None
        #: the pending chunks' (stream, truncated) columns on the host; None: a chunk came without
        self.pending_marks: list[np.ndarray] | None = []
        self.rollouts: deque[Rollout] = deque()
        self.ungranted = 0  # updates of frozen rollouts not yet granted (take_granted)

    def follow_streams(self, stream: int, truncated: int) -> None:
        """The rows of each stream arrive as its consecutive steps, none missing (a topology
        that builds every row itself says so: central), so a row's next observation is the next
        row's observation unless the row ended an episode: rollouts frozen from here on evaluate
        ``V(next_obs)`` only where a stream ends in the rollout or was truncated, counted on the
        host from these two columns (:attr:`Rollout.boundary_rows`), so the device never waits."""
        self.stream_columns = (stream, truncated)

    def add(self, rows: np.ndarray) -> None:
        """Store a chunk; freeze a rollout once ``rollout_steps`` rows are waiting."""
        if rows.shape[0] == 0:
            return
        marks = None if self.stream_columns is None else rows[:, list(self.stream_columns)]  # (a copy)
        self.add_tensor(self.staging.to_device(rows), marks)  # one copy per chunk

    def add_tensor(self, rows: torch.Tensor, marks: np.ndarray | None = None) -> None:
        """:meth:`add` of rows already on the learner's device (kept, not copied); ``marks``:
        their (stream, truncated) columns on the host, when the rows follow their streams."""
        self.pending.append(rows)
        self.pending_rows += rows.shape[0]
        if marks is None:
            self.pending_marks = None
        elif self.pending_marks is not None:
            self.pending_marks.append(marks)
        if self.pending_rows >= self.rollout_steps:
            frozen = torch.cat(self.pending) if len(self.pending) > 1 else self.pending[0]
            marks_of = self.pending_marks
            self.pending, self.pending_rows, self.pending_marks = [], 0, []
            n_updates = self.updates_of(frozen.shape[0])
            boundary = None if not marks_of else boundary_count(np.concatenate(marks_of))
            self.rollouts.append(Rollout(frozen, n_updates, boundary))
            self.ungranted += n_updates

    def take_granted(self) -> int:
        """The updates of rollouts frozen since the last call."""
        due, self.ungranted = self.ungranted, 0
        return due

    @property
    def current(self) -> Rollout | None:
        """The rollout being trained on (the oldest), if any."""
        return self.rollouts[0] if self.rollouts else None

    def advance(self) -> None:
        """One minibatch of the current rollout done; drop it after its last."""
        rollout = self.rollouts[0]
        rollout.position += 1
        if rollout.position == len(rollout.schedule):
            self.rollouts.popleft()

    def state(self) -> dict[str, Any]:
        pending = torch.cat(self.pending).detach().cpu() if self.pending else None
        return {"pending": pending, "rollouts": [r.state() for r in self.rollouts],
                "ungranted": self.ungranted}

    def load_state(self, state: Mapping[str, Any]) -> None:
        pending = state["pending"]
        # restored rows end their streams where the run stopped: the rollout they join evaluates all
        self.pending_marks = [] if pending is None else None
        self.pending = [] if pending is None else [pending.to(self.device)]
        self.pending_rows = 0 if pending is None else int(pending.shape[0])
        self.rollouts = deque(Rollout.from_state(saved, self.device) for saved in state["rollouts"])
        self.ungranted = int(state["ungranted"])


def boundary_count(marks: np.ndarray) -> int:
    """Rows of a rollout (``marks``: its stream and truncated columns) that end their stream in
    it or were truncated: the count of :func:`drlmpi.algos.rollout_targets.boundary_positions`."""
    order, last_of_stream = stream_order(marks[:, 0])
    return int(np.count_nonzero(last_of_stream | (marks[order, 1] > 0)))


def table_views(widths: Mapping[str, int]) -> dict[str, slice]:
    """The columns of a minibatch table whose parts have ``widths`` (in order), each a slice."""
    views, offset = {}, 0
    for name, width in widths.items():
        views[name] = slice(offset, offset + width)
        offset += width
    return views
