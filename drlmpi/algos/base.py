"""The surface a topology drives without knowing which algorithm it is.

An algorithm owns its networks, its optimizers and its experience store (a replay buffer or a
rollout buffer). It never imports MPI: where a topology needs gradients reduced across ranks it
passes a :data:`GradSync` into :meth:`Algorithm.update`, and the algorithm calls it between
``backward`` and the optimizer step of each network it trains.

The contract, as used by :mod:`drlmpi.roles` and the topologies::

    algo = DQN(spec, cfg, device="cpu", seed=0, learner=True)
    actions, extras = algo.act(obs, env_steps, explore=True)   # simulator side
    algo.observe(rows)                      # learner side: packed experience rows arrive
    for _ in range(algo.updates_due(len(rows))):
        metrics = algo.update(sync)         # one gradient update, gradients reduced by ``sync``
    flat = algo.policy.flat.params_numpy()  # what simulators need to act (one flat buffer)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from drlmpi.comm import ExperienceLayout, FlatParams
from drlmpi.envs import EnvSpec


class ConfigError(ValueError):
    """A configuration that cannot run (reported in one line before any rank starts work)."""


class SyncScheduleError(RuntimeError):
    """An update synced other networks than its ``sync_schedule`` promised (see
    :meth:`Algorithm.checked_update`)."""


class ParamGroup:
    """One network with its optimizer; parameters and gradients live in flat buffers.

    Args:
        module: the network (its parameters are re-seated into :attr:`flat`).
        lr: Adam learning rate.
        max_grad_norm: clip the global gradient norm to this before stepping (``None``: no clip).
        adam_eps: Adam's epsilon.
        with_optimizer: ``False`` on ranks that only act (no optimizer state is allocated).
    """

    def __init__(self, module: nn.Module, lr: float, max_grad_norm: float | None = None,
                 adam_eps: float = 1e-8, with_optimizer: bool = True) -> None:
        self.module = module
        self.flat = FlatParams(module)
        self.max_grad_norm = max_grad_norm
        self.optimizer = None
        if with_optimizer:
            # The optimizer sees ONE tensor, the flat buffer (whose .grad is the flat gradient
            # buffer): Adam's update is then a handful of vector operations over the whole
            # network instead of a loop over its parameter tensors.
            self.flat.params.grad = self.flat.grads
            self.optimizer = torch.optim.Adam([self.flat.params], lr=lr, eps=adam_eps)

    def backward(self, loss: torch.Tensor) -> None:
        """Zero the flat gradients and backpropagate ``loss`` into them."""
        self.flat.zero_grad()
        loss.backward()

    def apply_gradients(self) -> None:
        """Clip (if configured) and take one optimizer step with the current gradients."""
        if self.optimizer is None:
            raise RuntimeError("this ParamGroup was built without an optimizer (acting only)")
        if self.max_grad_norm is not None:
            norm = torch.linalg.vector_norm(self.flat.grads)
            scale = self.max_grad_norm / (norm + 1e-6)
            if scale < 1.0:
                self.flat.grads.mul_(scale)
        self.optimizer.step()


GradSync = Callable[[str, ParamGroup], None]
"""Called as ``sync(name, group)`` after ``backward``; it must leave ``group``'s parameters
updated. The local version just calls ``group.apply_gradients()``; distributed versions reduce
``group.flat.grads`` across ranks first (or apply on a server and broadcast parameters)."""


def local_sync(name: str, group: ParamGroup) -> None:
    """The single-process :data:`GradSync`: step with this rank's own gradients."""
    group.apply_gradients()


def mlp(in_dim: int, out_dim: int, hidden: tuple[int, ...], activation: type[nn.Module] = nn.ReLU,
        out_activation: type[nn.Module] | None = None) -> nn.Sequential:
    """A plain multilayer perceptron ``in_dim -> hidden... -> out_dim``."""
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layers += [nn.Linear(last, width), activation()]
        last = width
    layers.append(nn.Linear(last, out_dim))
    if out_activation is not None:
        layers.append(out_activation())
    return nn.Sequential(*layers)


