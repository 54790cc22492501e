"""Flat parameter/gradient buffers and the packed experience layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from drlmpi.algos.params import FlatParams
from drlmpi.data.layout import ExperienceLayout


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_flat_params_are_views_into_one_buffer():
    net = _net()
    before = [p.detach().clone() for p in net.parameters()]
    flat = FlatParams(net)
    assert flat.numel == sum(p.numel() for p in net.parameters()) == 3 * 4 + 4 + 4 * 2 + 2
    # Values survived the re-seating, in order.
    assert torch.equal(flat.params, torch.cat([b.reshape(-1) for b in before]))
    # Writing the flat numpy view (what an MPI receive does) changes the model.
    flat.params_numpy()[:] = 0.5
    assert all(torch.all(p == 0.5) for p in net.parameters())


def test_backward_accumulates_into_flat_gradients():
    net = _net()
    flat = FlatParams(net)
    x = torch.randn(5, 3)
    net(x).sum().backward()
    expected = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
    assert torch.count_nonzero(flat.grads) > 0
    assert torch.equal(flat.grads, expected)
    # Gradients are views: scaling the flat buffer (an all-reduce average) scales p.grad.
    flat.grads.mul_(0.5)
    assert torch.equal(torch.cat([p.grad.reshape(-1) for p in net.parameters()]), expected * 0.5)
    flat.zero_grad()
    assert all(torch.all(p.grad == 0) for p in net.parameters())


def test_optimizer_step_reads_flat_gradients():
    net = _net()
    flat = FlatParams(net)
    opt = torch.optim.SGD(net.parameters(), lr=1.0)
    start = flat.params.clone()
    flat.grads.fill_(1.0)
    opt.step()
    assert torch.allclose(flat.params, start - 1.0)


def test_load_params_copies_and_checksum_changes():
    net = _net()
    flat = FlatParams(net)
    before = flat.checksum()
    flat.load_params(np.full(flat.numel, 2.0, dtype=np.float32))
    assert torch.all(flat.params == 2.0)
    assert flat.checksum() != before


def test_experience_layout_columns():
    layout = ExperienceLayout(obs_dim=4, action_dim=1, extras=(("log_prob", 1),))
    assert layout.width == 4 + 1 + 1 + 4 + 1 + 1 + 1 + 1 + 1 + 1
    rows = layout.empty(3)
    layout.column(rows, "next_obs")[:] = np.arange(4)
    assert rows[0, layout.slices["next_obs"]].tolist() == [0, 1, 2, 3]
    assert layout.slices["log_prob"].stop == layout.width
    with pytest.raises(ValueError, match="duplicate"):
        ExperienceLayout(4, 1, extras=(("reward", 1),))
