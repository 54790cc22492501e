"""A policy that acts uniformly at random and never learns: the raw-stepping ceiling.

Under any topology it measures how fast the simulators (and the messages between ranks) can go
when no learner holds them back: ``algo=random topology=allgather world_size=N`` steps N
environments independently, with only the per-round step count exchanged. It has no networks,
stores nothing and never has an update due.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from drlmpi.algos.base import Algorithm
from drlmpi.algos.params import ParamGroup
from drlmpi.config.scopes import RandomSettings
from drlmpi.envs.spec import EnvSpec


class RandomPolicy(Algorithm):
    """Uniform random actions (``action_space``-shaped); no parameters, no updates."""

    kind = "off_policy"
    settings_class = RandomSettings
    takes_images = True
    updates_anything = False

    def __init__(self, spec: EnvSpec, cfg: RandomSettings | Mapping[str, Any],
                 device: str | torch.device = "cpu", seed: int = 0, learner: bool = True) -> None:
        super().__init__(spec, cfg, device, seed, learner)
        # An empty flat buffer: topologies still "send weights", of zero length.
        self.policy = ParamGroup(nn.Sequential(), lr=0.0, with_optimizer=False)
        self.groups = {}
        self.low = np.asarray(spec.action_low, dtype=np.float32)
        self.high = np.asarray(spec.action_high, dtype=np.float32)

    def act(self, obs: np.ndarray, env_steps: int, explore: bool) -> tuple[np.ndarray, None]:
        n = len(obs)
        if self.spec.discrete:
            return self.rng.integers(0, self.spec.n_actions, n).astype(np.float32)[:, None], None
        shape = (n, self.spec.action_dim)
        return self.rng.uniform(self.low, self.high, shape).astype(np.float32), None

    def observe(self, rows: np.ndarray) -> None:
        """Experience is counted by the learner; nothing is stored."""

    def updates_due(self, new_steps: int) -> int:
        return 0

    def next_batch(self) -> dict:
        raise RuntimeError("algo=random never learns: no update is ever due")
