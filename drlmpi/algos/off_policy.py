"""The replay-based algorithms' shared machinery (DQN, TD3): the update-to-data ratio, sampling on
the learner's device, and updates run eagerly or replayed from a captured graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from drlmpi.algos.base import Algorithm
from drlmpi.algos.sync import GradSync, local_sync
from drlmpi.config.errors import ConfigError
from drlmpi.device.capture import CapturedUpdate, exchange_of
from drlmpi.device.metrics import Metrics
from drlmpi.envs.spec import EnvSpec


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
        from drlmpi.data.replay import ReplayBuffer

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
        from drlmpi.data.replay import replay_bytes

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
        around it: :class:`~drlmpi.device.capture.CapturedUpdate`), eager otherwise."""
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
