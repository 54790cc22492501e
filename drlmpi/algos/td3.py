"""Twin Delayed DDPG, TD3 (Fujimoto et al. 2018), for continuous (Box) action spaces.

Actor ``mu_phi`` (tanh output scaled to the Box bounds), twin critics ``Q_theta1``, ``Q_theta2``
and their target copies ``mu_phi'``, ``Q_theta1'``, ``Q_theta2'``. For a minibatch
``(s, a, r, s', terminated)``::

    eps  = clip(N(0, policy_noise * h), -noise_clip * h, noise_clip * h)   (h = half action range)
    a'   = clip(mu_phi'(s') + eps, low, high)                            (target policy smoothing)
    y    = r + gamma * (1 - terminated) * min(Q_theta1'(s', a'), Q_theta2'(s', a'))
    L_Q  = MSE(Q_theta1(s, a), y) + MSE(Q_theta2(s, a), y)                  (every update)
    L_mu = -mean Q_theta1(s, mu_phi(s))                                   (every policy_delay)

The actor and the three target networks (Polyak ``tau``) are updated only on every
``policy_delay``-th update, so the sequence of gradient reductions (``critic`` every update, then
``actor`` on delayed updates: :meth:`TD3.sync_schedule`) is a function of the update counter
alone and is the same on every rank. Noise comes from torch's global generator and exploration
from ``self.rng``, both of which a topology may reseed per rank.

Exploration: uniform random actions while the job-wide step count is below ``learning_starts``,
then the greedy action plus Gaussian noise of standard deviation ``exploration_noise * h``,
clipped to the bounds. The clipped (executed) action is what is stored, as in the paper's code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from drlmpi.algos.critics import CRITICS, critic_layout
from drlmpi.algos.exchange import GradientExchange
from drlmpi.algos.gradients import LossGradient, forward
from drlmpi.algos.host_forward import HostMLP
from drlmpi.algos.off_policy import OffPolicyAlgorithm
from drlmpi.algos.params import ParamGroup, flat_target, mlp, under
from drlmpi.config.errors import ConfigError
from drlmpi.config.scopes import TD3Settings
from drlmpi.envs.spec import EnvSpec


class ScaledTanhActor(nn.Module):
    """``obs -> center + half_range * tanh(mlp(obs))``: deterministic actions inside the Box."""

    def __init__(self, obs_dim: int, low: np.ndarray, high: np.ndarray, hidden: tuple[int, ...]):
        super().__init__()
        self.net = mlp(obs_dim, len(low), hidden, out_activation=nn.Tanh)
        low_t = torch.as_tensor(low, dtype=torch.float32)
        high_t = torch.as_tensor(high, dtype=torch.float32)
        # Buffers, not parameters: constants that never travel with the flat parameters.
        self.register_buffer("center", (high_t + low_t) / 2.0)
        self.register_buffer("half_range", (high_t - low_t) / 2.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.center + self.half_range * self.net(obs)


class TD3(OffPolicyAlgorithm):
    """TD3 for Box action spaces.

    Config keys (``drlmpi/config/schema.py``'s ``algo/td3`` documents each): ``hidden``,
    ``actor_lr``, ``critic_lr``, ``gamma``, ``tau``, ``batch_size``, ``buffer_size``, ``learning_starts``,
    ``updates_per_step``, ``policy_delay``, ``policy_noise``, ``noise_clip``,
    ``exploration_noise``, ``max_grad_norm``, ``capture``, ``twin_critics``, ``target_forward``.
    """

    metric_names = ("critic_loss", "actor_loss", "q_mean")
    settings_class = TD3Settings
    acting_modules = ("actor",)
    loss_metrics = ("critic_loss",)  # the actor loss is NaN until the first actor step
    report_variants = ("twin_critics",)  # the same learning, another update rate


    def __init__(self, spec: EnvSpec, cfg: TD3Settings | Mapping[str, Any],
                 device: str | torch.device = "cpu", seed: int = 0, learner: bool = True) -> None:
        super().__init__(spec, cfg, device, seed, learner)
        cfg = self.cfg
        hidden = cfg.hidden
        self.low = np.asarray(spec.action_low, dtype=np.float32)
        self.high = np.asarray(spec.action_high, dtype=np.float32)
        self.half_range = (self.high - self.low) / 2.0
        actor = ScaledTanhActor(spec.obs_dim, self.low, self.high, hidden).to(self.device)
        # Targets are copied before ParamGroup re-seats the online parameters; their parameters
        # are views into one flat buffer each, so a Polyak step is one op per network.
        self.actor_target, self._actor_target_flat = flat_target(actor)
        self.actor = actor
        max_grad_norm = cfg.max_grad_norm
        self.policy = ParamGroup(actor, cfg.actor_lr, max_grad_norm, with_optimizer=learner)
        self.groups = {"actor": self.policy}
        self._host_actor = HostMLP.of(actor.net)  # on views of the flat parameters: see act_host
        self._center = ((self.high + self.low) / 2.0).astype(np.float32)
        if learner:
            #: the critics' layout, ``separate`` or ``stacked`` (``algo.twin_critics`` resolved)
            self.twin_critics = critic_layout(cfg.twin_critics, self.device)
            critic = CRITICS[self.twin_critics](spec.obs_dim, spec.action_dim, hidden).to(self.device)
            self.critic_target, self._critic_target_flat = flat_target(critic)
            self._critic_target_params = dict(self.critic_target.named_parameters())
            self.critic = critic
            self.groups["critic"] = ParamGroup(critic, cfg.critic_lr, max_grad_norm)
        else:  # acting only: the critic is never used
            self.critic = self.critic_target = None
            self.twin_critics = None
        self.gamma = cfg.gamma
        self.tau = cfg.tau
        self.policy_delay = cfg.policy_delay
        self.policy_noise = cfg.policy_noise
        self.noise_clip = cfg.noise_clip
        self.exploration_noise = cfg.exploration_noise
        #: the fused critic loss runs each critic with its target in one pass (``algo.target_forward``)
        self.paired = cfg.target_forward == "paired"
        if self.policy_delay < 1:
            raise ConfigError(f"algo.policy_delay must be >= 1, got {self.policy_delay}")
        self._half_range_t = torch.as_tensor(self.half_range, device=self.device)
        self._low_t = torch.as_tensor(self.low, device=self.device)
        self._high_t = torch.as_tensor(self.high, device=self.device)
        # The latest actor loss, kept on the device (critic-only updates report it again).
        self._last_actor_loss = torch.full((), float("nan"), device=self.device)
        # Gradient norms of clipping groups (a critic-only update reports the actor's last).
        self._norms = self.grad_norms()
        self.metric_names = (*self.metric_names, *self._norms)
        self._critic_gradient = LossGradient(self.groups.get("critic"), self.critic_loss, "td3 critic")
        self._actor_gradient = LossGradient(self.policy, self.actor_loss, "td3 actor")
        self.gradients = (self._critic_gradient, self._actor_gradient)

    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        if spec.discrete:
            raise ConfigError(
                f"algo=td3 needs a continuous (Box) action space, but {spec.env_id} is discrete: "
                f"use algo=dqn or algo=ppo, or a continuous env such as env=pendulum"
            )
        if not all(np.isfinite(spec.action_low)) or not all(np.isfinite(spec.action_high)):
            raise ConfigError(
                f"algo=td3 needs finite action bounds (its tanh actor is scaled to them), but "
                f"{spec.env_id} has low={spec.action_low} high={spec.action_high}: use algo=ppo"
            )

    # -- acting -------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, None]:
        if explore and env_steps < self.learning_starts:  # uniform actions: no forward pass
            return self.finish_act(np.zeros((len(obs), self.spec.action_dim), np.float32), env_steps, True)
        return super().act(obs, env_steps, explore)

    @torch.no_grad()
    def act_tensor(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """The deterministic policy's actions (noise is added on the host: :meth:`finish_act`)."""
        return self.actor(obs)

    def act_host(self, obs: np.ndarray) -> np.ndarray | None:
        if self._host_actor is None:
            return None
        return self._center + self.half_range * self._host_actor(obs)

    def finish_act(self, out: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, None]:
        if explore and env_steps < self.learning_starts:
            actions = self.rng.uniform(self.low, self.high, size=(out.shape[0], self.spec.action_dim))
            return actions.astype(np.float32), None
        actions = out
        if explore and self.exploration_noise > 0:
            noise = self.rng.normal(0.0, 1.0, size=actions.shape) * (self.exploration_noise * self.half_range)
            actions = np.clip(actions + noise, self.low, self.high)
        return actions.astype(np.float32), None

    def env_action(self, action_row: np.ndarray) -> np.ndarray:
        return np.clip(action_row, self.low, self.high).astype(np.float32)

    # -- learning -----------------------------------------------------------------------------
    def sync_schedule(self, update_index: int) -> tuple[str, ...]:
        """``("critic",)``, plus ``"actor"`` on every ``policy_delay``-th update (1-based)."""
        if (update_index + 1) % self.policy_delay == 0:
            return ("critic", "actor")
        return ("critic",)

    def smoothing_noise(self, eps: torch.Tensor) -> torch.Tensor:
        """Target policy smoothing noise from standard normal draws ``eps``:
        ``policy_noise * h * eps`` clipped to ``+-noise_clip * h``."""
        return (eps * self.policy_noise).clamp(-self.noise_clip, self.noise_clip) * self._half_range_t

    @torch.no_grad()
    def target_action(self, next_obs: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """``clip(mu'(s') + noise)``: the target policy's smoothed action."""
        next_action = self.actor_target(next_obs) + self.smoothing_noise(eps)
        return torch.maximum(torch.minimum(next_action, self._high_t), self._low_t)

    def td_target(self, reward: torch.Tensor, terminated: torch.Tensor, q1_next: torch.Tensor,
                  q2_next: torch.Tensor) -> torch.Tensor:
        """``r + gamma (1 - terminated) min(Q1', Q2')`` from the target critics' values."""
        return reward + self.gamma * (1.0 - terminated) * torch.minimum(q1_next, q2_next)

    @torch.no_grad()
    def target_q(self, reward: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
                 eps: torch.Tensor) -> torch.Tensor:
        """The TD3 target ``r + gamma (1 - terminated) min_i Q_i'(s', clip(mu'(s') + noise))``."""
        next_action = self.target_action(next_obs, eps)
        return self.td_target(reward, terminated, *self.critic_target(next_obs, next_action))

    def critic_loss(self, params: Mapping[str, torch.Tensor] | None, obs: torch.Tensor, action: torch.Tensor,
                    reward: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
                    eps: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor]]:
        """Both critics' squared error against :meth:`target_q`, with the critic's own parameters
        or ``params`` (:func:`~drlmpi.algos.gradients.forward`); returns it and ``(mean Q1(s, a),)``.
        With ``params`` (the fused gradient) and ``algo.target_forward=paired``, each critic and
        its target run in one pass (the critic's ``paired``): the same values, fewer device
        operations."""
        if self.paired and params is not None:
            next_action = self.target_action(next_obs, eps)
            q1, q2, q1_next, q2_next = self.critic.paired(
                params, self._critic_target_params, torch.cat((obs, action), dim=1),
                torch.cat((next_obs, next_action), dim=1))
            target = self.td_target(reward, terminated, q1_next.detach(), q2_next.detach())
        else:
            target = self.target_q(reward, next_obs, terminated, eps)
            q1, q2 = forward(self.critic, params, obs, action)
        return F.mse_loss(q1, target) + F.mse_loss(q2, target), (q1.detach().mean(),)

    def actor_loss(self, params: Mapping[str, torch.Tensor] | None, obs: torch.Tensor,
                   critic: Mapping[str, torch.Tensor] | None) -> tuple[torch.Tensor, tuple[()]]:
        """``-mean Q1(s, mu(s))`` with the actor's own parameters or ``params``, and the critic's
        own or (detached) ``critic``: only the actor receives gradients."""
        action = forward(self.actor, params, obs)
        return -forward(self.critic, critic, obs, action, q1_only=True).mean(), ()

    def learn(self, batch: Mapping[str, torch.Tensor], exchange: GradientExchange,
              synced: tuple[str, ...]) -> torch.Tensor:
        """A critic step on ``batch``, plus an actor step when ``synced`` names the actor
        (every ``policy_delay``-th update); returns ``[critic_loss, actor_loss, mean Q1]``
        (and the gradient norms, when clipping). The gradients are those of :meth:`critic_loss`
        and :meth:`actor_loss` (compiled with ``algo.capture=fused``)."""
        critic_group = self.groups["critic"]
        eps = torch.randn(batch["action"].shape, device=self.device)
        critic_loss, q_mean = self._critic_gradient(batch["obs"], batch["action"], batch["reward"],
                                                    batch["next_obs"], batch["terminated"], eps)
        exchange("critic", critic_group)
        if "actor" in synced:
            critic = self._frozen_critic() if self._actor_gradient.fused else None
            (actor_loss,) = self._actor_gradient(batch["obs"], critic)
            exchange("actor", self.policy)
            self._last_actor_loss.copy_(actor_loss)
        return torch.stack((critic_loss, self._last_actor_loss, q_mean, *self._norms.values()))

    def warm_up_losses(self, batch: Mapping[str, torch.Tensor]) -> None:
        eps = torch.zeros(batch["action"].shape, device=self.device)
        self._critic_gradient(batch["obs"], batch["action"], batch["reward"], batch["next_obs"],
                              batch["terminated"], eps)
        self._actor_gradient(batch["obs"], self._frozen_critic())

    def _frozen_critic(self) -> dict[str, torch.Tensor]:
        """The critic's parameters as detached views (the fused actor loss: no critic gradient)."""
        flat = self.groups["critic"].flat
        return flat.views(flat.params.detach())

    @torch.no_grad()
    def after_update_device(self, synced: tuple[str, ...]) -> None:
        """Polyak step of the three target networks on the updates that stepped the actor."""
        if "actor" not in synced:
            return
        self._actor_target_flat.lerp_(self.policy.flat.params, self.tau)
        self._critic_target_flat.lerp_(self.groups["critic"].flat.params, self.tau)

    # -- persistence --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        out = super().state_dict()
        targets = {"actor_target": self.actor_target, "critic_target": self.critic_target}
        for prefix, net in targets.items():
            if net is None:
                continue
            for key, value in net.state_dict().items():
                out[f"{prefix}.{key}"] = value.detach().cpu().clone()
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        # An acting-only instance has no critic: load just the groups it has.
        if self.critic is not None:
            saved = "stacked" if "weights.0" in under(state, "critic") else "separate"
            if saved != self.twin_critics:
                raise ConfigError(
                    f"the checkpoint's twin critics are {saved} and this learner's {self.twin_critics}: "
                    f"algo.twin_critics=auto follows the learner's device, here {self.device.type}; "
                    f"resume on a {'CUDA' if saved == 'stacked' else 'CPU'} learner, as the checkpoint's "
                    f"run had, or start anew with algo.twin_critics={saved}")
        super().load_state_dict(state)
        targets = {"actor_target": self.actor_target, "critic_target": self.critic_target}
        for prefix, net in targets.items():
            sub = under(state, prefix)
            if net is not None and sub:
                net.load_state_dict(sub)
