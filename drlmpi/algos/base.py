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

On a device (``device=cuda[:N]``) the learner's storage, networks and optimizer state live on
the device, and with ``algo.capture`` (``auto``: CUDA graphs on CUDA, eager on the CPU) an
update whose gradients stay local (:func:`local_sync`) is replayed from a captured graph:
sampling, forward, loss, backward, clipping, optimizer step and the target update, with no host
synchronisation. An update whose ``sync`` reduces gradients across ranks through a host exchange
is replayed as graph segments with the exchange between them (a collective cannot be inside a
graph); any other sync runs eagerly. All paths share the same tensors and optimizer state.
Metrics come back as :class:`~drlmpi.device.metrics.Metrics`: one device tensor, floats when read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from drlmpi.algos.params import ParamGroup
from drlmpi.algos.sync import CheckedSync, GradSync, local_sync
from drlmpi.config.errors import ConfigError
from drlmpi.data.layout import ExperienceLayout
from drlmpi.device.capture import resolve_capture
from drlmpi.device.memory import host_available_bytes
from drlmpi.device.staging import synchronize
from drlmpi.envs.spec import EnvSpec


def _cpu(obj: Any) -> Any:
    """``obj`` with every tensor in it copied to the CPU (dicts and lists walked)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj
"""Called as ``sync(name, group)`` after ``backward``; it must leave ``group``'s parameters
updated. The local version just calls ``group.apply_gradients()``; distributed versions reduce
``group.flat.grads`` across ranks first (or apply on a server and broadcast parameters)."""


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
    #: whether it takes uint8 image observations (through :mod:`drlmpi.algos.encoders`).
    takes_images: ClassVar[bool] = False

    #: the config key that sizes the learner's device storage (see :meth:`storage_bytes`).
    storage_option: ClassVar[str] = "buffer_size"
    #: updates :meth:`run_updates` may run as one unit (:class:`OffPolicyAlgorithm` replays a
    #: captured graph of ``algo.updates_per_graph`` updates); callers that split a batch of
    #: updates split it into multiples of this.
    updates_per_graph: int = 1

    groups: dict[str, ParamGroup]
    policy: ParamGroup

    def __init__(self, spec: EnvSpec, cfg: Mapping[str, Any], device: str | torch.device,
                 seed: int, learner: bool) -> None:
        self.check_spec(spec)
        if spec.image and not self.takes_images:
            raise ConfigError(f"algo={self.config_name(cfg)} takes flat vector observations, but "
                              f"{spec.env_id} has an {spec.describe_obs()}: use algo=ppo or algo=dqn "
                              f"(CNN encoders)")
        self.spec = spec
        self.cfg = cfg
        self.device = torch.device(device)
        self.learner = learner
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.layout = self.experience_layout(spec)
        self.updates = 0
        #: the capture mode updates use: ``graph``, ``compile`` or ``off`` (``auto`` resolved;
        #: the schema refuses any other value of ``algo.capture``).
        self.capture = resolve_capture(str(cfg.get("capture", "auto")), self.device) if learner else "off"

    def set_progress(self, fraction: float) -> None:
        """The share of the run's budget used so far (0 to 1), given before each batch of
        updates: schedules that follow the budget (PPO's ``lr_schedule=linear``) read it."""

    def reseed(self, seed: int) -> None:
        """Reseed exploration and sampling (``rng`` and torch's generator), keeping the networks:
        data-parallel ranks build identical networks from one seed, then explore apart."""
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)

    def rollout_updates(self) -> int | None:
        """The updates one rollout of the configured size entitles (on-policy algorithms: what a
        topology bounds policy lag by); ``None`` for algorithms that learn from a replay."""
        return None

    @classmethod
    def experience_layout(cls, spec: EnvSpec) -> ExperienceLayout:
        """The columns of this algorithm's experience rows for ``spec`` (base + its extras)."""
        return ExperienceLayout(spec.obs_dim, spec.action_dim, cls.extra_columns,
                                spec.obs_shape, spec.obs_dtype)

    @classmethod
    def config_name(cls, cfg: Mapping[str, Any]) -> str:
        """The name messages use for this algorithm (``cfg.name``, else the class name)."""
        return str(cfg.get("name", cls.__name__.lower()))

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
                lr = group.optimizer.param_groups[0]["lr"]
                key = "lr" if len(self.groups) == 1 else f"{name}_lr"
                out[key] = float(lr.item() if isinstance(lr, torch.Tensor) else lr)
        return out

    # -- checks ---------------------------------------------------------------------------
    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        """Raise :class:`ConfigError` if this algorithm cannot handle ``spec``'s spaces."""

    @classmethod
    def storage_bytes(cls, spec: EnvSpec, cfg: Mapping[str, Any]) -> int:
        """Bytes of learner storage (replay or rollout rows) this config allocates on the
        learner's device; networks and optimizer state are not counted (megabytes)."""
        return 0

    @classmethod
    def check_storage(cls, spec: EnvSpec, cfg: Mapping[str, Any], device: str | torch.device,
                      free_bytes: int | None = None, headroom: float = 0.9) -> None:
        """Refuse at start-up, in one line, storage that cannot fit where the learner keeps it:
        more than ``headroom`` of the free memory (``free_bytes``, else what CUDA reports for a
        CUDA ``device``, or the host's available memory for the CPU). The message names the
        size, the per-row bytes and the option that sets it."""
        device = torch.device(device)
        need = cls.storage_bytes(spec, cfg)
        if free_bytes is None:
            free_bytes = (torch.cuda.mem_get_info(device)[0] if device.type == "cuda"
                          else host_available_bytes())
            if free_bytes is None:  # not knowable here: nothing to refuse
                return
        if need > headroom * free_bytes:
            option = cls.storage_option
            where = device if device.type == "cuda" else "the host"
            hint = "or use device=cpu" if device.type == "cuda" else "or use fewer learner ranks"
            raise ConfigError(
                f"algo={cls.config_name(cfg)}: its storage needs {need / 2**30:.2f} GiB in {where} "
                f"(algo.{option}={cfg[option]} rows x {cls.experience_layout(spec).row_bytes} bytes, "
                f"observations {spec.describe_obs()}) but only {free_bytes / 2**30:.2f} GiB is free: "
                f"lower algo.{option} {hint}"
            )

    # -- acting (simulator side) ------------------------------------------------------------
    @abstractmethod
    def act(self, obs: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Actions for a batch of observations.

        Args:
            obs: ``(n_envs, *obs_shape)``: float32 vectors or uint8 images.
            env_steps: the job-wide environment step count (drives exploration schedules).
            explore: ``False`` for greedy evaluation.
        Returns:
            ``actions`` ``(n_envs, action_dim)`` float32 (a discrete action as its index) and the
            extra columns ``(n_envs, sum of extra widths)`` or ``None``.
        """

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
        checked = CheckedSync(sync, self.updates, tuple(self.sync_schedule(self.updates)),
                              self._schedule_mismatch)
        metrics = self.update(checked)
        checked.finish()
        return metrics

    def run_updates(self, n: int, sync: GradSync = local_sync) -> Mapping[str, float]:
        """``n`` updates (each :meth:`checked_update`); returns the last one's metrics. The
        learner calls this with every batch of due updates, so an algorithm may run several
        of them at once (:class:`OffPolicyAlgorithm`: several updates per captured graph)."""
        metrics: Mapping[str, float] = {}
        for _ in range(n):
            metrics = self.checked_update(sync)
        return metrics

    def _schedule_mismatch(self, index: int, expected: tuple[str, ...], seen: tuple[str, ...]) -> str:
        return (f"algo={self.config_name(self.cfg)} update {index} synced {list(seen)} but "
                f"sync_schedule({index}) promised {list(expected)}: ranks averaging gradients would "
                f"wait for each other forever. Make sync_schedule() return exactly the networks "
                f"update() syncs, in order")

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

    @property
    def queues_updates(self) -> bool:
        """Whether updates are queued on an accelerator and finish after the call returns."""
        return self.device.type == "cuda"

    def synchronize(self) -> None:
        """Wait for the updates queued on the learner's device (no-op on the CPU): a caller
        timing updates calls this once after a batch of them, never per update."""
        synchronize(self.device)

    # -- persistence -------------------------------------------------------------------------
    def training_state(self, with_storage: bool = True) -> dict[str, Any]:
        """Everything a learner needs to continue exactly where it is: networks and target
        networks, optimizer states, the update counter, the random states (numpy, torch CPU, the
        device's) and, ``with_storage``, the replay or rollout contents. Tensors (on the CPU),
        numbers, strings, lists and dicts only: it loads with ``torch.load(weights_only=True)``."""
        rng: dict[str, Any] = {"numpy": self.rng.bit_generator.state, "torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {
            "networks": self.state_dict(),
            "optimizers": {name: _cpu(group.optimizer.state_dict())
                           for name, group in self.groups.items() if group.optimizer is not None},
            "updates": self.updates,
            "rng": rng,
            "storage": self.storage_state() if with_storage else None,
        }

    def load_training_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`training_state` (a run saved without storage starts it empty)."""
        self.load_state_dict(state["networks"])
        for name, opt_state in state["optimizers"].items():
            self.groups[name].optimizer.load_state_dict(opt_state)
        self.updates = int(state["updates"])
        self.rng.bit_generator.state = state["rng"]["numpy"]
        torch.set_rng_state(state["rng"]["torch"])
        if self.device.type == "cuda" and "cuda" in state["rng"]:
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        if state.get("storage") is not None:
            self.load_storage_state(state["storage"])

    def storage_state(self) -> dict[str, Any]:
        """The learner's experience (replay rows, pending and frozen rollouts) and its counters."""
        return {}

    def load_storage_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`storage_state`."""

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
