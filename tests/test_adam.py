"""FlatAdam, the CPU learners' optimizer: torch.optim.Adam's numbers and state layout."""

from __future__ import annotations

import copy

import pytest
import torch

from drlmpi.algos.adam import FlatAdam
from drlmpi.algos.params import ParamGroup, mlp


def _tensor(seed: int, n: int = 300) -> torch.Tensor:
    t = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    t.grad = torch.zeros(n)
    return t


def _step_both(pairs, steps: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        grad = torch.randn(pairs[0][1].numel(), generator=gen) * 3
        for optimizer, param in pairs:
            param.grad.copy_(grad)
            optimizer.step()


def test_the_same_steps_as_torch_adam_bit_for_bit():
    """Thirty steps, a learning-rate change between them (a schedule writes param_groups), then
    more: the parameters equal torch.optim.Adam's exactly, and so does the state."""
    ours, theirs = _tensor(0), _tensor(0)
    mine = FlatAdam(ours, lr=3e-4, eps=1e-5)
    reference = torch.optim.Adam([theirs], lr=3e-4, eps=1e-5)
    assert mine.state == {}  # created by the first step, as torch's
    _step_both([(mine, ours), (reference, theirs)], 10, seed=1)
    for optimizer in (mine, reference):
        optimizer.param_groups[0]["lr"] = 1e-2
    _step_both([(mine, ours), (reference, theirs)], 20, seed=2)
    assert torch.equal(ours, theirs)
    a, b = mine.state[ours], reference.state[theirs]
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_a_state_saved_by_either_loads_on_the_other():
    """The state_dict layout is torch's (a checkpoint of a CPU learner resumes on a GPU one and
    back): same group options, same keys; loading either way continues the same trajectory."""
    ours, theirs = _tensor(3), _tensor(3)
    mine = FlatAdam(ours, lr=1e-3)
    reference = torch.optim.Adam([theirs], lr=1e-3)
    _step_both([(mine, ours), (reference, theirs)], 7, seed=4)
    saved_mine, saved_theirs = copy.deepcopy(mine.state_dict()), copy.deepcopy(reference.state_dict())
    assert saved_mine["param_groups"] == saved_theirs["param_groups"]
    assert saved_mine["state"].keys() == saved_theirs["state"].keys() == {0}
    assert saved_mine["state"][0].keys() == saved_theirs["state"][0].keys()

    crossed_ours, crossed_theirs = ours.detach().clone(), theirs.detach().clone()
    crossed_ours.grad, crossed_theirs.grad = torch.zeros_like(ours), torch.zeros_like(theirs)
    loaded_mine = FlatAdam(crossed_ours, lr=5.0)  # the saved rate replaces this one
    loaded_mine.load_state_dict(saved_theirs)
    loaded_theirs = torch.optim.Adam([crossed_theirs], lr=5.0)
    loaded_theirs.load_state_dict(saved_mine)
    _step_both([(mine, ours), (reference, theirs), (loaded_mine, crossed_ours),
                (loaded_theirs, crossed_theirs)], 5, seed=5)
    assert torch.equal(ours, crossed_ours) and torch.equal(ours, crossed_theirs) and torch.equal(ours, theirs)


def test_a_device_state_loads_as_cpu_values():
    """What a GPU learner saves (capturable: its step and, scheduled, its rate are tensors)
    loads on the CPU as plain values; a state of several tensors is refused."""
    param = _tensor(6, n=4)
    saved = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(4), "exp_avg_sq": torch.ones(4)}},
             "param_groups": [{"lr": torch.tensor(0.5), "betas": (0.8, 0.9), "eps": 1e-6, "capturable": True,
                               "fused": True, "params": [0]}]}
    adam = FlatAdam(param, lr=1.0)
    adam.load_state_dict(saved)
    group = adam.param_groups[0]
    assert group["lr"] == 0.5 and group["betas"] == (0.8, 0.9) and not group["capturable"]
    assert adam.state[param]["step"].item() == 3.0 and adam.state[param]["step"].shape == ()
    saved["param_groups"][0]["params"] = [0, 1]
    with pytest.raises(ValueError, match="one tensor"):
        adam.load_state_dict(saved)


def test_a_cpu_group_steps_with_flat_adam():
    group = ParamGroup(mlp(3, 2, (8,)), lr=1e-3)
    assert isinstance(group.optimizer, FlatAdam)
    before = group.flat.params.clone()
    group.flat.grads.fill_(1.0)
    group.apply_gradients()
    assert torch.allclose(group.flat.params, before - 1e-3, atol=1e-6)  # Adam's first step: lr * sign
