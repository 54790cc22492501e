"""The replay-based algorithms' shared machinery (DQN, TD3): the update-to-data ratio, sampling on
the learner's device, and updates run eagerly or replayed from a captured graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from drlmpi.algos.base import Algorithm
from drlmpi.algos.gradients import LossGradient
from drlmpi.config.errors import ConfigError
from drlmpi.envs.spec import EnvSpec


class OffPolicyAlgorithm(Algorithm):
    """An algorithm that learns from a replay buffer with an update-to-data ratio (DQN, TD3).

    Reads ``batch_size``, ``buffer_size``, ``learning_starts``, ``updates_per_step`` and
    ``updates_per_graph`` from the config; the replay is allocated on learner instances only,
    on the learner's device.

    Subclasses implement :meth:`learn` (losses, backward and the exchange of the groups a
    schedule names, on a given minibatch) and :meth:`after_update_device` (target networks:
    device work only, deciding by the device counter :attr:`update_number` rather than by a
    host branch, so that it can be captured). :meth:`run_updates` then runs them eagerly or
    replays a captured graph (one per distinct sequence of :meth:`sync_schedule` entries: TD3
    has a critic-only graph and a critic+actor+targets graph). With ``updates_per_graph=K`` a
    batch of due updates runs in blocks of K updates (the remainder one by one).
    """

    kind = "off_policy"
    capturable = True
    fusable = True

    def __init__(self, spec: EnvSpec, cfg: Mapping[str, Any], device: str | torch.device,
                 seed: int, learner: bool) -> None:
        super().__init__(spec, cfg, device, seed, learner)
        from drlmpi.data.replay import ReplayBuffer

        cfg = self.cfg
        self.batch_size = cfg.batch_size
        self.learning_starts = cfg.learning_starts
        self.updates_per_step = cfg.updates_per_step
        self.updates_per_graph = cfg.updates_per_graph
        if self.updates_per_graph < 1:
            raise ConfigError(f"algo.updates_per_graph must be >= 1, got {self.updates_per_graph}")
        self._update_credit = 0.0
        self.replay = (ReplayBuffer(self.layout, cfg.buffer_size, self.device, seed)
                       if learner else None)
        self._sampler_seeded = False
        #: the losses whose gradients :meth:`learn` takes (:class:`~drlmpi.algos.gradients.LossGradient`)
        self.gradients: tuple[LossGradient, ...] = ()

    @classmethod
    def storage_bytes(cls, spec: EnvSpec, cfg: Mapping[str, Any]) -> int:
        from drlmpi.data.replay import replay_bytes

        return replay_bytes(cls.experience_layout(spec), cls.settings_of(cfg).buffer_size)

    def warm_up_rows(self) -> int:
        return self.learning_starts

    def minibatch_rows(self) -> int:
        return self.batch_size

    def row_buffer(self, n: int) -> np.ndarray:
        return self.replay.staging.host_rows(n)

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
    def next_batch(self) -> dict[str, torch.Tensor]:
        """A minibatch from the replay, sampled on the learner's device (the same preallocated
        tensors every call). The sampler is seeded from :attr:`rng` at the first call, so a
        topology that reseeds ``rng`` per rank gets per-rank minibatches."""
        self.prepare_capture()
        return self.replay.sample(self.batch_size)

    def prepare_capture(self) -> None:
        """Seed the replay's sampler (a host operation, so before any capture); with
        ``algo.capture=fused``, :meth:`fuse` the update once."""
        if not self._sampler_seeded:
            self.replay.generator.manual_seed(int(self.rng.integers(2**62)))
            self._sampler_seeded = True
        self.fuse_once()

    def fuse(self, compiler: Callable[..., Any] = torch.compile) -> None:
        """Compile the update's pieces (``algo.capture=fused``; tests pass an identity
        ``compiler``): each loss's gradient (:attr:`gradients`), each optimizer's clipping and
        step, the replay's sampling; subclasses add their own (DQN's target copy)."""
        for gradient in self.gradients:
            gradient.fuse(compiler)
        for group in self.groups.values():
            group.fuse(compiler)
        self.replay.fuse(compiler)

    def warm_up(self, compiler: Callable[..., Any] = torch.compile) -> None:
        """With ``algo.capture=fused``, :meth:`fuse` and compile every piece now (a learner calls
        this before its training clock starts: compiling takes seconds, once per process), on
        the tensors the updates will use or scratch copies of those they write; no state
        changes, no random draw. The first updates then find the compiled programs."""
        if self.replay is None or not self.fuse_once(compiler):
            return
        batch = self.replay.warm_up(self.batch_size)
        for group in self.groups.values():
            group.warm_up()
        self.warm_up_losses(batch)
        self.synchronize()

    def warm_up_losses(self, batch: Mapping[str, torch.Tensor]) -> None:
        """Take each fused loss's gradient once on ``batch`` (:meth:`warm_up`)."""

    def capture_generators(self) -> tuple[torch.Generator, ...]:
        return (self.replay.generator,)
