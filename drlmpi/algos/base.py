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
Metrics come back as :class:`~drlmpi.device.Metrics`: one device tensor, floats when read.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from drlmpi.comm import ExperienceLayout, FlatParams
from drlmpi.device import CAPTURE_MODES, CapturedUpdate, Metrics, exchange_of, resolve_capture, synchronize
from drlmpi.envs import EnvSpec


class ConfigError(ValueError):
    """A configuration that cannot run (reported in one line before any rank starts work)."""


def host_available_bytes() -> int | None:
    """The host memory available to new allocations (``MemAvailable`` of /proc/meminfo;
    ``None`` where that file does not exist)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


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

    On CUDA the optimizer is built with ``capturable=True`` (its step counter lives on the
    device), so the same optimizer state serves eager updates and captured ones.
    """

    def __init__(self, module: nn.Module, lr: float, max_grad_norm: float | None = None,
                 adam_eps: float = 1e-8, with_optimizer: bool = True) -> None:
        self.module = module
        self.flat = FlatParams(module)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self.optimizer = None
        #: the gradient norm before clipping of the latest step, a device scalar written in
        #: place by :meth:`apply_gradients` (so a captured update writes it too); ``None`` when
        #: the group does not clip (the norm is then never computed).
        self.grad_norm: torch.Tensor | None = None
        if with_optimizer:
            # The optimizer sees ONE tensor, the flat buffer (whose .grad is the flat gradient
            # buffer): Adam's update is then a handful of vector operations over the whole
            # network instead of a loop over its parameter tensors.
            self.flat.params.grad = self.flat.grads
            extra = {"capturable": True, "fused": True} if self.flat.params.is_cuda else {}
            self.optimizer = torch.optim.Adam([self.flat.params], lr=float(lr), eps=float(adam_eps), **extra)
            # Eager steps of a capturable optimizer are intended here (warm-up before a capture,
            # updates with gradient collectives): silence torch's one-time advice against them.
            self.optimizer._warned_capturable_if_run_uncaptured = True
            if self.max_grad_norm is not None:
                self.grad_norm = torch.full((), float("nan"), device=self.flat.params.device)

    def backward(self, loss: torch.Tensor) -> None:
        """Zero the flat gradients and backpropagate ``loss`` into them."""
        self.flat.zero_grad()
        loss.backward()

    def apply_gradients(self) -> None:
        """Clip (if configured) and take one optimizer step with the current gradients.

        Clipping is branch-free, ``grads *= min(1, max_norm / (norm + 1e-6))``: no host
        synchronisation on a device (and exactly the old ``if scale < 1`` result). The norm is
        computed into :attr:`grad_norm` (``out=``: no extra kernel, and captured with the step)."""
        if self.optimizer is None:
            raise RuntimeError("this ParamGroup was built without an optimizer (acting only)")
        if self.max_grad_norm is not None:
            grads = self.flat.grads
            norm = torch.linalg.vector_norm(grads, out=self.grad_norm)
            grads.mul_((self.max_grad_norm / (norm + 1e-6)).clamp_(max=1.0))
        self.optimizer.step()


def _cpu(obj: Any) -> Any:
    """``obj`` with every tensor in it copied to the CPU (dicts and lists walked)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def flat_target(module: nn.Module) -> tuple[nn.Module, torch.Tensor]:
    """A frozen copy of ``module`` (a target network) whose parameters are views into one flat
    buffer, returned with it: a hard copy is then ``flat.copy_(online)`` and a Polyak step
    ``flat.lerp_(online, tau)``, one kernel each, in the online :class:`FlatParams` order."""
    target = copy.deepcopy(module)
    params = [p for p in target.parameters() if p.requires_grad]
    flat = torch.cat([p.detach().reshape(-1) for p in params]) if params else torch.zeros(0)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    target.requires_grad_(False)
    return target, flat


GradSync = Callable[[str, ParamGroup], None]
"""Called as ``sync(name, group)`` after ``backward``; it must leave ``group``'s parameters
updated. The local version just calls ``group.apply_gradients()``; distributed versions reduce
``group.flat.grads`` across ranks first (or apply on a server and broadcast parameters)."""


def local_sync(name: str, group: ParamGroup) -> None:
    """The single-process :data:`GradSync`: step with this rank's own gradients."""
    group.apply_gradients()


