"""Proximal Policy Optimization with the clipped surrogate (Schulman et al. 2017), GAE, and V-trace
with the decoupled objective for rows acted by older policies.

Policy ``pi_theta`` (categorical for Discrete actions, diagonal Gaussian with a state-independent
``log_std`` for Box actions) and value function ``V_theta`` in one module, trained by one
optimizer (one :class:`ParamGroup` named ``policy``, which is also what simulators receive).

Rollouts. Rows arrive in chunks from one or more simulators; each row carries its behaviour
log-probability ``log_prob`` (``log mu``, recorded by :meth:`PPO.act` on the simulator, whose
parameters may lag the learner's). As soon as at least ``rollout_steps`` rows are pending, *all*
pending rows (the overflow of the chunk that completed it included, nothing is carried over)
are frozen into one rollout and ``epochs * max(1, n // batch_size)`` minibatch updates become
due. Chunks that arrive while a rollout waits or trains start the next rollout, so rollouts
queue up rather than mix.

Rollout rows live on the learner's device (each arriving chunk is copied there once). When a
rollout's first update runs, its values, advantages and value targets are computed there: GAE
(``algo.vtrace=false``) or V-trace around the *proximal* policy ``pi_prox``, the learner's policy
as the rollout starts (``algo.vtrace=true``, the default); :mod:`drlmpi.algos.rollout_targets`
gives the recursions.

Minibatches. Each epoch draws a permutation of the rollout's ``n`` rows on the device and cuts
``max(1, n // batch_size)`` minibatches of exactly ``batch_size`` rows from it (the ``n mod
batch_size`` rows left over are a different random few each epoch; a rollout smaller than a
batch is one minibatch of all its rows). Before each update, the host gathers the next
minibatch from the rollout's table into one fixed buffer (:meth:`PPO.stage_block`: one device
kernel, no synchronisation); the update reads that buffer. So every update of a run has the
same shapes and, with ``algo.capture`` (``auto``: on CUDA), is replayed from one captured
graph: loss, backward, clipping and the fused Adam step, with the learning rate a device
tensor that ``lr_schedule=linear`` refills. A rollout smaller than ``batch_size`` updates
eagerly.

Each :meth:`PPO.update` is one minibatch step of::

    ratio = exp(log pi_theta(a|s) - log_prob)      (vtrace=false: mu, the stored behaviour
                                                     log-prob; true: pi_prox, from the start)
    L     = -mean w * min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)  (A normalised per batch)
            + vf_coef * mean (V_theta(s) - R)^2    (optionally clipped around the rollout's V)
            - ent_coef * mean entropy

with ``w = 1`` (``vtrace=false``) or ``w = rho = min(rho_clip, pi_prox/mu)``: the decoupled
objective of Hilton et al. 2021 (batch size-invariance), whose trust region is around
``pi_prox`` while ``w`` corrects for sampling from ``mu``. With stale rows the plain ratio
``pi_theta/mu`` starts far from 1, so the clip leaves most rows without gradient; around
``pi_prox`` every rollout starts at ratio 1, as on-policy PPO does. The rollout is dropped after
the last minibatch of the last epoch. Observations and rewards are not normalised
(``reward_scale`` multiplies rewards before GAE, if needed).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from drlmpi.algos.actor_critic import ACTIVATIONS, ActorCritic
from drlmpi.algos.base import Algorithm
from drlmpi.algos.encoders import CONV_STACKS, resolve_encoder
from drlmpi.algos.gradients import LossGradient
from drlmpi.algos.params import ParamGroup
from drlmpi.algos.ppo_update import PPOUpdate
from drlmpi.algos.rollout_targets import RolloutTargets
from drlmpi.algos.rollouts import RolloutStore
from drlmpi.config.errors import ConfigError
from drlmpi.config.scopes import PPOSettings
from drlmpi.envs.spec import EnvSpec


class PPO(RolloutTargets, PPOUpdate, Algorithm):
    """PPO-clip with GAE for Discrete and Box action spaces (a rollout's advantages and targets:
    :class:`~drlmpi.algos.rollout_targets.RolloutTargets`).

    Config keys (``drlmpi/config/schema.py``'s ``algo/ppo`` documents each): ``hidden``, ``activation``,
    ``lr``, ``lr_schedule``, ``adam_eps``, ``gamma``, ``gae_lambda``, ``rollout_steps``,
    ``batch_size``, ``epochs``,
    ``clip_range``, ``clip_schedule``, ``clip_range_vf``, ``ent_coef``, ``vf_coef``, ``max_grad_norm``,
    ``normalize_advantage``, ``log_std_init``, ``ortho_init``, ``reward_scale``,
    ``vtrace``, ``vtrace_rho_clip``, ``vtrace_c_clip``, ``encoder`` (image observations:
    :mod:`drlmpi.algos.encoders`).
    """

    kind = "on_policy"
    settings_class = PPOSettings
    acting_modules = ("net",)
    capturable = fusable = True
    extra_columns = (("log_prob", 1),)
    storage_option = "rollout_steps"
    metric_names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
    report_variants = ("vtrace", "encoder", "autocast", "channels_last", "clip_schedule", "num_minibatches")
    report_plain = {"encoder": ("cnn",)}  # encoder=impala (or mlp) is a regime of its own
    loss_metrics = ("policy_loss", "value_loss")
    takes_images = True

    @classmethod
    def storage_bytes(cls, spec: EnvSpec, cfg: PPOSettings | Mapping[str, Any]) -> int:
        """A rollout's rows twice (pending chunks and the frozen copy) plus its minibatch table
        (V-trace adds the weight column)."""
        cfg = cls.settings_of(cfg)
        layout = cls.experience_layout(spec)
        table = layout.obs_slots + spec.action_dim + 4 + (1 if cfg.vtrace else 0)
        return cfg.rollout_steps * (2 * layout.width + table) * 4

    @classmethod
    def job_options(cls, cfg: PPOSettings | Mapping[str, Any], job_envs: int) -> dict[str, Any]:
        """``rollout_steps_per_env`` x ``job_envs`` as ``rollout_steps`` and the rollout's rows /
        ``num_minibatches`` as ``batch_size``, where set: a rollout keeps its horizon per
        environment, and an epoch its number of minibatches, as ranks are added."""
        cfg = cls.settings_of(cfg)
        out: dict[str, Any] = {}
        rows = cfg.rollout_steps
        per_env = cfg.rollout_steps_per_env
        if per_env is not None:
            rows = out["rollout_steps"] = per_env * job_envs
        minibatches = cfg.num_minibatches
        if minibatches is not None:
            if minibatches > rows:
                raise ConfigError(f"algo.num_minibatches={minibatches} is more than the rollout's "
                                  f"{rows} rows (algo.rollout_steps)")
            out["batch_size"] = rows // minibatches
        return out

    def __init__(self, spec: EnvSpec, cfg: PPOSettings | Mapping[str, Any],
                 device: str | torch.device = "cpu", seed: int = 0, learner: bool = True) -> None:
        super().__init__(spec, cfg, device, seed, learner)
        cfg = self.cfg
        activation = cfg.activation  # the schema's choices: ACTIVATIONS
        #: ``mlp``, ``cnn`` or ``impala`` (``algo.encoder`` resolved for this environment's observations)
        self.encoder = resolve_encoder(spec, cfg.encoder, cfg.name)
        self.lr_schedule = cfg.lr_schedule  # constant or linear
        if cfg.autocast != "off" and not spec.image:
            raise ConfigError(f"algo.autocast={cfg.autocast} runs an image trunk in lower precision, but "
                              f"{spec.env_id} has a {spec.describe_obs()}: leave algo.autocast=off")
        if cfg.channels_last and self.encoder not in CONV_STACKS:
            raise ConfigError(f"algo.channels_last=true lays out a convolution stack's images, but "
                              f"algo.encoder resolves to {self.encoder} for {spec.env_id}'s "
                              f"{spec.describe_obs()}: leave algo.channels_last=false")
        self.net = ActorCritic(spec, cfg.hidden, ACTIVATIONS[activation],
                               cfg.log_std_init, cfg.ortho_init,
                               self.layout, self.encoder, cfg.autocast, cfg.channels_last).to(self.device)
        self.policy = ParamGroup(self.net, cfg.lr, cfg.max_grad_norm,
                                 adam_eps=cfg.adam_eps, with_optimizer=learner,
                                 scheduled_lr=self.lr_schedule != "constant")
        self.groups = {"policy": self.policy}
        self.lr = cfg.lr
        self.gamma = cfg.gamma
        self.gae_lambda = cfg.gae_lambda
        self.rollout_steps = cfg.rollout_steps
        self.batch_size = cfg.batch_size
        self.epochs = cfg.epochs
        self.clip_range = cfg.clip_range
        self.clip_schedule = cfg.clip_schedule  # constant or linear
        #: the ratio's clip now: a device scalar that clip_schedule=linear refills (captured
        #: updates read it)
        self.clip = torch.tensor(cfg.clip_range, device=self.device)
        self.clip_range_vf = cfg.clip_range_vf
        self.ent_coef = cfg.ent_coef
        self.vf_coef = cfg.vf_coef
        self.normalize_advantage = cfg.normalize_advantage
        self.reward_scale = cfg.reward_scale
        self.vtrace = cfg.vtrace
        self.rho_clip = cfg.vtrace_rho_clip
        self.c_clip = cfg.vtrace_c_clip
        if self.vtrace:
            self.metric_names = (*self.metric_names, "is_weight")
        for key in ("rollout_steps", "batch_size", "epochs"):
            if getattr(cfg, key) < 1:
                raise ConfigError(f"algo.{key} must be >= 1, got {getattr(cfg, key)}")
        if not spec.discrete:
            self._low = np.asarray(spec.action_low, dtype=np.float32)
            self._high = np.asarray(spec.action_high, dtype=np.float32)
        self.store = RolloutStore(self.layout.width, self.device, self.rollout_steps,
                                  self.updates_per_rollout)
        self._generator = torch.Generator(device=self.device)  # minibatch permutations
        self._generator_seeded = False
        #: the minibatch the next update reads (:meth:`stage_block` gathers into it): a buffer
        #: of ``batch_size`` table rows (captured updates read it), or a smaller one for a
        #: rollout smaller than a batch
        self._staged: torch.Tensor | None = None
        self._batch: dict[str, torch.Tensor] = {}
        self._norms = self.grad_norms()
        self.metric_names = (*self.metric_names, *self._norms)
        #: the gradient of :meth:`loss` (functional and compiled with ``algo.capture=fused``)
        self._gradient = LossGradient(self.policy, self.loss, "ppo policy")
        if self.capture == "fused" and cfg.capture == "auto":
            self.capture = "graph"  # auto: a central run has not measured the fused update ahead (ask for it)
        elif self.capture == "fused":
            warnings.warn("drlmpi: algo.capture=fused for PPO is experimental: central Breakout runs "
                          "on an H200 hung after 40-80 s while capturing an acting pass mid-run, and "
                          "ran 2 x 100 s once every serve size was captured ahead "
                          "(docs/results/h200host_ppo_breakout_fused*/); algo.capture=graph is the "
                          "measured setting", stacklevel=2)

    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        # Discrete and 1-D Box action spaces are both supported (env_spec refuses anything else).
        if not spec.discrete and spec.action_dim < 1:
            raise ConfigError(f"algo=ppo needs at least one action dimension, {spec.env_id} has none")

    def set_progress(self, fraction: float) -> None:
        """``lr_schedule=linear``: ``lr * (1 - fraction)``, floored at 1% of ``lr`` so that the
        last updates of a budget still move; ``clip_schedule=linear``: the clip likewise."""
        scale = max(0.01, 1.0 - min(1.0, max(0.0, float(fraction))))
        if self.lr_schedule == "linear" and self.policy.optimizer is not None:
            self.policy.set_lr(self.lr * scale)
        if self.clip_schedule == "linear":
            self.clip.fill_(self.clip_range * scale)

    # -- acting -------------------------------------------------------------------------------
    @torch.no_grad()
    def act_tensor(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """Columns: the actions sampled from (or, greedily, the mode of) the policy, their
        log-probabilities and, for Discrete actions, the log-probability of every action."""
        dist = self.net.distribution(obs)
        if self.spec.discrete:
            actions = torch.multinomial(dist.probs, 1) if explore else dist.probs.argmax(dim=1, keepdim=True)
        elif explore:
            actions = dist.mean + dist.stddev * torch.randn(dist.mean.shape, device=self.device)
        else:
            actions = dist.mean
        log_prob = self.net.log_prob(dist, actions)
        every = (dist.logits.float(),) if self.spec.discrete else ()  # normalised log-probabilities
        return torch.cat((actions.float(), log_prob.float()[:, None], *every), dim=1)

    def finish_act(self, out: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        dim = self.spec.action_dim
        return out[:, :dim], out[:, dim : dim + 1]

    def extras_of(self, out: np.ndarray, actions: np.ndarray) -> np.ndarray | None:
        """Discrete actions: the log-probability of each taken action, read from the row's
        log-probabilities of every action."""
        if not self.spec.discrete:
            return None
        taken = actions[:, 0].astype(np.int64)
        return out[np.arange(len(out)), 2 + taken][:, None].astype(np.float32)

    @torch.no_grad()
    def extras_for(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """The behaviour log-probabilities of ``actions`` (actions the environment sent in place
        of the policy's), so the rollout's ratio is that of the action the row records."""
        dist = self.net.distribution(self.obs_tensor(obs))
        taken = torch.as_tensor(np.asarray(actions, dtype=np.float32), device=self.device)
        log_prob = self.net.log_prob(dist, taken)
        return log_prob.float().cpu().numpy()[:, None].astype(np.float32)

    def env_action(self, action_row: np.ndarray) -> Any:
        if self.spec.discrete:
            return int(action_row[0])
        return np.clip(action_row, self._low, self._high).astype(np.float32)

    # -- rollout storage ----------------------------------------------------------------------
    def updates_per_rollout(self, n_rows: int) -> int:
        """Minibatch updates a rollout of ``n_rows`` rows gets: ``epochs`` passes of
        ``max(1, n_rows // batch_size)`` minibatches of ``batch_size`` rows."""
        return self.epochs * max(1, n_rows // self.batch_size)

    def minibatch_rows(self) -> int:
        return self.batch_size

    def rollout_rows(self) -> int:
        return self.rollout_steps

    def rollout_updates(self) -> int:
        return self.updates_per_rollout(self.rollout_steps)

    def row_buffer(self, n: int) -> np.ndarray:
        return self.store.staging.host_rows(n)

    def observe(self, rows: np.ndarray) -> None:
        self.store.add(rows)

    def updates_due(self, new_steps: int) -> int:
        return self.store.take_granted()

    def storage_state(self) -> dict[str, Any]:
        """Pending rows, each frozen rollout (:meth:`Rollout.state`) and the minibatch generator."""
        return {**self.store.state(), "generator": self._generator.get_state(),
                "generator_seeded": self._generator_seeded}

    def load_storage_state(self, state: Mapping[str, Any]) -> None:
        self.store.load_state(state)
        self._generator.set_state(state["generator"])
        self._generator_seeded = bool(state["generator_seeded"])

    def ready_to_update(self) -> bool:
        """True while a complete rollout has minibatch updates left."""
        return self.store.current is not None

    @property
    def pending_rows(self) -> int:
        """Rows stored towards the next rollout (not yet frozen)."""
        return self.store.pending_rows

    # -- learning -----------------------------------------------------------------------------
    def stage_block(self, k: int) -> bool:
        """Start the current rollout if this is its first update (values, advantages, the
        minibatch schedule), gather its next minibatch into the buffer :meth:`next_batch`
        returns views of, and advance. True when that is the ``batch_size`` buffer every
        captured update reads."""
        if k != 1:
            raise ValueError(f"algo=ppo stages one update per block, got {k}")
        rollout = self.store.current
        if rollout is None:
            raise RuntimeError("PPO update called with no complete rollout (see updates_due)")
        if rollout.table is None:
            self._start(rollout)
        index = rollout.schedule[rollout.position]
        width = rollout.table.shape[1]
        full = index.shape[0] == self.batch_size
        staged = self._staged if full else None
        if staged is None or staged.shape[1] != width:
            staged = torch.empty((index.shape[0], width), dtype=rollout.table.dtype, device=self.device)
            if full:
                self._staged = staged
        torch.index_select(rollout.table, 0, index, out=staged)
        self._batch = self._views(staged, rollout.views)
        self.store.advance()
        return full

    def next_batch(self) -> dict[str, torch.Tensor]:
        """The minibatch :meth:`stage_block` gathered (views of its buffer: no device work)."""
        return self._batch
