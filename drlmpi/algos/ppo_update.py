"""PPO's minibatch update: the loss (:meth:`PPOUpdate.loss`, the module docstring of
:mod:`drlmpi.algos.ppo` gives it), its gradient taken eagerly or, with ``algo.capture=fused``,
compiled by inductor over the network's flat parameter buffer
(:class:`~drlmpi.algos.gradients.LossGradient`) together with the clipped Adam step, and the
compile before the training clock (:meth:`PPOUpdate.warm_up`) on the buffer every full minibatch
is gathered into.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from drlmpi.algos.actor_critic import ActorCritic, clipped_surrogate_loss, clipped_value_loss
from drlmpi.algos.exchange import GradientExchange
from drlmpi.algos.gradients import LossGradient, forward
from drlmpi.algos.params import ParamGroup
from drlmpi.algos.rollouts import table_views

#: the largest log(pi_theta / pi_prox) a row enters the loss with (exp(20) ~ 4.9e8)
LOG_RATIO_MAX = 20.0


class PPOUpdate:
    """The update half of :class:`~drlmpi.algos.ppo.PPO` (a mixin: it reads the attributes below,
    which PPO sets, and :attr:`_gradient` and :attr:`_staged`)."""

    net: ActorCritic
    policy: ParamGroup
    capture: str
    batch_size: int
    clip: torch.Tensor
    _gradient: LossGradient
    _staged: torch.Tensor | None
    _norms: dict[str, torch.Tensor]

    def learn(self, batch: Mapping[str, torch.Tensor], exchange: GradientExchange,
              synced: tuple[str, ...] = ("policy",)) -> torch.Tensor:
        """One gradient step on a minibatch with ``obs``, ``action``, ``log_prob`` (the
        behaviour's, or with V-trace the proximal policy's), ``advantage``, ``return``, ``value``
        (the rollout's ``V(obs)``) and, with V-trace, ``weight`` (``min(rho_clip, pi_prox/mu)``):
        the gradient of :meth:`loss` (compiled with ``algo.capture=fused``), then ``exchange``."""
        _, *metrics = self._gradient(*self._loss_inputs(batch))
        exchange("policy", self.policy)
        return torch.stack((*metrics, *self._norms.values()))

    def _loss_inputs(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        return (batch["obs"], batch["action"], batch["log_prob"], batch["advantage"], batch["return"],
                batch["value"], batch.get("weight"), self.clip)

    def loss(self, params: Mapping[str, torch.Tensor] | None, obs: torch.Tensor, action: torch.Tensor,
             log_prob: torch.Tensor, advantage: torch.Tensor, returns: torch.Tensor, value: torch.Tensor,
             weight: torch.Tensor | None,
             clip: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The minibatch loss (the module docstring's ``L``) with the network's own parameters
        (``params`` ``None``) or ``params`` in their place (the fused gradient: views into a flat
        tensor), and the detached metrics ``policy_loss, value_loss, entropy, approx_kl,
        clip_fraction`` (and with V-trace the mean weight). ``clip``: the ratio's clip now
        (:attr:`clip`, a device scalar a schedule refills)."""
        new_log_prob, entropy, values = forward(self.net, params, obs, action)
        advantages = advantage
        if self.normalize_advantage and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        # Bounded before exp: a row whose action pi_prox held nearly impossible (a stale
        # behaviour's, weighted ~0 by V-trace) may drift past exp's float32 range, and inf * 0
        # is NaN; at e^20 the row is far outside the clip either way.
        log_ratio = (new_log_prob - log_prob).clamp(max=LOG_RATIO_MAX)
        ratio = log_ratio.exp()
        policy_loss = clipped_surrogate_loss(ratio, advantages, clip, weight)
        value_loss = clipped_value_loss(values, returns, value, self.clip_range_vf)
        entropy_mean = entropy.mean()
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy_mean
        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - log_ratio).mean()  # k3 estimator, >= 0
            clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
            extra = ()
            if self.vtrace:  # mean truncated importance weight (1: on-policy)
                extra = (ratio.new_ones(()) if weight is None else weight.mean(),)
        return loss, (policy_loss.detach(), value_loss.detach(), entropy_mean.detach(), approx_kl,
                      clip_fraction, *extra)

    # -- algo.capture=fused -------------------------------------------------------------------
    def prepare_capture(self) -> None:
        """With ``algo.capture=fused``, :meth:`fuse` the update once (before its first capture)."""
        self.fuse_once()

    def fuse(self, compiler: Callable[..., Any] = torch.compile) -> None:
        """Compile the update's pieces (``algo.capture=fused``; tests pass an identity
        ``compiler``): the loss's gradient (:meth:`loss`: the trunk's forward and backward, the
        loss and its metrics as one generated program) and the clipping with the Adam step."""
        self._gradient.fuse(compiler)
        self.policy.fuse(compiler)

    def warm_up(self, compiler: Callable[..., Any] = torch.compile) -> None:
        """With ``algo.capture=fused``, :meth:`fuse` and compile every piece now (a learner calls
        this before its training clock starts): on the buffer every full minibatch is gathered
        into (:meth:`stage_block`), zero-filled, with the views an update takes, so the compiled
        program's guards hold for the real minibatches. No parameter, optimizer state or
        generator changes."""
        if self.policy.optimizer is None or not self.fuse_once(compiler):
            return
        widths = self.table_widths()
        self._staged = torch.zeros((self.batch_size, sum(widths.values())), device=self.device)
        self._gradient(*self._loss_inputs(self._views(self._staged, table_views(widths))))
        self.policy.warm_up()
        self.synchronize()

    def table_widths(self) -> dict[str, int]:
        """The minibatch table's columns in order, each its width (:meth:`_start` builds it)."""
        widths = {"obs": self.layout.obs_slots, "action": self.spec.action_dim, "log_prob": 1,
                  "advantage": 1, "return": 1, "value": 1}
        return {**widths, "weight": 1} if self.vtrace else widths

    @staticmethod
    def _views(staged: torch.Tensor, views: Mapping[str, slice]) -> dict[str, torch.Tensor]:
        """A minibatch's tensors: views of the buffer ``staged`` (``obs``, ``action`` 2-D)."""
        return {name: staged[:, cols] if name in ("obs", "action") else staged[:, cols.start]
                for name, cols in views.items()}
