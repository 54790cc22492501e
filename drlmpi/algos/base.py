"""The surface a topology drives without knowing which algorithm it is.

An algorithm owns its networks, its optimizers and its experience store (a replay buffer or a
rollout buffer). It never imports MPI: where a topology needs gradients reduced across ranks it
hands the learner a :class:`~drlmpi.algos.exchange.GradientExchange`, and every update calls it
between ``backward`` and the optimizer step of each network it trains.

The contract, as used by :mod:`drlmpi.roles` and the topologies::

    algo = DQN(spec, cfg, device="cpu", seed=0, learner=True)
    actions, extras = algo.act(obs, env_steps, explore=True)   # simulator side
    algo.observe(rows)                      # learner side: packed experience rows arrive
    metrics = algo.run_updates(algo.updates_due(len(rows)), exchange)   # the one update path
    flat = algo.policy.flat.params_numpy()  # what simulators need to act (one flat buffer)

An update is: sample (:meth:`Algorithm.next_batch`), learn (loss, backward, the exchange, the
optimizer step: :meth:`Algorithm.learn`), then the target networks
(:meth:`Algorithm.after_update_device`), checked against the algorithm's ``sync_schedule``;
running it eagerly or replaying it from a captured CUDA graph is a detail of
:meth:`Algorithm.run_updates`, the one update path (:mod:`drlmpi.algos.update_path`). On a
device (``device=cuda[:N]``) storage, networks and optimizer state live there.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from drlmpi.algos.configured import Configured
from drlmpi.algos.exchange import GradientExchange
from drlmpi.algos.host_forward import MAX_HOST_ROWS
from drlmpi.algos.params import ParamGroup
from drlmpi.algos.training_state import TrainingState
from drlmpi.algos.update_path import UpdatePath
from drlmpi.config.errors import ConfigError
from drlmpi.config.scopes import AlgoSettings
from drlmpi.device.capture import CapturedUpdate, resolve_capture
from drlmpi.envs.spec import EnvSpec


class Algorithm(TrainingState, UpdatePath, Configured, ABC):
    """Base class of DQN, TD3 and PPO (see the module docstring for the contract).

    Subclasses set :attr:`groups` (every trained network, by name) and :attr:`policy` (the one
    group whose flat parameters a simulator needs in order to act). How updates run
    (:meth:`run_updates`) comes from :class:`~drlmpi.algos.update_path.UpdatePath`, what is
    saved and restored from :class:`~drlmpi.algos.training_state.TrainingState`.
    """

    #: ``"off_policy"`` (replay; any lag is accepted, though a stale round costs env steps:
    #: star's hint) or ``"on_policy"`` (rollouts of the current policy; topologies that add
    #: policy lag must account for it).
    kind: ClassVar[str] = "off_policy"
    #: extra experience columns this algorithm's ``act`` fills, e.g. ``(("log_prob", 1),)``.
    extra_columns: ClassVar[tuple[tuple[str, int], ...]] = ()
    #: whether it takes uint8 image observations (through :mod:`drlmpi.algos.encoders`).
    takes_images: ClassVar[bool] = False
    updates_anything: ClassVar[bool] = True  #: (only then has it ``algo.capture``: not ``random``)
    #: updates :meth:`run_updates` runs as one block (``algo.updates_per_graph``: a captured graph
    #: of that many updates); callers split a batch of updates into multiples of this.
    updates_per_graph: int = 1
    #: the attributes holding the modules :meth:`act_tensor` reads (a learner acting beside its
    #: updates acts from copies of them: :mod:`drlmpi.device.acting`); empty: it cannot
    acting_modules: ClassVar[tuple[str, ...]] = ()
    #: whether :meth:`next_batch` and :meth:`learn` may be captured (device work only), and
    #: their gradients compiled too (``fusable``: ``algo.capture=fused``)
    capturable, fusable = False, False
    #: names of the values :meth:`learn` returns, in order; ``loss_metrics``: those that must stay finite
    metric_names: tuple[str, ...] = ()
    loss_metrics: tuple[str, ...] = ()


    groups: dict[str, ParamGroup]
    policy: ParamGroup

    def __init__(self, spec: EnvSpec, cfg: AlgoSettings | Mapping[str, Any],
                 device: str | torch.device, seed: int, learner: bool) -> None:
        cfg = self.settings_of(cfg)
        self.check_spec(spec)
        if spec.image and not self.takes_images:
            raise ConfigError(f"algo={self.config_name(cfg)} takes flat vector observations, but "
                              f"{spec.env_id} has an {spec.describe_obs()}: use algo=ppo or algo=dqn "
                              f"(CNN encoders)")
        self.spec = spec
        #: the algorithm's typed settings (``algo.*``)
        self.cfg = cfg
        self.device = torch.device(device)
        self.learner = learner
        self.rng = np.random.default_rng(seed)
        #: the job-wide positions of the environments this instance acts for, and the job's
        #: environment count (:meth:`set_env_positions`; ``None``: the batch's rows in order)
        self.env_positions: tuple[np.ndarray, int] | None = None
        torch.manual_seed(seed)
        self.layout = self.experience_layout(spec)
        self.updates = 0
        #: the capture mode updates use: ``fused``, ``graph``, ``compile`` or ``off`` (resolved)
        self.capture = (resolve_capture(cfg.capture, self.device, self.fusable)
                        if learner and self.updates_anything else "off")
        if (self.device.type == "cuda" and spec.image and os.environ.get("DRLMPI_CUDNN_BENCHMARK", "1") != "0"
                and not torch.are_deterministic_algorithms_enabled()):  # (run.deterministic)
            torch.backends.cudnn.benchmark = True  # a CNN on fixed shapes: cuDNN picks its fastest
        #: the number of updates done, as a device integer that :meth:`after_update_device`
        #: reads (a captured block advances it itself; each block starts from :attr:`updates`).
        self.update_number = torch.zeros((), dtype=torch.int64, device=self.device)
        self._captures: dict[tuple, CapturedUpdate] = {}
        self._fused = False  # whether fuse() ran (algo.capture=fused: fuse_once)

    def set_progress(self, fraction: float) -> None:
        """The share of the run's budget used so far (0 to 1), given before each batch of
        updates: schedules that follow the budget (PPO's ``lr_schedule=linear``) read it."""

    def reseed(self, seed: int) -> None:
        """Reseed exploration and sampling (``rng`` and torch's generator), keeping the networks:
        data-parallel ranks build identical networks from one seed, then explore apart."""
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)

    def warm_up_rows(self) -> int:
        """Rows stored before updates may start (an off-policy algorithm's ``learning_starts``)."""
        return 0

    def minibatch_rows(self) -> int:
        """Rows one update learns from (``batch_size``; 0 for an algorithm that does not learn)."""
        return 0

    def rollout_rows(self) -> int:
        """Rows a rollout gathers before its updates (PPO's ``rollout_steps``; 0 for a replay)."""
        return 0

    def rollout_updates(self) -> int | None:
        """The updates one rollout of the configured size entitles (on-policy algorithms: what a
        topology bounds policy lag by); ``None`` for algorithms that learn from a replay."""
        return None

    def grad_norms(self) -> dict[str, torch.Tensor]:
        """The pre-clipping gradient norm of each trained group that clips (clipping computes it
        anyway: :attr:`ParamGroup.grad_norm`), by metric name: ``grad_norm`` for a one-group
        algorithm, ``<group>_grad_norm`` otherwise. Updates append them to their metrics
        vector (device scalars written in place: graph-safe, no host synchronisation)."""
        single = len(self.groups) == 1
        return {("grad_norm" if single else f"{name}_grad_norm"): group.grad_norm
                for name, group in self.groups.items() if group.grad_norm is not None}

    def schedule_values(self, env_steps: int) -> dict[str, float]:
        """Host-side values worth logging at ``env_steps`` job-wide steps, read without
        touching the device: each optimizer's learning rate (``lr`` for a one-group
        algorithm, ``<group>_lr`` otherwise); subclasses add their schedules (DQN: epsilon)."""
        out: dict[str, float] = {}
        for name, group in self.groups.items():
            if group.optimizer is not None:
                out["lr" if len(self.groups) == 1 else f"{name}_lr"] = group.lr_value
        return out

    # -- acting (simulator side) ------------------------------------------------------------
    def set_env_positions(self, first: int, count: int, job_envs: int) -> None:
        """This instance acts for the job's environments ``first .. first + count - 1`` of
        ``job_envs`` (a simulator's; what per-environment exploration, DQN's
        ``algo.eps_ladder``, reads)."""
        self.env_positions = (np.arange(first, first + count), max(1, int(job_envs)))

    @torch.no_grad()
    def act(self, obs: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Actions for a batch of observations: :meth:`act_tensor` on this instance's device,
        one copy back, then :meth:`finish_act` on the host.

        Args:
            obs: ``(n_envs, *obs_shape)``: float32 vectors or uint8 images.
            env_steps: the job-wide environment step count (drives exploration schedules).
            explore: ``False`` for greedy evaluation.
        Returns:
            ``actions`` ``(n_envs, action_dim)`` float32 (a discrete action as its index) and the
            extra columns ``(n_envs, sum of extra widths)`` or ``None``.
        """
        out = self.act_host(obs) if len(obs) <= MAX_HOST_ROWS else None
        if out is None:
            out = self.act_tensor(self.obs_tensor(obs), explore).float().cpu().numpy()
        return self.finish_act(out, env_steps, explore)

    def act_host(self, obs: np.ndarray) -> np.ndarray | None:
        """:meth:`act_tensor`'s output computed in numpy on the host (a plain MLP on the CPU, at
        most ``MAX_HOST_ROWS`` observations: :mod:`drlmpi.algos.host_forward`), or ``None``: act
        through torch."""
        return None

    def act_tensor(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """The device part of :meth:`act`: one float tensor ``(n, k)`` from a batch of
        observations (:meth:`obs_tensor`), with no host synchronisation and no host randomness,
        so that a learner acting for many simulators can replay it from a captured graph."""
        raise NotImplementedError(f"algo={self.config_name(self.cfg)} acts on the host only")

    def finish_act(self, out: np.ndarray, env_steps: int,
                   explore: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """The host part of :meth:`act` on :meth:`act_tensor`'s output (exploration that follows
        the job-wide step count, the split into actions and extra columns)."""
        return out, None

    def extras_of(self, out: np.ndarray, actions: np.ndarray) -> np.ndarray | None:
        """The extra columns of ``actions`` taken instead of the chosen ones, read from the
        :meth:`act_tensor` output ``out`` of the same rows if it holds them (``None``: it does
        not; :meth:`extras_for` computes them with another forward pass)."""
        return None

    def extras_for(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray | None:
        """The extra columns :meth:`act` would have filled had it chosen ``actions`` for ``obs``
        (an environment that overrides the policy's action: FIRE after a lost life in Atari);
        ``None`` for algorithms without extra columns."""
        return None

    def obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """A batch of observations as a tensor on this instance's device: float32 vectors, or
        uint8 images as they are (the encoder converts them on the device)."""
        dtype = torch.uint8 if self.spec.image else torch.float32
        return torch.as_tensor(np.asarray(obs), dtype=dtype, device=self.device)

    def env_action(self, action_row: np.ndarray) -> Any:
        """Convert one row of :meth:`act`'s output into what ``env.step`` takes."""
        if self.spec.discrete:
            return int(action_row[0])
        return action_row.astype(np.float32)

    # -- learning (learner side) -------------------------------------------------------------
    def row_buffer(self, n: int) -> np.ndarray:
        """A host array for ``n`` experience rows that :meth:`observe` stores without another
        host copy (a device learner's pinned staging buffer); valid until the next call."""
        return self.layout.empty(n)

    def successive_rows(self) -> None:
        """The topology builds every row itself, each env stream's in step order with none
        missing (central): an algorithm may use it (PPO: ``V(next_obs)`` from the next row)."""

    @abstractmethod
    def observe(self, rows: np.ndarray) -> None:
        """Store packed experience rows (``(n, layout.width)`` float32)."""

    @abstractmethod
    def updates_due(self, new_steps: int) -> int:
        """How many updates the ``new_steps`` just observed entitle (UTD ratio)."""

    def ready_to_update(self) -> bool:
        """Whether an update can run now regardless of new data (a free-running learner asks
        this)."""
        return False

    def next_batch(self) -> Mapping[str, torch.Tensor]:
        """The minibatch of the next update (sampled from the replay, or the rollout's next
        minibatch). With :attr:`capturable`, device work only into the same tensors each call."""
        raise NotImplementedError(f"algo={self.config_name(self.cfg)} does not learn")

    def learn(self, batch: Mapping[str, torch.Tensor], exchange: GradientExchange,
              synced: tuple[str, ...]) -> torch.Tensor:
        """Losses on ``batch``, backward and ``exchange(name, group)`` for each name in ``synced``
        (in order); returns the metrics as one 1-D tensor (:attr:`metric_names`). With
        :attr:`capturable` it must not touch Python counters or read device values on the host."""
        raise NotImplementedError(f"algo={self.config_name(self.cfg)} does not learn")

    def after_update_device(self, synced: tuple[str, ...]) -> None:
        """Device work at the end of every update that stepped the groups ``synced``, local or
        remote: target networks follow their online networks here (DQN's copy or Polyak step,
        TD3's delayed Polyak step), deciding by :attr:`update_number` (already counting this
        update) rather than by a host branch, so that it can be captured."""

    def sync_schedule(self, update_index: int) -> tuple[str, ...]:
        """Names of the groups update number ``update_index`` (0-based) will pass to its
        exchange, in order. A parameter server that computes no gradients itself follows this
        schedule to take part in the same collectives; override it when an update does not
        step every group (TD3's delayed actor)."""
        return tuple(self.groups)

    def stage_block(self, k: int) -> bool:
        """Host work before a block of ``k`` updates that draw their own minibatches, eager or
        captured alike (PPO: start a rollout, gather the next minibatch into the buffer its
        update reads). Returns whether the block's tensors have the shapes a capture of it may
        replay (``False``: run this block eagerly)."""
        return True

    def prepare_capture(self) -> None:
        """Host work due before the first capture (seeding a sampler)."""

    def fuse(self, compiler: Callable[..., Any] = torch.compile) -> None:
        """Compile the update's pieces (``algo.capture=fused``): a ``fusable`` algorithm's own."""
        raise NotImplementedError(f"{type(self).__name__} has no fused update")

    def fuse_once(self, compiler: Callable[..., Any] = torch.compile) -> bool:
        """:meth:`fuse` with ``compiler`` under ``algo.capture=fused``, once: at the warm-up before
        the training clock or the first capture, whichever comes first. Whether it fused now."""
        if self.capture != "fused" or self._fused:
            return False
        self._fused = True
        self.fuse(compiler)
        return True

    def warm_up(self) -> None:
        """Compile what updates will run (``algo.capture=fused``), before the training clock."""

    def capture_generators(self) -> tuple[torch.Generator, ...]:
        return ()  # device generators a captured update draws from besides the default one
