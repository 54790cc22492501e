"""Tiny learnable tasks for tests: a policy learns them in a few hundred updates, and only if
observations, actions, rewards, next observations and episode ends all reach the update intact.

``tests.tiny_env:Cue-v0`` (discrete, 2 actions) and ``tests.tiny_env:CueBox-v0`` (continuous,
one action in [-1, 1]). Every step shows a random cue ``c`` in ``obs[0]``; the action is scored
against it (discrete: 1 if the action names the cue's sign, else 0; continuous:
``1 - |action - c|``), but the score is paid as the reward of the *next* step, and shown in
``obs[1]`` meanwhile. An action's value is therefore visible only through the next observation:
a learner that bootstraps from a wrong ``next_obs``, or pairs an action with the wrong cue,
does not learn. An episode lasts ``episode_steps`` steps (truncated); the first step pays 0.

Returns (``episode_steps=8``): 7 at best; a uniformly random policy about 3.5 (discrete) or
2.3 (continuous: a mean score of 1/3). ``obs[2:]`` is noise.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import register

OBS_DIM = 4


class Cue(gym.Env):
    """The discrete task (see the module docstring)."""

    metadata = {"render_modes": []}
    continuous = False

    def __init__(self, episode_steps: int = 8) -> None:
        self.episode_steps = int(episode_steps)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
        if self.continuous:
            self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        else:
            self.action_space = gym.spaces.Discrete(2)
        self._t = 0
        self._cue = 0.0
        self._owed = 0.0

    def _obs(self) -> np.ndarray:
        rng = self.np_random
        self._cue = float(rng.uniform(-1.0, 1.0)) if self.continuous else float(rng.choice((-1.0, 1.0)))
        noise = rng.uniform(-1.0, 1.0, OBS_DIM - 2)
        return np.array([self._cue, 2.0 * self._owed - 1.0, *noise], dtype=np.float32)

    def _score(self, action) -> float:
        if self.continuous:
            return 1.0 - abs(float(np.clip(np.asarray(action).reshape(-1)[0], -1, 1)) - self._cue)
        return 1.0 if (int(action) == 1) == (self._cue > 0) else 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t, self._owed = 0, 0.0
        return self._obs(), {}

    def step(self, action):
        reward, self._owed = self._owed, self._score(action)
        self._t += 1
        return self._obs(), reward, False, self._t >= self.episode_steps, {}


class CueBox(Cue):
    """The continuous task (see the module docstring)."""

    continuous = True


register(id="Cue-v0", entry_point=Cue)
register(id="CueBox-v0", entry_point=CueBox)
