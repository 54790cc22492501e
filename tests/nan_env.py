"""A CartPole whose simulator breaks: from its ``nan_after``-th step on, ``field`` of every step
is NaN (``observation``, ``reward``) or infinite (``observation_inf``). Used to test that a run
stops on experience that is not finite instead of training its networks into NaN."""

from __future__ import annotations

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.registration import register


class NaNCartPole(CartPoleEnv):
    """CartPole-v1 whose observations (or rewards) turn NaN after ``nan_after`` steps."""

    def __init__(self, nan_after: int = 1000, field: str = "observation", **kwargs):
        super().__init__(**kwargs)
        self.nan_after, self.field = int(nan_after), field
        self.steps_taken = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps_taken += 1
        if self.steps_taken >= self.nan_after:
            if self.field == "reward":
                reward = float("nan")
            else:
                obs = np.full_like(obs, np.inf if self.field == "observation_inf" else np.nan)
        return obs, reward, terminated, truncated, info


register(id="NaNCartPole-v0", entry_point=NaNCartPole, max_episode_steps=500)
