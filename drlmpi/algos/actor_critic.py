"""PPO's networks: an actor-critic with separate policy and value trunks for flat observations, a
shared CNN trunk with two heads for images; categorical or diagonal-Gaussian policies.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, Normal

from drlmpi.algos.encoders import encoder
from drlmpi.algos.params import mlp
from drlmpi.data.layout import ExperienceLayout
from drlmpi.envs.spec import EnvSpec

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}
#: log(sqrt(2 pi)): a Gaussian's log-density and entropy constant
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class ActorCritic(nn.Module):
    """Policy and value. Flat observations: separate MLP trunks (``pi``, ``v``). Images: one
    shared trunk - the encoder (:mod:`drlmpi.algos.encoders`) and the ``hidden`` layers - with
    a policy head and a value head (``pi``, ``v``), as in the Atari PPO setups. ``log_std``
    for Box actions."""

    def __init__(self, spec: EnvSpec, hidden: tuple[int, ...], activation: type[nn.Module],
                 log_std_init: float, ortho_init: bool, layout: ExperienceLayout | None = None,
                 encoder_kind: str = "mlp", autocast: str = "off", channels_last: bool = False) -> None:
        super().__init__()
        #: the shared trunk's passes run under torch.autocast in this dtype (``None``: float32)
        self.autocast_dtype = {"off": None, "bfloat16": torch.bfloat16}[autocast]
        self.discrete = spec.discrete
        out = spec.n_actions if spec.discrete else spec.action_dim
        self.shared = spec.image
        if self.shared:
            enc, last = encoder(spec, layout, encoder_kind, nhwc=channels_last)
            layers: list[nn.Module] = [enc]
            for width in hidden:
                layers += [nn.Linear(last, width), activation()]
                last = width
            self.trunk = nn.Sequential(*layers)
            self.pi = nn.Linear(last, out)
            self.v = nn.Linear(last, 1)
        else:
            self.pi = mlp(spec.obs_dim, out, hidden, activation)
            self.v = mlp(spec.obs_dim, 1, hidden, activation)
        if not spec.discrete:
            self.log_std = nn.Parameter(torch.full((spec.action_dim,), float(log_std_init)))
        if ortho_init:  # as in OpenAI baselines / Stable-Baselines3
            nets = [(self.pi, 0.01), (self.v, 1.0)]
            if self.shared:  # the trunk's layers: sqrt(2); each head is then a single layer
                nets.insert(0, (self.trunk, math.sqrt(2)))
            for net, out_gain in nets:
                layers = [m for m in net.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
                for i, layer in enumerate(layers):
                    nn.init.orthogonal_(layer.weight, out_gain if i == len(layers) - 1 else math.sqrt(2))
                    nn.init.zeros_(layer.bias)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The shared trunk's output, float32; under ``algo.autocast`` its convolutions and
        matrix products run in that dtype (weights stay float32; no cast cache, so a captured
        graph recasts them each replay), the heads after it in float32."""
        if self.autocast_dtype is None:
            return self.trunk(obs)
        with torch.autocast(obs.device.type, dtype=self.autocast_dtype, cache_enabled=False):
            out = self.trunk(obs)
        return out.float()

    def heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy head's output (logits, or the Gaussian's mean) and the value ``(B,)``,
        the shared trunk run once."""
        if self.shared:
            features = self.features(obs)
            return self.pi(features), self.v(features).squeeze(-1)
        return self.pi(obs), self.v(obs).squeeze(-1)

    def _dist(self, out: torch.Tensor) -> Categorical | Normal:
        # No argument validation: it reads device values on the host (a sync per call on a GPU).
        if self.discrete:
            return Categorical(logits=out, validate_args=False)
        return Normal(out, self.log_std.exp().expand_as(out), validate_args=False)

    def distribution(self, obs: torch.Tensor) -> Categorical | Normal:
        out = self.pi(self.features(obs)) if self.shared else self.pi(obs)
        return self._dist(out)

    def distribution_value(self, obs: torch.Tensor) -> tuple[Categorical | Normal, torch.Tensor]:
        """The action distribution and the value of ``obs`` in one pass."""
        out, value = self.heads(obs)
        return self._dist(out), value

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        if self.shared:
            return self.v(self.features(obs)).squeeze(-1)
        return self.v(obs).squeeze(-1)

    def log_prob(self, dist: Categorical | Normal, actions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``(B,)`` of ``actions`` ``(B, action_dim)`` (acting: no entropy)."""
        if self.discrete:
            return dist.log_prob(actions[:, 0].long())
        return dist.log_prob(actions).sum(-1)

    def forward(self, obs: torch.Tensor,
                actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What a PPO update differentiates: the log-probabilities ``(B,)`` of ``actions``
        ``(B, action_dim)``, the entropies ``(B,)`` and the values ``(B,)`` of ``obs``, the trunk
        run once. Plain tensor arithmetic (no ``torch.distributions`` object), so that the same
        function runs eagerly, under :func:`torch.func.functional_call` and compiled whole
        (``algo.capture=fused``); the values equal :meth:`log_prob_entropy`'s."""
        out, value = self.heads(obs)
        if self.discrete:
            log_probs = out.log_softmax(dim=-1)
            taken = log_probs.gather(1, actions[:, :1].long()).squeeze(1)
            return taken, -(log_probs.exp() * log_probs).sum(-1), value
        log_std = self.log_std.expand_as(out)
        z = (actions - out) * torch.exp(-log_std)
        log_prob = (-0.5 * z * z - log_std - HALF_LOG_2PI).sum(-1)
        return log_prob, (0.5 + HALF_LOG_2PI + log_std).sum(-1), value

    def log_prob_entropy(self, dist: Categorical | Normal,
                         actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities ``(B,)`` of ``actions`` ``(B, action_dim)`` and entropies ``(B,)``."""
        if self.discrete:
            return self.log_prob(dist, actions), dist.entropy()
        return self.log_prob(dist, actions), dist.entropy().sum(-1)


def clipped_surrogate_loss(ratio: torch.Tensor, advantages: torch.Tensor, clip: float | torch.Tensor,
                           weights: torch.Tensor | None = None) -> torch.Tensor:
    """PPO's policy loss ``-mean min(ratio A, clip(ratio, 1 - clip, 1 + clip) A)``, each term
    multiplied by ``weights`` if given (the decoupled objective's ``min(rho_clip, pi_prox/mu)``).
    ``clip``: a number, or a device scalar a schedule refills (a captured update reads it)."""
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    if weights is not None:
        surrogate = weights * surrogate
    return -surrogate.mean()


def clipped_value_loss(values: torch.Tensor, returns: torch.Tensor, old: torch.Tensor,
               clip: float | None) -> torch.Tensor:
    """PPO's value loss: the mean squared error to the returns, or with ``clip`` the larger of it
    and that of the old values moved at most ``clip`` towards the new ones."""
    if clip is None:
        return F.mse_loss(values, returns)
    clipped = old + (values - old).clamp(-clip, clip)
    return torch.maximum((values - returns) ** 2, (clipped - returns) ** 2).mean()
