"""Gradient exchanges for tests that watch an update from inside (one process, no MPI)."""

from __future__ import annotations

from collections.abc import Callable

from drlmpi.algos.exchange import GradientExchange


class Recording(GradientExchange):
    """Records the networks it is entered for (as a collective would be), calls ``hook(name,
    group)`` if given, and lets the group step with its own gradients."""

    def __init__(self, hook: Callable | None = None) -> None:
        self.calls: list[str] = []
        self.hook = hook

    def exchange(self, name, group) -> None:
        self.calls.append(name)
        if self.hook is not None:
            self.hook(name, group)


class HostExchange(GradientExchange):
    """An exchange through host memory, as the MPI exchanges do (one rank, no MPI).

    ``steps_locally``: the gradients go through host memory (scaled, as an average would) and
    the local optimizer steps; otherwise the exchange itself computes new parameters on the host
    (plain SGD, a stand-in for a parameter server's round trip).
    """

    def __init__(self, steps_locally: bool) -> None:
        self.steps_locally = steps_locally
        self.calls: list[str] = []

    def exchange(self, name, group) -> None:
        self.calls.append(name)
        grads = group.flat.grads_numpy().copy()
        if self.steps_locally:
            group.flat.load_grads(grads * 0.5)
        else:
            group.flat.load_params(group.flat.params_numpy() - 0.01 * grads)
