"""Proximal Policy Optimization with the clipped surrogate (Schulman et al. 2017) and GAE.

Policy ``pi_theta`` (categorical for Discrete actions, diagonal Gaussian with a state-independent
``log_std`` for Box actions) and value function ``V_theta`` in one module, trained by one
optimizer (one :class:`ParamGroup` named ``policy``, which is also what simulators receive).

Rollouts. Rows arrive in chunks from one or more simulators; each row carries its behaviour
log-probability ``log_prob`` (recorded by :meth:`PPO.act` on the simulator, whose parameters may
lag the learner's, so the ratio uses the stored value, never a recomputed one). As soon as at
least ``rollout_steps`` rows are pending, *all* pending rows (the overflow of the chunk that
completed it included, nothing is carried over) are frozen into one rollout and
``epochs * max(1, n // batch_size)`` minibatch updates become due. Chunks that arrive while a
rollout waits or trains start the next rollout, so rollouts queue up rather than mix.

When a rollout's first update runs, the learner computes ``V(obs)`` and ``V(next_obs)`` of every
row with its current value function and the advantages by GAE(lambda), per environment stream
in time order::

    delta_t = r_t + gamma * V(s'_t) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}      (done = terminated or truncated)

with ``A_{t+1} = 0`` at the last row of a stream in the rollout (the rollout's cut bootstraps
through ``V(s'_t)``, as does a time-limit truncation). Value targets are ``A_t + V(s_t)``.

Each :meth:`PPO.update` is one minibatch step of::

    ratio = exp(log pi_theta(a|s) - log_prob_behaviour)
    L     = -mean min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)       (A normalised per batch)
            + vf_coef * mean (V_theta(s) - R)^2    (optionally clipped around the rollout's V)
            - ent_coef * mean entropy

and the rollout is dropped after the last minibatch of the last epoch. Observations and rewards
are not normalised (``reward_scale`` multiplies rewards before GAE, if needed).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, Normal

from drlmpi.algos.base import Algorithm, ConfigError, GradSync, ParamGroup, local_sync, mlp
from drlmpi.envs import EnvSpec

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def compute_gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray,
                terminated: np.ndarray, truncated: np.ndarray, streams: np.ndarray,
                gamma: float, lam: float) -> np.ndarray:
    """GAE(lambda) advantages of rows that are in time order within each stream.

    Streams may be interleaved in any way; the recursion is cut at an episode end
    (``terminated`` or ``truncated``) and at the last row of each stream. All arguments are
    1-D arrays of the same length; returns float32 advantages in the rows' order.
    """
    n = len(rewards)
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    next_values = np.asarray(next_values, dtype=np.float64)
    terminated = np.asarray(terminated, dtype=np.float64)
    done = np.maximum(terminated, np.asarray(truncated, dtype=np.float64))
    delta = rewards + gamma * next_values * (1.0 - terminated) - values
    # Sorting by stream (stably, so time order is kept) makes each stream contiguous; a zero
    # continuation factor at each stream's last row then lets one backward pass do them all.
    order = np.argsort(np.asarray(streams), kind="stable")
    s_sorted = np.asarray(streams)[order]
    last_of_stream = np.ones(n, dtype=bool)
    last_of_stream[:-1] = s_sorted[1:] != s_sorted[:-1]
    cont = (gamma * lam * (1.0 - done[order]) * ~last_of_stream).tolist()
    delta_sorted = delta[order].tolist()
    adv_sorted = [0.0] * n
    running = 0.0
    for i in range(n - 1, -1, -1):
        running = delta_sorted[i] + cont[i] * running
        adv_sorted[i] = running
    advantages = np.empty(n, dtype=np.float32)
    advantages[order] = adv_sorted
    return advantages


def clipped_surrogate_loss(ratio: torch.Tensor, advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's policy loss ``-mean min(ratio A, clip(ratio, 1 - clip, 1 + clip) A)``."""
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    return -torch.minimum(unclipped, clipped).mean()


