"""Simulated cost: :class:`SimCost` burns real CPU time per step (a busy loop, not a sleep), so
the simulator-bound regime of the DQN paper (its expensive Box Slider simulator) can be reproduced
with cheap classic-control environments: ``env.sim_cost_ms=2``. ALE banks burn it per bank step
with :func:`burn_cpu` (:mod:`drlmpi.envs.atari_bank`).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym


class SimCost(gym.Wrapper):
    """Adds ``cost_ms`` milliseconds of CPU-bound busy work to every ``step``.

    The loop runs until this thread has consumed ``cost_ms`` of *CPU* time (``thread_time``),
    not wall time: like a real physics simulator, a step costs a fixed amount of computation, so
    ranks oversubscribing a machine really compete for cores and each step takes longer in wall
    time when they do. A ``time.sleep`` would let ranks overlap for free.
    """

    def __init__(self, env: gym.Env, cost_ms: float) -> None:
        super().__init__(env)
        self.cost_s = cost_ms / 1000.0

    def step(self, action: Any):
        burn_cpu(self.cost_s)
        return self.env.step(action)


def burn_cpu(seconds: float) -> None:
    """Busy work until this thread has used ``seconds`` of CPU time (:class:`SimCost`)."""
    deadline = time.thread_time() + seconds
    x = 1.0
    while time.thread_time() < deadline:
        for _ in range(200):
            x = x * 1.0000001 + 1e-9
