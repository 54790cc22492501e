"""The replay ring buffer."""

from __future__ import annotations

import numpy as np

from drlmpi.comm import ExperienceLayout
from drlmpi.replay import ReplayBuffer


def _rows(layout: ExperienceLayout, start: int, n: int) -> np.ndarray:
    rows = layout.empty(n)
    layout.column(rows, "reward")[:, 0] = np.arange(start, start + n)
    return rows


def test_ring_wraps_and_keeps_newest():
    layout = ExperienceLayout(2, 1)
    buf = ReplayBuffer(layout, capacity=5)
    buf.add(_rows(layout, 0, 3))
    buf.add(_rows(layout, 3, 4))  # wraps: holds 2..6
    assert len(buf) == 5
    assert sorted(layout.column(buf.rows, "reward")[:, 0].tolist()) == [2, 3, 4, 5, 6]
    buf.add(_rows(layout, 100, 12))  # more than capacity: keeps the newest 5
    assert sorted(layout.column(buf.rows, "reward")[:, 0].tolist()) == [107, 108, 109, 110, 111]


def test_sample_shapes_and_content():
    layout = ExperienceLayout(3, 1)
    buf = ReplayBuffer(layout, capacity=10)
    rows = _rows(layout, 0, 10)
    layout.column(rows, "obs")[:] = np.arange(10)[:, None]
    buf.add(rows)
    batch = buf.sample(32, np.random.default_rng(0))
    assert batch["obs"].shape == (32, 3)
    assert batch["action"].shape == (32, 1)
    assert batch["reward"].shape == (32,)
    # Columns stay aligned row by row.
    assert np.array_equal(batch["obs"][:, 0].numpy(), batch["reward"].numpy())