class ActorCritic(nn.Module):
    """Separate MLP trunks for the policy and the value; ``log_std`` for Box actions."""

    def __init__(self, spec: EnvSpec, hidden: tuple[int, ...], activation: type[nn.Module],
                 log_std_init: float, ortho_init: bool) -> None:
        super().__init__()
        self.discrete = spec.discrete
        out = spec.n_actions if spec.discrete else spec.action_dim
        self.pi = mlp(spec.obs_dim, out, hidden, activation)
        self.v = mlp(spec.obs_dim, 1, hidden, activation)
        if not spec.discrete:
            self.log_std = nn.Parameter(torch.full((spec.action_dim,), float(log_std_init)))
        if ortho_init:  # as in OpenAI baselines / Stable-Baselines3
            for net, out_gain in ((self.pi, 0.01), (self.v, 1.0)):
                linears = [m for m in net if isinstance(m, nn.Linear)]
                for i, layer in enumerate(linears):
                    nn.init.orthogonal_(layer.weight, out_gain if i == len(linears) - 1 else math.sqrt(2))
                    nn.init.zeros_(layer.bias)

    def distribution(self, obs: torch.Tensor) -> Categorical | Normal:
        out = self.pi(obs)
        if self.discrete:
            return Categorical(logits=out)
        return Normal(out, self.log_std.exp().expand_as(out))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs).squeeze(-1)

    def log_prob_entropy(self, dist: Categorical | Normal,
                         actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities ``(B,)`` of ``actions`` ``(B, action_dim)`` and entropies ``(B,)``."""
        if self.discrete:
            return dist.log_prob(actions[:, 0].long()), dist.entropy()
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)


class _Rollout:
    """A frozen rollout: its rows, and (once started) tensors and the minibatch schedule."""

    def __init__(self, rows: np.ndarray, n_updates: int) -> None:
        self.rows = rows
        self.n_updates = n_updates
        self.tensors: dict[str, torch.Tensor] | None = None
        self.schedule: list[np.ndarray] = []
        self.position = 0


class PPO(Algorithm):
    """PPO-clip with GAE for Discrete and Box action spaces.

    Config keys (``conf/algo/ppo.yaml`` documents each): ``hidden``, ``activation``, ``lr``,
    ``adam_eps``, ``gamma``, ``gae_lambda``, ``rollout_steps``, ``batch_size``, ``epochs``,
    ``clip_range``, ``clip_range_vf``, ``ent_coef``, ``vf_coef``, ``max_grad_norm``,
    ``normalize_advantage``, ``log_std_init``, ``ortho_init``, ``reward_scale``.
    """

    kind = "on_policy"
    extra_columns = (("log_prob", 1),)

    def __init__(self, spec: EnvSpec, cfg: Mapping[str, Any], device: str | torch.device = "cpu",
                 seed: int = 0, learner: bool = True) -> None:
        super().__init__(spec, cfg, device, seed, learner)
        activation = str(cfg.get("activation", "tanh"))
        if activation not in ACTIVATIONS:
            raise ConfigError(f"algo.activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.net = ActorCritic(spec, tuple(int(h) for h in cfg["hidden"]), ACTIVATIONS[activation],
                               float(cfg.get("log_std_init", 0.0)),
                               bool(cfg.get("ortho_init", True))).to(self.device)
        self.policy = ParamGroup(self.net, float(cfg["lr"]), cfg.get("max_grad_norm"),
                                 adam_eps=float(cfg.get("adam_eps", 1e-5)), with_optimizer=learner)
        self.groups = {"policy": self.policy}
        self.gamma = float(cfg["gamma"])
        self.gae_lambda = float(cfg["gae_lambda"])
        self.rollout_steps = int(cfg["rollout_steps"])
        self.batch_size = int(cfg["batch_size"])
        self.epochs = int(cfg["epochs"])
        self.clip_range = float(cfg["clip_range"])
        clip_vf = cfg.get("clip_range_vf")
        self.clip_range_vf = None if clip_vf is None else float(clip_vf)
        self.ent_coef = float(cfg["ent_coef"])
        self.vf_coef = float(cfg["vf_coef"])
        self.normalize_advantage = bool(cfg.get("normalize_advantage", True))
        self.reward_scale = float(cfg.get("reward_scale", 1.0))
        for key in ("rollout_steps", "batch_size", "epochs"):
            if int(cfg[key]) < 1:
                raise ConfigError(f"algo.{key} must be >= 1, got {cfg[key]}")
        if not spec.discrete:
            self._low = np.asarray(spec.action_low, dtype=np.float32)
            self._high = np.asarray(spec.action_high, dtype=np.float32)
        # Learner-side rollout storage: rows not yet in a rollout, and frozen rollouts in order.
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0
        self._rollouts: deque[_Rollout] = deque()
        self._ungranted = 0  # updates of frozen rollouts not yet reported by updates_due

    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        # Discrete and 1-D Box action spaces are both supported (env_spec refuses anything else).
        if not spec.discrete and spec.action_dim < 1:
            raise ConfigError(f"algo=ppo needs at least one action dimension, {spec.env_id} has none")

    # -- acting -------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        dist = self.net.distribution(obs_t)
        if self.spec.discrete:
            if explore:
                probs = dist.probs
                actions = torch.multinomial(probs, 1)
            else:
                actions = dist.probs.argmax(dim=1, keepdim=True)
        else:
            if explore:
                eps = torch.randn(dist.mean.shape, device=self.device)
                actions = dist.mean + dist.stddev * eps
            else:
                actions = dist.mean
        log_prob, _ = self.net.log_prob_entropy(dist, actions)
        return (actions.float().cpu().numpy().astype(np.float32),
                log_prob.float().cpu().numpy()[:, None].astype(np.float32))

    def env_action(self, action_row: np.ndarray) -> Any:
        if self.spec.discrete:
            return int(action_row[0])
        return np.clip(action_row, self._low, self._high).astype(np.float32)

    # -- rollout storage ----------------------------------------------------------------------
    def updates_per_rollout(self, n_rows: int) -> int:
        """Minibatch updates a rollout of ``n_rows`` rows gets: ``epochs`` passes of
        ``max(1, n_rows // batch_size)`` minibatches."""
        return self.epochs * max(1, n_rows // self.batch_size)

    def observe(self, rows: np.ndarray) -> None:
        if rows.shape[0] == 0:
            return
        self._pending.append(np.array(rows, dtype=np.float32, copy=True))
        self._pending_rows += rows.shape[0]
        if self._pending_rows >= self.rollout_steps:
            frozen = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
            self._pending, self._pending_rows = [], 0
            n_updates = self.updates_per_rollout(frozen.shape[0])
            self._rollouts.append(_Rollout(frozen, n_updates))
            self._ungranted += n_updates

    def updates_due(self, new_steps: int) -> int:
        due, self._ungranted = self._ungranted, 0
        return due

    def ready_to_update(self) -> bool:
        """True while a complete rollout has minibatch updates left."""
        return bool(self._rollouts)

    @property
    def pending_rows(self) -> int:
        """Rows stored towards the next rollout (not yet frozen)."""
        return self._pending_rows

    @torch.no_grad()
    def _start(self, rollout: _Rollout) -> None:
        """Values, GAE and the minibatch schedule of a rollout about to be trained on."""
        layout = self.layout
        rows = torch.from_numpy(rollout.rows).to(self.device)

        def col(name: str) -> torch.Tensor:
            return rows[:, layout.slices[name]]

        obs, next_obs = col("obs"), col("next_obs")
        values = self.net.value(obs)
        next_values = self.net.value(next_obs)
        advantages = compute_gae(
            rollout.rows[:, layout.slices["reward"]][:, 0] * self.reward_scale,
            values.cpu().numpy(), next_values.cpu().numpy(),
            rollout.rows[:, layout.slices["terminated"]][:, 0],
            rollout.rows[:, layout.slices["truncated"]][:, 0],
            rollout.rows[:, layout.slices["stream"]][:, 0],
            self.gamma, self.gae_lambda,
        )
        adv_t = torch.as_tensor(advantages, device=self.device)
        rollout.tensors = {
            "obs": obs,
            "action": col("action"),
            "log_prob": col("log_prob")[:, 0],
            "advantage": adv_t,
            "return": adv_t + values,
            "value": values,
        }
        n = rollout.rows.shape[0]
        per_epoch = rollout.n_updates // self.epochs
        rollout.schedule = [
            part for _ in range(self.epochs) for part in np.array_split(self.rng.permutation(n), per_epoch)
        ]
        rollout.rows = None  # the tensors view their own copy now

    # -- learning -----------------------------------------------------------------------------
    def update(self, sync: GradSync = local_sync) -> dict[str, float]:
        if not self._rollouts:
            raise RuntimeError("PPO.update called with no complete rollout (see updates_due)")
        rollout = self._rollouts[0]
        if rollout.tensors is None:
            self._start(rollout)
        index = torch.as_tensor(rollout.schedule[rollout.position], device=self.device)
        batch = {k: v[index] for k, v in rollout.tensors.items()}
        rollout.position += 1
        if rollout.position == len(rollout.schedule):
            self._rollouts.popleft()
        return self.update_on(batch, sync)

    def update_on(self, batch: Mapping[str, torch.Tensor], sync: GradSync = local_sync) -> dict[str, float]:
        """One gradient step on a minibatch with ``obs``, ``action``, ``log_prob`` (behaviour),
        ``advantage``, ``return`` and ``value`` (the rollout's ``V(obs)``)."""
        dist = self.net.distribution(batch["obs"])
        log_prob, entropy = self.net.log_prob_entropy(dist, batch["action"])
        values = self.net.value(batch["obs"])
        advantages = batch["advantage"]
        if self.normalize_advantage and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_ratio = log_prob - batch["log_prob"]
        ratio = log_ratio.exp()
        policy_loss = clipped_surrogate_loss(ratio, advantages, self.clip_range)
        if self.clip_range_vf is None:
            value_loss = F.mse_loss(values, batch["return"])
        else:
            old = batch["value"]
            clipped = old + (values - old).clamp(-self.clip_range_vf, self.clip_range_vf)
            value_loss = torch.maximum((values - batch["return"]) ** 2,
                                       (clipped - batch["return"]) ** 2).mean()
        entropy_mean = entropy.mean()
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy_mean
        self.policy.backward(loss)
        sync("policy", self.policy)
        self.updates += 1
        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - log_ratio).mean()  # k3 estimator, >= 0
            clip_fraction = ((ratio - 1.0).abs() > self.clip_range).float().mean()
        return {
            "policy_loss": float(policy_loss.detach()),
            "value_loss": float(value_loss.detach()),
            "entropy": float(entropy_mean.detach()),
            "approx_kl": float(approx_kl),
            "clip_fraction": float(clip_fraction),
        }
