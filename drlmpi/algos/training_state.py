"""What a learner saves and restores (checkpoints, ``policy.pt``): networks, optimizer states,
the update counter, random states and the experience store (:class:`TrainingState`, a part of
:class:`~drlmpi.algos.base.Algorithm`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from drlmpi.algos.params import ParamGroup, under


def _cpu(obj: Any) -> Any:
    """``obj`` with every tensor in it copied to the CPU (dicts and lists walked)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


class TrainingState:
    """The persistence half of an algorithm: it reads :attr:`groups` (every trained network),
    :attr:`updates`, :attr:`rng` and :attr:`device`; algorithms with target networks extend
    :meth:`state_dict` and :meth:`load_state_dict`, and their stores :meth:`storage_state`."""

    groups: dict[str, ParamGroup]
    updates: int
    rng: np.random.Generator
    device: torch.device

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
            self.groups[name].load_optimizer_state(opt_state)
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
            sub = under(state, name)
            with torch.no_grad():
                for key, tensor in group.module.state_dict().items():
                    tensor.copy_(sub[key])
