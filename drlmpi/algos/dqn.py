"""Deep Q-Network with a double-DQN target (Mnih et al. 2015; van Hasselt et al. 2016).

Online network ``Q_theta`` and target network ``Q_theta'``; for a minibatch of transitions
``(s, a, r, s', terminated)``::

    a*     = argmax_a Q_theta(s', a)                        (online net picks)
    y      = r + gamma * (1 - terminated) * Q_theta'(s', a*) (target net evaluates)
    loss   = Huber(Q_theta(s, a), y)

Exploration is epsilon-greedy with epsilon decaying linearly over ``exploration_steps`` of the
*job-wide* environment step count, so N simulators do not decay it N times too fast (the DQN
paper's open problem with asynchronous simulators).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from drlmpi.algos.encoders import network, resolve_encoder
from drlmpi.algos.exchange import GradientExchange
from drlmpi.algos.off_policy import OffPolicyAlgorithm
from drlmpi.algos.params import ParamGroup, flat_target
from drlmpi.config.errors import ConfigError
from drlmpi.envs.spec import EnvSpec


class DQN(OffPolicyAlgorithm):
    """Double DQN for discrete action spaces.

    Config keys (``drlmpi/schema.py``'s ``algo/dqn`` documents each): ``hidden``, ``lr``,
    ``gamma``, ``double_q``, ``batch_size``, ``buffer_size``, ``learning_starts``,
    ``updates_per_step``, ``target_update_every``, ``tau``, ``eps_start``, ``eps_end``,
    ``exploration_steps``, ``max_grad_norm``, ``capture``, ``updates_per_graph``, ``encoder``
    (image observations: :mod:`drlmpi.algos.encoders`).
    """

    metric_names = ("loss", "q_mean")
    takes_images = True

    def __init__(self, spec: EnvSpec, cfg: Mapping[str, Any], device: str | torch.device = "cpu",
                 seed: int = 0, learner: bool = True) -> None:
        super().__init__(spec, cfg, device, seed, learner)
        #: ``mlp`` or ``cnn`` (``algo.encoder`` resolved for this environment's observations)
        self.encoder = resolve_encoder(spec, cfg, self.config_name(cfg))
        q_net = network(spec, self.layout, self.encoder, spec.n_actions,
                        tuple(cfg["hidden"])).to(self.device)
        # The target's parameters are views into one flat buffer: a copy or Polyak step is one op.
        self.q_target, self._target_flat = flat_target(q_net)
        self.q = q_net
        self.policy = ParamGroup(q_net, cfg["lr"], cfg.get("max_grad_norm"), with_optimizer=learner)
        self.groups = {"q": self.policy}
        self.gamma = float(cfg["gamma"])
        self.target_update_every = int(cfg["target_update_every"])
        self.tau = float(cfg.get("tau", 1.0))
        self.double_q = bool(cfg.get("double_q", True))
        self._norms = self.grad_norms()
        self.metric_names = (*self.metric_names, *self._norms)

    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        if not spec.discrete:
            raise ConfigError(
                f"algo=dqn needs a discrete action space, but {spec.env_id} is continuous: "
                f"use algo=td3 or algo=ppo, or a discrete env such as env=cartpole"
            )

    def epsilon(self, env_steps: int) -> float:
        """Linear decay from ``eps_start`` to ``eps_end`` over ``exploration_steps`` steps."""
        start, end = float(self.cfg["eps_start"]), float(self.cfg["eps_end"])
        frac = min(1.0, env_steps / max(1, int(self.cfg["exploration_steps"])))
        return start + frac * (end - start)

    def schedule_values(self, env_steps: int) -> dict[str, float]:
        return {**super().schedule_values(env_steps), "epsilon": self.epsilon(env_steps)}

    @torch.no_grad()
    def act_tensor(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """The greedy actions (epsilon is applied on the host: :meth:`finish_act`)."""
        return self.q(obs).argmax(dim=1, keepdim=True).float()

    def finish_act(self, out: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, None]:
        actions = out[:, 0].astype(np.int64)
        if explore:
            eps = self.epsilon(env_steps)
            random_mask = self.rng.random(len(actions)) < eps
            if random_mask.any():
                actions[random_mask] = self.rng.integers(0, self.spec.n_actions, random_mask.sum())
        return actions.astype(np.float32)[:, None], None

    def learn(self, batch: Mapping[str, torch.Tensor], exchange: GradientExchange,
              synced: tuple[str, ...] = ("q",)) -> torch.Tensor:
        """Double-DQN Huber loss on ``batch``, backward, ``exchange("q")``; returns
        ``[loss, mean Q(s, a)]`` (and the gradient norm, when clipping) as one tensor."""
        actions = batch["action"].long()
        q_taken = self.q(batch["obs"]).gather(1, actions).squeeze(1)
        with torch.no_grad():
            target_next = self.q_target(batch["next_obs"])
            if self.double_q:  # the online net picks, the target net evaluates
                best_next = self.q(batch["next_obs"]).argmax(dim=1, keepdim=True)
                next_q = target_next.gather(1, best_next).squeeze(1)
            else:  # the Nature-DQN target: the target net's own maximum
                next_q = target_next.max(dim=1).values
            target = batch["reward"] + self.gamma * (1.0 - batch["terminated"]) * next_q
        loss = F.smooth_l1_loss(q_taken, target)
        self.policy.backward(loss)
        exchange("q", self.policy)
        return torch.stack((loss.detach(), q_taken.detach().mean(), *self._norms.values()))

    @torch.no_grad()
    def after_update_device(self, synced: tuple[str, ...]) -> None:
        """The target network follows: a Polyak step every update (``tau < 1``), or a hard copy
        when :attr:`update_number` is a multiple of ``target_update_every``: ``lerp`` with a
        device weight of exactly 0 or 1 (which torch computes exactly), so no host branch."""
        if self.tau < 1.0:
            self._target_flat.lerp_(self.policy.flat.params, self.tau)
            return
        due = (self.update_number % self.target_update_every == 0).to(self._target_flat.dtype)
        self._target_flat.lerp_(self.policy.flat.params, due)

    def state_dict(self) -> dict[str, torch.Tensor]:
        out = super().state_dict()
        for key, value in self.q_target.state_dict().items():
            out[f"q_target.{key}"] = value.detach().cpu().clone()
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        super().load_state_dict(state)
        target = {k[len("q_target."):]: v for k, v in state.items() if k.startswith("q_target.")}
        if target:
            self.q_target.load_state_dict(target)