class CheckedSync:
    """A :data:`GradSync` wrapper that verifies the networks synced against a schedule (see
    :meth:`Algorithm.checked_update`). It keeps the wrapped sync's host part
    (``exchange``/``steps_locally``, :func:`~drlmpi.device.exchange_of`), so an update whose
    collectives sit between captured segments is checked at each exchange, before it runs."""

    def __init__(self, sync: GradSync, index: int, expected: tuple[str, ...],
                 mismatch: Callable[[int, tuple[str, ...], tuple[str, ...]], str]) -> None:
        self.sync, self.index, self.expected, self.mismatch = sync, index, expected, mismatch
        self.seen: list[str] = []
        self.steps_locally = getattr(sync, "steps_locally", None)

    def _check(self, name: str) -> None:
        if len(self.seen) >= len(self.expected) or self.expected[len(self.seen)] != name:
            raise SyncScheduleError(self.mismatch(self.index, self.expected, (*self.seen, name)))
        self.seen.append(name)

    def __call__(self, name: str, group: ParamGroup) -> None:
        self._check(name)
        self.sync(name, group)

    def exchange(self, name: str, group: ParamGroup) -> None:
        self._check(name)
        self.sync.exchange(name, group)

    def finish(self) -> None:
        """Raise if the update returned with a scheduled sync missing."""
        if len(self.seen) != len(self.expected):
            raise SyncScheduleError(self.mismatch(self.index, self.expected, tuple(self.seen)))


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
        capture = str(cfg.get("capture", "auto"))
        if capture not in CAPTURE_MODES:
            raise ConfigError(f"algo.capture must be one of {list(CAPTURE_MODES)}, got {capture!r}")
        #: the capture mode updates use: ``graph``, ``compile`` or ``off`` (``auto`` resolved).
        self.capture = resolve_capture(capture, self.device) if learner else "off"

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


