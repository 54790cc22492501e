"""The replay ring buffer: wrap-around, device-side sampling of valid rows only, static
minibatch tensors, no pinned staging on the CPU, and its memory arithmetic."""

from __future__ import annotations

import numpy as np
import torch

from drlmpi.data.layout import ExperienceLayout
from drlmpi.data.replay import ReplayBuffer, replay_bytes


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
    batch = buf.sample(32)
    assert batch["obs"].shape == (32, 3)
    assert batch["action"].shape == (32, 1)
    assert batch["reward"].shape == (32,)
    assert batch["terminated"].shape == (32,)
    # Columns stay aligned row by row.
    assert np.array_equal(batch["obs"][:, 0].numpy(), batch["reward"].numpy())


def test_samples_only_valid_rows_and_all_of_them():
    layout = ExperienceLayout(2, 1)
    buf = ReplayBuffer(layout, capacity=1000, seed=3)
    buf.add(_rows(layout, 1, 7))  # rewards 1..7; the other 993 rows are zeros
    seen = np.concatenate([buf.sample(256)["reward"].numpy().copy() for _ in range(20)])
    assert seen.min() >= 1 and seen.max() <= 7
    assert set(seen.tolist()) == set(range(1, 8))  # uniform over the valid rows
    buf.add(_rows(layout, 8, 2000))  # full and wrapped: every row valid
    seen = np.concatenate([buf.sample(256)["reward"].numpy().copy() for _ in range(20)])
    assert seen.min() >= 2008 - 1000 and seen.max() <= 2007


def test_sample_reuses_its_tensors_and_is_seeded():
    layout = ExperienceLayout(2, 1)
    a, b = ReplayBuffer(layout, 100, seed=7), ReplayBuffer(layout, 100, seed=7)
    for buf in (a, b):
        buf.add(_rows(layout, 0, 100))
    first = a.sample(16)
    pointer = first["reward"].data_ptr()
    values = first["reward"].clone()
    second = a.sample(16)
    assert second is first and second["reward"].data_ptr() == pointer  # static: capture-safe
    assert torch.equal(b.sample(16)["reward"], values)  # same seed, same draws
    assert not torch.equal(second["reward"], values)


def test_cpu_storage_uses_no_pinned_staging():
    layout = ExperienceLayout(2, 1)
    buf = ReplayBuffer(layout, 10)
    buf.add(_rows(layout, 0, 4))
    assert buf.storage.device.type == "cpu" and buf.staging.pinned is None
    assert np.shares_memory(buf.rows, buf.storage.numpy())  # rows is a view on the CPU


def test_replay_bytes_arithmetic():
    cartpole = ExperienceLayout(4, 1)
    assert cartpole.width == 15
    assert replay_bytes(cartpole, 100_000) == 100_000 * 15 * 4
    buf = ReplayBuffer(cartpole, 1000)
    assert buf.storage.numel() * buf.storage.element_size() == replay_bytes(cartpole, 1000)
