"""TD3's twin critics ``Q_theta1(s, a)``, ``Q_theta2(s, a)`` in two layouts (``algo.twin_critics``):
two networks (:class:`TwinCritic`), or one network of stacked layers (:class:`StackedTwinCritic`)
whose every layer is one batched matrix product for both - the same function, fewer device
operations. Both evaluate with their target networks in one pass (``paired``, for
``algo.target_forward=paired``); :func:`critic_layout` resolves ``auto`` by the learner's device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from drlmpi.algos.gradients import paired_forward
from drlmpi.algos.params import mlp, under
from drlmpi.config.errors import ConfigError


class TwinCritic(nn.Module):
    """Two independent Q-networks ``Q(s, a)`` evaluated on the same input."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.q1 = mlp(obs_dim + action_dim, 1, hidden)
        self.q2 = mlp(obs_dim + action_dim, 1, hidden)

    def forward(self, obs: torch.Tensor, action: torch.Tensor,
                q1_only: bool = False) -> tuple[torch.Tensor, torch.Tensor] | torch.Tensor:
        """``(Q1(s, a), Q2(s, a))``, or ``Q1(s, a)`` alone with ``q1_only`` (the actor's loss)."""
        x = torch.cat([obs, action], dim=1)
        if q1_only:
            return self.q1(x).squeeze(1)
        return self.q1(x).squeeze(1), self.q2(x).squeeze(1)

    def paired(self, params: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor],
               x: torch.Tensor, x_next: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(Q1(x), Q2(x), Q1'(x_next), Q2'(x_next))``: the critics with ``params`` and their
        targets with ``target`` (both map this module's parameter names to tensors; ``x`` is
        ``[s, a]``), each critic and its target in one pass
        (:func:`~drlmpi.algos.gradients.paired_forward`)."""
        q1 = paired_forward(self.q1, under(params, "q1"), under(target, "q1"), x, x_next).squeeze(2)
        q2 = paired_forward(self.q2, under(params, "q2"), under(target, "q2"), x, x_next).squeeze(2)
        return q1[0], q2[0], q1[1], q2[1]


class StackedTwinCritic(nn.Module):
    """The twin critics as ONE network of stacked layers (``algo.twin_critics=stacked``): layer
    ``i``'s weights are ``[2, in, out]`` and both critics run as one batched matrix product per
    layer (``baddbmm``), forward and backward, instead of two - half the critics' device
    operations on a GPU. Built from two :func:`mlp` critics drawn as :class:`TwinCritic` draws
    them (``q1``, then ``q2``), so with the same seed it starts with the same parameters."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        q1, q2 = (mlp(obs_dim + action_dim, 1, hidden) for _ in range(2))  # drawn in this order
        pairs = [(a, b) for a, b in zip(q1, q2, strict=True) if isinstance(a, nn.Linear)]
        self.weights = nn.ParameterList(  # [2, in, out]: x @ w as nn.Linear's x @ weight.T
            nn.Parameter(torch.stack([a.weight.detach().T, b.weight.detach().T]).contiguous())
            for a, b in pairs)
        self.biases = nn.ParameterList(  # [2, 1, out]: broadcast over the rows
            nn.Parameter(torch.stack([a.bias.detach(), b.bias.detach()]).unsqueeze(1)) for a, b in pairs)

    def forward(self, obs: torch.Tensor, action: torch.Tensor,
                q1_only: bool = False) -> tuple[torch.Tensor, torch.Tensor] | torch.Tensor:
        """As :meth:`TwinCritic.forward`; ``q1_only`` runs the first critic's slices alone."""
        x = torch.cat([obs, action], dim=1)
        last = len(self.weights) - 1
        if q1_only:
            for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
                x = torch.addmm(b[0], x, w[0])
                x = torch.relu(x) if i < last else x
            return x.squeeze(1)
        h = stacked_layers(self.weights, self.biases, x.unsqueeze(0).expand(2, -1, -1))
        return h[0].squeeze(1), h[1].squeeze(1)

    def paired(self, params: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor],
               x: torch.Tensor, x_next: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """As :meth:`TwinCritic.paired`, all four networks in ONE pass: each layer one batched
        product over the critics' and their targets' stacked weights, ``[4, in, out]``."""
        layers = range(len(self.weights))
        weights = [torch.cat((params[f"weights.{i}"], target[f"weights.{i}"])) for i in layers]
        biases = [torch.cat((params[f"biases.{i}"], target[f"biases.{i}"])) for i in layers]
        q = stacked_layers(weights, biases, torch.stack((x, x, x_next, x_next))).squeeze(2)
        return q[0], q[1], q[2], q[3]


def stacked_layers(weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor],
                   h: torch.Tensor) -> torch.Tensor:
    """``k`` MLPs at once: ``h`` is ``[k, rows, in]``, layer ``i`` one ``baddbmm`` with weights
    ``[k, in, out]`` and biases ``[k, 1, out]``, ReLU between layers."""
    last = len(weights) - 1
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        h = torch.baddbmm(b, h, w)
        h = torch.relu(h) if i < last else h
    return h


CRITICS = {"separate": TwinCritic, "stacked": StackedTwinCritic}


def critic_layout(asked: str, device: torch.device) -> str:
    """``algo.twin_critics`` resolved: ``auto`` stacks the critics on a CUDA learner, where a
    small update is bound by its count of kernels (1.37x the fused update's rate on an H200), and
    keeps them separate on the CPU, where stacking gains nothing (docs/results/h200host_td3_variants/,
    docs/results/2core_td3_stacked_critics/)."""
    if asked == "auto":
        return "stacked" if device.type == "cuda" else "separate"
    if asked not in CRITICS:
        raise ConfigError(f"algo.twin_critics must be auto, separate or stacked, got {asked!r}")
    return asked
