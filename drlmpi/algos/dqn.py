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

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from drlmpi.algos.encoders import network, resolve_encoder
from drlmpi.algos.exchange import GradientExchange
from drlmpi.algos.gradients import LossGradient, forward, pairable, paired_forward, stacked_forward
from drlmpi.algos.host_forward import HostMLP
from drlmpi.algos.off_policy import OffPolicyAlgorithm
from drlmpi.algos.params import ParamGroup, flat_target, under
from drlmpi.config.errors import ConfigError
from drlmpi.config.scopes import DQNSettings
from drlmpi.device.compiled import Compiled
from drlmpi.envs.spec import EnvSpec


class DQN(OffPolicyAlgorithm):
    """Double DQN for discrete action spaces.

    Config keys (``drlmpi/config/schema.py``'s ``algo/dqn`` documents each): ``hidden``, ``lr``,
    ``gamma``, ``double_q``, ``batch_size``, ``buffer_size``, ``learning_starts``,
    ``updates_per_step``, ``target_update_every``, ``tau``, ``eps_start``, ``eps_end``,
    ``exploration_steps``, ``max_grad_norm``, ``capture``, ``updates_per_graph``, ``target_forward``,
    ``encoder`` (image observations: :mod:`drlmpi.algos.encoders`).
    """

    metric_names = ("loss", "q_mean")
    settings_class = DQNSettings
    acting_modules = ("q",)
    report_variants = ("eps_ladder", "encoder")  # what is collected; what it is learned with
    report_plain = {"encoder": ("cnn",)}  # encoder=impala (or mlp) is a regime of its own
    loss_metrics = ("loss",)
    takes_images = True

    def __init__(self, spec: EnvSpec, cfg: DQNSettings | Mapping[str, Any],
                 device: str | torch.device = "cpu", seed: int = 0, learner: bool = True) -> None:
        super().__init__(spec, cfg, device, seed, learner)
        cfg = self.cfg
        #: ``mlp``, ``cnn`` or ``impala`` (``algo.encoder`` resolved for this environment's observations)
        self.encoder = resolve_encoder(spec, cfg.encoder, cfg.name)
        if self.encoder != "mlp" and self.capture == "fused" and cfg.capture == "auto":
            self.capture = "graph"  # auto: the CNN update has not been measured fused (ask for it)
        q_net = network(spec, self.layout, self.encoder, spec.n_actions,
                        cfg.hidden).to(self.device)
        # The target's parameters are views into one flat buffer: a copy or Polyak step is one op.
        self.q_target, self._target_flat = flat_target(q_net)
        self.q = q_net
        self.policy = ParamGroup(q_net, cfg.lr, cfg.max_grad_norm, with_optimizer=learner)
        self.groups = {"q": self.policy}
        self._host_q = HostMLP.of(q_net)  # on views of the flat parameters: see act_host
        self.gamma = cfg.gamma
        self.target_update_every = cfg.target_update_every
        self.tau = cfg.tau
        self.double_q = cfg.double_q
        # the exploration schedule as plain numbers: a simulator reads it every step, and a config
        # lookup costs more than the Q-network's forward pass there
        self.eps_start, self.eps_end = cfg.eps_start, cfg.eps_end
        self.exploration_steps = max(1, cfg.exploration_steps)
        self.eps_ladder = cfg.eps_ladder
        #: the fused loss evaluates the online and target networks together (``algo.target_forward``)
        self.paired = cfg.target_forward == "paired" and pairable(q_net)
        self._norms = self.grad_norms()
        self.metric_names = (*self.metric_names, *self._norms)
        self._gradient = LossGradient(self.policy, self.q_loss, "dqn q",
                                      pair_with=self._target_flat if self.paired else None)
        self.gradients = (self._gradient,)
        self._copy_target: Callable[..., None] = copy_when_due

    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        if not spec.discrete:
            raise ConfigError(
                f"algo=dqn needs a discrete action space, but {spec.env_id} is continuous: "
                f"use algo=td3 or algo=ppo, or a discrete env such as env=cartpole"
            )

    def epsilon(self, env_steps: int) -> float:
        """Linear decay from ``eps_start`` to ``eps_end`` over ``exploration_steps`` steps."""
        frac = min(1.0, env_steps / self.exploration_steps)
        return self.eps_start + frac * (self.eps_end - self.eps_start)

    def schedule_values(self, env_steps: int) -> dict[str, float]:
        return {**super().schedule_values(env_steps), "epsilon": self.epsilon(env_steps)}

    @torch.no_grad()
    def act_tensor(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """The greedy actions (epsilon is applied on the host: :meth:`finish_act`)."""
        return self.q(obs).argmax(dim=1, keepdim=True).float()

    def act_host(self, obs: np.ndarray) -> np.ndarray | None:
        if self._host_q is None:
            return None
        return self._host_q(obs).argmax(axis=1)[:, None].astype(np.float32)

    def row_epsilons(self, env_steps: int, rows: int) -> float | np.ndarray:
        """Epsilon for each of ``rows`` acting rows: :meth:`epsilon`, or with ``algo.eps_ladder``
        (Ape-X's ladder, alpha) ``epsilon ** (1 + alpha * i / (N - 1))`` for the job's environment
        i of N (:meth:`set_env_positions`; else the rows' own order): one environment explores
        as the schedule says, the others more greedily, the last nearly not at all."""
        eps = self.epsilon(env_steps)
        alpha = self.eps_ladder
        if alpha <= 0:
            return eps
        positions, total = self.env_positions or (np.arange(rows), rows)
        if len(positions) != rows:  # rows of other environments (a learner acting for many)
            positions, total = np.arange(rows), rows
        return eps ** (1.0 + alpha * positions / max(1, total - 1))

    def finish_act(self, out: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, None]:
        actions = out[:, 0].astype(np.int64)
        if explore:
            eps = self.row_epsilons(env_steps, len(actions))
            random_mask = self.rng.random(len(actions)) < eps
            if random_mask.any():
                actions[random_mask] = self.rng.integers(0, self.spec.n_actions, random_mask.sum())
        return actions.astype(np.float32)[:, None], None

    def q_loss(self, params: Mapping[str, torch.Tensor] | None, obs: torch.Tensor, action: torch.Tensor,
               reward: torch.Tensor, next_obs: torch.Tensor,
               terminated: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor]]:
        """The Huber loss of ``Q(s, a)`` against the (double-)DQN target, with the online
        network's own parameters or ``params`` (:func:`~drlmpi.algos.gradients.forward`); returns
        it and ``(mean Q(s, a),)``. With ``params`` (the fused gradient) and double Q, the online
        network evaluates ``s`` and ``s'`` in ONE forward pass: on a GPU a second pass costs its
        kernels, a larger one nothing (its ``s'`` half only picks the next action). With
        ``algo.target_forward=paired`` (a plain MLP) the target network joins that pass too, each
        layer one batched product for both networks: ``params`` may hold both networks'
        parameters already stacked, ``[2, *shape]`` each (the fused gradient's ``pair_with``:
        :func:`~drlmpi.algos.gradients.stacked_forward`), else each pair is stacked here."""
        n = obs.shape[0]
        target_next = None
        if self.paired and params is not None:  # both networks on (s, s') in one pass
            x = torch.cat((obs, next_obs))
            stacked = next(iter(params.values())).dim() == 3  # a Linear's weight with the pair's dim
            both = (stacked_forward(self.q, params, x) if stacked
                    else paired_forward(self.q, params, dict(self.q_target.named_parameters()), x))
            q_now, q_next, target_next = both[0, :n], both[0, n:].detach(), both[1, n:].detach()
        elif self.double_q and params is not None:
            both = forward(self.q, params, torch.cat((obs, next_obs)))
            q_now, q_next = both[:n], both[n:].detach()
        else:
            q_now = forward(self.q, params, obs)
            if self.double_q:
                with torch.no_grad():
                    q_next = self.q(next_obs)
        q_taken = q_now.gather(1, action.long()).squeeze(1)
        with torch.no_grad():
            if target_next is None:
                target_next = self.q_target(next_obs)
            if self.double_q:  # the online net picks, the target net evaluates
                next_q = target_next.gather(1, q_next.argmax(dim=1, keepdim=True)).squeeze(1)
            else:  # the Nature-DQN target: the target net's own maximum
                next_q = target_next.max(dim=1).values
            target = reward + self.gamma * (1.0 - terminated) * next_q
        return F.smooth_l1_loss(q_taken, target), (q_taken.detach().mean(),)

    def learn(self, batch: Mapping[str, torch.Tensor], exchange: GradientExchange,
              synced: tuple[str, ...] = ("q",)) -> torch.Tensor:
        """The gradient of :meth:`q_loss` on ``batch`` (compiled with ``algo.capture=fused``),
        ``exchange("q")``; returns ``[loss, mean Q(s, a)]`` (and the gradient norm, when
        clipping) as one tensor."""
        loss, q_mean = self._gradient(batch["obs"], batch["action"], batch["reward"],
                                      batch["next_obs"], batch["terminated"])
        exchange("q", self.policy)
        return torch.stack((loss, q_mean, *self._norms.values()))

    @torch.no_grad()
    def after_update_device(self, synced: tuple[str, ...]) -> None:
        """The target network follows: a Polyak step every update (``tau < 1``), or a hard copy
        when :attr:`update_number` is a multiple of ``target_update_every``: ``lerp`` with a
        device weight of exactly 0 or 1 (which torch computes exactly), so no host branch."""
        if self.tau < 1.0:
            self._target_flat.lerp_(self.policy.flat.params, self.tau)
            return
        self._copy_target(self._target_flat, self.policy.flat.params, self.update_number,
                          self.target_update_every)

    def fuse(self, compiler: Callable[..., Any] = torch.compile) -> None:
        super().fuse(compiler)
        self._copy_target = Compiled(copy_when_due, "target copy", compiler)

    def warm_up_losses(self, batch: Mapping[str, torch.Tensor]) -> None:
        self._gradient(batch["obs"], batch["action"], batch["reward"], batch["next_obs"], batch["terminated"])
        if self.tau >= 1.0:  # as after_update_device calls it: without autograd (a compile guard)
            with torch.no_grad():
                self._copy_target(self._target_flat.clone(), self.policy.flat.params,
                                  self.update_number.clone(), self.target_update_every)

    def state_dict(self) -> dict[str, torch.Tensor]:
        out = super().state_dict()
        for key, value in self.q_target.state_dict().items():
            out[f"q_target.{key}"] = value.detach().cpu().clone()
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        super().load_state_dict(state)
        target = under(state, "q_target")
        if target:
            self.q_target.load_state_dict(target)


def copy_when_due(target: torch.Tensor, online: torch.Tensor, update_number: torch.Tensor,
                  every: int) -> None:
    """``target = online`` when ``update_number`` is a multiple of ``every``, without a host branch:
    ``lerp`` with a device weight of exactly 0 or 1 (which torch computes exactly)."""
    due = (update_number % every == 0).to(target.dtype)
    target.lerp_(online, due)