class OffPolicyAlgorithm(Algorithm):
    """An algorithm that learns from a replay buffer with an update-to-data ratio (DQN, TD3).

    Reads ``batch_size``, ``buffer_size``, ``learning_starts``, ``updates_per_step`` and
    ``updates_per_graph`` from the config; the replay is allocated on learner instances only,
    on the learner's device.

    Subclasses implement :meth:`learn` (losses, backward and ``sync`` of the groups a schedule
    names, on a given minibatch) and :meth:`after_update_device` (target networks: device work
    only, deciding by the device counter :attr:`update_number` rather than by a host branch, so
    that it can be captured). :meth:`update` then either runs them eagerly or replays a
    captured graph (one per distinct run of :meth:`sync_schedule` entries: TD3 has a
    critic-only graph and a critic+actor+targets graph). With ``updates_per_graph=K`` the
    learner's batches of due updates replay graphs of K updates each (the remainder one by one).
    """

    kind = "off_policy"
    #: names of the values :meth:`learn` returns, in order (an instance appends the names of
    #: :meth:`~Algorithm.grad_norms` when its groups clip).
    metric_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, spec: EnvSpec, cfg: Mapping[str, Any], device: str | torch.device,
                 seed: int, learner: bool) -> None:
        super().__init__(spec, cfg, device, seed, learner)
        from drlmpi.replay import ReplayBuffer

        self.batch_size = int(cfg["batch_size"])
        self.learning_starts = int(cfg["learning_starts"])
        self.updates_per_step = float(cfg["updates_per_step"])
        self.updates_per_graph = int(cfg.get("updates_per_graph", 1))
        if self.updates_per_graph < 1:
            raise ConfigError(f"algo.updates_per_graph must be >= 1, got {self.updates_per_graph}")
        self._update_credit = 0.0
        self.replay = (ReplayBuffer(self.layout, int(cfg["buffer_size"]), self.device, seed)
                       if learner else None)
        #: the number of updates done, as a device integer: :meth:`after_update_device` reads
        #: it (a captured graph of several updates advances it itself; the host sets it from
        #: :attr:`updates` before each update or replay).
        self.update_number = torch.zeros((), dtype=torch.int64, device=self.device)
        self._sampler_seeded = False
        self._captures: dict[tuple, CapturedUpdate] = {}

    @classmethod
    def storage_bytes(cls, spec: EnvSpec, cfg: Mapping[str, Any]) -> int:
        from drlmpi.replay import replay_bytes

        return replay_bytes(cls.experience_layout(spec), int(cfg["buffer_size"]))

    def observe(self, rows: np.ndarray) -> None:
        self.replay.add(rows)

    def storage_state(self) -> dict[str, Any]:
        return {"replay": self.replay.state(), "update_credit": self._update_credit,
                "sampler_seeded": self._sampler_seeded}

    def load_storage_state(self, state: Mapping[str, Any]) -> None:
        self.replay.load_state(state["replay"])
        self._update_credit = float(state["update_credit"])
        self._sampler_seeded = bool(state["sampler_seeded"])

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

    # -- updates ---------------------------------------------------------------------------
    def sample(self) -> dict[str, torch.Tensor]:
        """A minibatch from the replay, sampled on the learner's device (the same preallocated
        tensors every call). The sampler is seeded from :attr:`rng` at the first call, so a
        topology that reseeds ``rng`` per rank gets per-rank minibatches."""
        self._seed_sampler()
        return self.replay.sample(self.batch_size)

    def _seed_sampler(self) -> None:
        if not self._sampler_seeded:
            self.replay.generator.manual_seed(int(self.rng.integers(2**62)))
            self._sampler_seeded = True

    def _capturable(self, sync: GradSync) -> bool:
        return self.capture != "off" and (sync is local_sync or exchange_of(sync) is not None)

    def update(self, sync: GradSync = local_sync) -> Mapping[str, float]:
        """One update on a sampled minibatch: replayed from a capture when :attr:`capture` is
        on and ``sync`` is local or has a host exchange (then the capture is cut into segments
        around it: :class:`~drlmpi.device.CapturedUpdate`), eager otherwise."""
        if self._capturable(sync):
            return self._captured_updates(1, sync)
        return self.update_on(self.sample(), sync)

    def run_updates(self, n: int, sync: GradSync = local_sync) -> Mapping[str, float]:
        """``n`` updates; with ``updates_per_graph=K > 1`` and local gradients, ``n // K``
        replays of a K-update graph, then the remainder one update per replay."""
        k = self.updates_per_graph
        if k <= 1 or sync is not local_sync or self.capture == "off":
            return super().run_updates(n, sync)
        metrics: Mapping[str, float] = {}
        while n > 0:
            block = k if n >= k else 1
            metrics = self._captured_updates(block, sync)
            n -= block
        return metrics

    def update_on(self, batch: Mapping[str, torch.Tensor],
                  sync: GradSync = local_sync) -> Mapping[str, float]:
        """One eager update on a given minibatch (``obs``, ``action``, ``reward``, ``next_obs``,
        ``terminated``): :meth:`learn`, then the after-update hooks."""
        synced = tuple(self.sync_schedule(self.updates))
        self.update_number.fill_(self.updates)
        values = self._learn_and_follow(batch, sync, synced)
        self.updates += 1
        return Metrics(self.metric_names, values)

    def _learn_and_follow(self, batch: Mapping[str, torch.Tensor], sync: GradSync,
                          synced: tuple[str, ...]) -> torch.Tensor:
        values = self.learn(batch, sync, synced)
        self.update_number.add_(1)
        self.after_update_device(synced)
        return values

    def _captured_updates(self, k: int, sync: GradSync) -> Mapping[str, float]:
        schedules = tuple(tuple(self.sync_schedule(self.updates + j)) for j in range(k))
        key = (schedules, getattr(sync, "steps_locally", None))
        runner = self._captures.get(key)
        if runner is None:
            def body(sync: GradSync, schedules: tuple[tuple[str, ...], ...] = schedules) -> torch.Tensor:
                for synced in schedules:
                    values = self._learn_and_follow(self.sample(), sync, synced)
                return values

            label = f"{self.config_name(self.cfg)} {' '.join('+'.join(s) for s in schedules)}"
            self._seed_sampler()  # before any capture: seeding is a host operation
            runner = self._captures[key] = CapturedUpdate(
                body, self.capture, self.device, label, generators=(self.replay.generator,))
        self.update_number.fill_(self.updates)
        values = runner(sync)
        self.updates += k
        return Metrics(self.metric_names, values)

    def learn(self, batch: Mapping[str, torch.Tensor], sync: GradSync,
              synced: tuple[str, ...]) -> torch.Tensor:
        """Losses on ``batch``, backward and ``sync(name, group)`` for each name in ``synced``
        (in order); returns the metrics as one 1-D tensor (:attr:`metric_names`). It must
        not touch Python counters or read device values on the host: it may be captured."""
        raise NotImplementedError

    def after_update_device(self, synced: tuple[str, ...]) -> None:
        """Target-network work after an update with this schedule (a Polyak step, or a hard
        copy when :attr:`update_number` says so): device work only, captured with the update."""

    def after_update(self, synced: tuple[str, ...]) -> None:
        self.update_number.fill_(self.updates)
        self.after_update_device(synced)