class Algorithm(ABC):
    """Base class of DQN, TD3 and PPO (see the module docstring for the contract).

    Subclasses set :attr:`groups` (every trained network, by name) and :attr:`policy` (the one
    group whose flat parameters a simulator needs in order to act).
    """

    #: ``"off_policy"`` (replay; any lag is fine) or ``"on_policy"`` (rollouts of the current
    #: policy; topologies that add policy lag must account for it).
    kind: ClassVar[str] = "off_policy"
    #: extra experience columns this algorithm's ``act`` fills, e.g. ``(("log_prob", 1),)``.
    extra_columns: ClassVar[tuple[tuple[str, int], ...]] = ()

    groups: dict[str, ParamGroup]
    policy: ParamGroup

    def __init__(self, spec: EnvSpec, cfg: Mapping[str, Any], device: str | torch.device,
                 seed: int, learner: bool) -> None:
        self.check_spec(spec)
        self.spec = spec
        self.cfg = cfg
        self.device = torch.device(device)
        self.learner = learner
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.layout = ExperienceLayout(spec.obs_dim, spec.action_dim, self.extra_columns)
        self.updates = 0

    def reseed(self, seed: int) -> None:
        """Reseed exploration and sampling (``rng`` and torch's generator), keeping the networks:
        data-parallel ranks build identical networks from one seed, then explore apart."""
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)

    # -- checks ---------------------------------------------------------------------------
    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        """Raise :class:`ConfigError` if this algorithm cannot handle ``spec``'s spaces."""

    # -- acting (simulator side) ------------------------------------------------------------
    @abstractmethod
    def act(self, obs: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Actions for a batch of observations.

        Args:
            obs: ``(n_envs, obs_dim)`` float32.
            env_steps: the job-wide environment step count (drives exploration schedules).
            explore: ``False`` for greedy evaluation.
        Returns:
            ``actions`` ``(n_envs, action_dim)`` float32 (a discrete action as its index) and the
            extra columns ``(n_envs, sum of extra widths)`` or ``None``.
        """

    def env_action(self, action_row: np.ndarray) -> Any:
        """Convert one row of :meth:`act`'s output into what ``env.step`` takes."""
        if self.spec.discrete:
            return int(action_row[0])
        return action_row.astype(np.float32)

    # -- learning (learner side) -------------------------------------------------------------
    @abstractmethod
    def observe(self, rows: np.ndarray) -> None:
        """Store packed experience rows (``(n, layout.width)`` float32)."""

    @abstractmethod
    def updates_due(self, new_steps: int) -> int:
        """How many :meth:`update` calls the ``new_steps`` just observed entitle (UTD ratio)."""

    @abstractmethod
    def update(self, sync: GradSync = local_sync) -> dict[str, float]:
        """One gradient update from stored experience; returns scalar metrics."""

    def ready_to_update(self) -> bool:
        """Whether :meth:`update` can run now regardless of new data (a free-running learner
        asks this)."""
        return False

    def sync_schedule(self, update_index: int) -> tuple[str, ...]:
        """Names of the groups :meth:`update` number ``update_index`` (0-based) will pass to
        ``sync``, in order. A parameter server that computes no gradients itself follows this
        schedule to take part in the same collectives; override it when an update does not
        step every group (TD3's delayed actor)."""
        return tuple(self.groups)

    def after_update(self, synced: tuple[str, ...]) -> None:
        """Hook run at the end of every update, local or remote, with the names of the groups
        it stepped: target networks follow their online networks here (DQN's copy or Polyak
        step, TD3's delayed Polyak step). ``updates`` already counts this update."""

    def checked_update(self, sync: GradSync = local_sync) -> dict[str, float]:
        """:meth:`update`, verifying that it syncs exactly the groups :meth:`sync_schedule`
        promised, in order.

        Ranks that reduce gradients together (allgather, a parameter server and its workers)
        must enter the same collectives in the same order; the server even follows the
        schedule without computing anything. An update that skipped or added a sync (an
        early stop on KL, say) would leave some rank waiting forever, so the mismatch raises
        :class:`SyncScheduleError` *before* the unexpected collective, or as soon as the update
        returns with one missing, and the job is aborted with that message instead of hanging.
        The single-process :func:`local_sync` is not checked (there is nobody to wait for).
        """
        if sync is local_sync:
            return self.update(sync)
        index = self.updates
        expected = tuple(self.sync_schedule(index))
        seen: list[str] = []

        def checked(name: str, group: ParamGroup) -> None:
            if len(seen) >= len(expected) or expected[len(seen)] != name:
                raise SyncScheduleError(self._schedule_mismatch(index, expected, (*seen, name)))
            seen.append(name)
            sync(name, group)

        metrics = self.update(checked)
        if len(seen) != len(expected):
            raise SyncScheduleError(self._schedule_mismatch(index, expected, tuple(seen)))
        return metrics

    def _schedule_mismatch(self, index: int, expected: tuple[str, ...], seen: tuple[str, ...]) -> str:
        name = self.cfg.get("name", type(self).__name__) if hasattr(self.cfg, "get") else type(self).__name__
        return (f"algo={name} update {index} synced {list(seen)} but sync_schedule({index}) "
                f"promised {list(expected)}: ranks averaging gradients would wait for each other "
                f"forever. Make sync_schedule() return exactly the networks update() syncs, in order")

    def remote_update(self, sync: GradSync) -> dict[str, float]:
        """One update whose gradients come from other ranks (a parameter server): ``sync``
        each group the schedule names (it brings the gradients in and steps), then the
        after-update hooks, exactly as a local :meth:`update` would."""
        names = tuple(self.sync_schedule(self.updates))
        for name in names:
            sync(name, self.groups[name])
        self.updates += 1
        self.after_update(names)
        return {}

    # -- persistence -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every network's tensors, flat-keyed ``"<group>.<param>"`` (loads with weights_only)."""
        out: dict[str, torch.Tensor] = {}
        for name, group in self.groups.items():
            for key, value in group.module.state_dict().items():
                out[f"{name}.{key}"] = value.detach().cpu().clone()
        return out

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Inverse of :meth:`state_dict` (copies in place, keeping the flat-buffer views)."""
        for name, group in self.groups.items():
            prefix = f"{name}."
            sub = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            with torch.no_grad():
                for key, tensor in group.module.state_dict().items():
                    tensor.copy_(sub[key])


class OffPolicyAlgorithm(Algorithm):
    """An algorithm that learns from a replay buffer with an update-to-data ratio (DQN, TD3).

    Reads ``batch_size``, ``buffer_size``, ``learning_starts`` and ``updates_per_step`` from the
    config; the replay is allocated on learner instances only.
    """

    kind = "off_policy"

    def __init__(self, spec: EnvSpec, cfg: Mapping[str, Any], device: str | torch.device,
                 seed: int, learner: bool) -> None:
        super().__init__(spec, cfg, device, seed, learner)
        from drlmpi.replay import ReplayBuffer

        self.batch_size = int(cfg["batch_size"])
        self.learning_starts = int(cfg["learning_starts"])
        self.updates_per_step = float(cfg["updates_per_step"])
        self._update_credit = 0.0
        self.replay = ReplayBuffer(self.layout, int(cfg["buffer_size"]), self.device) if learner else None

    def observe(self, rows: np.ndarray) -> None:
        self.replay.add(rows)

    def updates_due(self, new_steps: int) -> int:
        """``updates_per_step`` per new step, fractions carried; none before the replay holds
        ``max(learning_starts, batch_size)`` transitions."""
        if not self.ready_to_update():
            return 0
        self._update_credit += new_steps * self.updates_per_step
        due = int(self._update_credit)
        self._update_credit -= due
        return due

    def ready_to_update(self) -> bool:
        return self.replay is not None and len(self.replay) >= max(self.learning_starts, self.batch_size)
