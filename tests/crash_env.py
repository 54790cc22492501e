"""A CartPole that raises after ``crash_after`` steps: used to test that a crashed rank takes
the whole MPI job down with a clear message instead of leaving the others waiting."""

from __future__ import annotations

from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.registration import register


class CrashingCartPole(CartPoleEnv):
    """CartPole-v1 that raises ``RuntimeError`` on its ``crash_after``-th step."""

    def __init__(self, crash_after: int = 100, **kwargs):
        super().__init__(**kwargs)
        self.crash_after = crash_after
        self.steps_taken = 0

    def step(self, action):
        self.steps_taken += 1
        if self.steps_taken >= self.crash_after:
            raise RuntimeError(f"simulated simulator crash after {self.steps_taken} steps")
        return super().step(action)


register(id="CrashingCartPole-v0", entry_point=CrashingCartPole, max_episode_steps=500)
