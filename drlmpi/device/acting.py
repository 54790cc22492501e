"""A learner acting for simulators (central inference): :class:`Acting` runs the algorithm's
batched forward pass, replayed from CUDA graphs where it can (:class:`CapturedForward`).

With ``beside_updates`` it acts from one of two copies of the algorithm's acting modules
(``Algorithm.acting_modules``: PPO's ``net``, DQN's ``q``, TD3's ``actor``) on a CUDA stream of
its own, so that a serve does not wait for the updates queued on the default stream:

* after queueing updates the learner calls :meth:`Acting.refresh`: a copy of the learning
  modules' parameters and buffers into the copy nobody acts with, queued behind those updates,
  and an event recorded after it;
* each call acts with the *published* copy, first publishing the refreshed one if its event has
  completed (a query: the host never waits for updates here);
* a refresh only ever writes the unpublished copy. A pass is finished (a host synchronisation,
  :meth:`Acting.finish`) before the next one starts, and copies are published only at a start,
  so once the host publishes a copy no pass on the other one is in flight.

The policy that acted is then the one of :attr:`Acting.published_at` updates (the learner's
policy lag counts from it), not necessarily the learner's latest. On the CPU (no streams) a
refresh copies at once and is published by the next call: the same code with nothing to
overlap, which the test suite runs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from drlmpi.device.forward import CapturedForward


def _tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(), *module.buffers()]


class HostActing:
    """An algorithm that acts on the host only (no :meth:`act_tensor`): it acts as it does, with
    no forward output; always the learner's current policy."""

    published_at: int | None = None
    beside_updates = False

    def __init__(self, algo: Any) -> None:
        self.algo = algo

    def refresh(self) -> None:
        pass

    def prepare(self) -> int:
        return 0

    def __call__(self, obs: np.ndarray, env_steps: int) -> tuple[Any, Any, Any]:
        return (*self.algo.act(obs, env_steps, explore=True), None)

    def start(self, obs: np.ndarray, env_steps: int) -> tuple[Any, Any, Any]:
        return self(obs, env_steps)  # (acting on the host: done at once)

    @staticmethod
    def finish(started: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        return started


class Acting:
    """``acting(obs, env_steps) -> (actions, extras, forward output)`` for a learner's
    simulators; :meth:`refresh` after queueing updates; :attr:`published_at` the updates the
    acting policy has seen (``None``: it is the learner's own, always current)."""

    def __init__(self, algo: Any, max_rows: int, mode: str, beside_updates: bool = False) -> None:
        self.algo = algo
        self.published_at: int | None = None
        layout, name = algo.layout, f"{algo.config_name(algo.cfg)} act"
        dtype = torch.uint8 if layout.packed else torch.float32
        self._copies: list[dict[str, torch.nn.Module]] = []
        stream = None
        if beside_updates:
            self._copies = [{key: copy.deepcopy(getattr(algo, key)).requires_grad_(False)
                             for key in algo.acting_modules} for _ in range(2)]
            self._sources = [t for key in algo.acting_modules for t in _tensors(getattr(algo, key))]
            self._targets = [[t for module in copies.values() for t in _tensors(module)]
                             for copies in self._copies]
            self.published_at = algo.updates
            self._published = 0
            self._pending: tuple[int, torch.cuda.Event | None, int] | None = None
            if algo.device.type == "cuda":
                stream = torch.cuda.Stream(algo.device, priority=-1)
                stream.wait_stream(torch.cuda.current_stream(algo.device))  # the copies' first contents
        passes = range(2) if beside_updates else range(1)
        self._forwards = [CapturedForward(self._pass(i if beside_updates else None), layout.obs_shape, dtype,
                                          algo.device, max_rows, mode, name, stream=stream)
                          for i in passes]

    def _pass(self, index: int | None) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(x: torch.Tensor) -> torch.Tensor:
            with self._acting_with(index):
                return self.algo.act_tensor(x, True)
        return forward

    @contextmanager
    def _acting_with(self, index: int | None) -> Iterator[None]:
        """The algorithm's acting modules swapped for copy ``index`` (``None``: its own) while a
        forward pass is traced or run eagerly."""
        if index is None:
            yield
            return
        algo, saved = self.algo, {key: getattr(self.algo, key) for key in self.algo.acting_modules}
        for key, module in self._copies[index].items():
            setattr(algo, key, module)
        try:
            yield
        finally:
            for key, module in saved.items():
                setattr(algo, key, module)

    def prepare(self) -> int:
        """Capture every pass at every batch size it may serve, before the run serves
        (:meth:`CapturedForward.prepare`); the number of graphs captured."""
        return sum(forward.prepare() for forward in self._forwards)

    @property
    def beside_updates(self) -> bool:
        return bool(self._copies)

    def refresh(self) -> None:
        """Queue the learning modules' current parameters into the unpublished copy (after the
        updates queued so far); it is published once that copy is done. While an earlier
        refresh is still queued it stands, and this one is left out: replacing it by one
        further behind kept a learner whose updates queue without pause from ever publishing
        (a policy lag of thousands of updates); the next refresh after it is published brings
        the copy up to date."""
        if not self._copies:
            return
        if self._pending is not None:
            _, pending, _ = self._pending
            if pending is not None and not pending.query():
                return
        target = 1 - self._published
        torch._foreach_copy_(self._targets[target], self._sources)
        event = None
        if self.algo.device.type == "cuda":
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.algo.device))
        self._pending = (target, event, self.algo.updates)

    def _poll(self) -> int:
        if self._pending is not None:
            target, event, updates = self._pending
            if event is None or event.query():
                self._published, self.published_at, self._pending = target, updates, None
        return self._published

    def __call__(self, obs: np.ndarray, env_steps: int) -> tuple[Any, Any, Any]:
        return self.finish(self.start(obs, env_steps))

    def start(self, obs: np.ndarray, env_steps: int) -> tuple[Any, Any, int]:
        """Queue the forward pass over ``obs`` (:meth:`CapturedForward.start`) with the policy
        published now; :meth:`finish` gives what a call gives. One pass in flight at a time."""
        forward = self._forwards[self._poll()] if self._copies else self._forwards[0]
        return forward, forward.start(obs), env_steps

    def finish(self, started: tuple[Any, Any, int]) -> tuple[Any, Any, Any]:
        """``(actions, extras, forward output)`` of the pass :meth:`start` queued."""
        forward, handle, env_steps = started
        out = forward.finish(handle)
        return (*self.algo.finish_act(out, env_steps, True), out)
