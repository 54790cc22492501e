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

``tests.tiny_env:StampedCue-v0`` is the discrete task whose ``obs[2:]`` carry, instead of noise, a
stamp that names the observation: the environment instance (its MPI rank and its number in the
process) and how many observations it has shown. Every transition it makes is recorded in
:data:`STEPS`, so tests/row_ledger.py can check that each row a simulator made reached a learner
exactly once, from the rank that made it, with its own next observation.

``tests.tiny_env:HeldCue-v0`` is the discrete task whose steps wait while the file named by its
``hold`` option exists (``+env.kwargs.hold=PATH``): a job that runs until its test lets it go.
"""

from __future__ import annotations

import time
from pathlib import Path

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


#: (env id, observation number) of the observation each StampedCue transition started from, in
#: the order they were made, per process: cleared by tests/row_ledger.py before each run
STEPS: list[tuple[int, int]] = []
#: StampedCue instances made in this process since the last clear (numbers the next one)
MADE = [0]
#: a stamp is exact in float32: env id = rank * 16 + number (< 512), observation number < 8192
ENV_SCALE, STEP_SCALE = 256.0, 4096.0


def stamp(env_id: int, number: int) -> tuple[float, float]:
    """The two observation values that name observation ``number`` of environment ``env_id``."""
    return env_id / ENV_SCALE - 1.0, number / STEP_SCALE - 1.0


def read_stamps(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(env ids, observation numbers) of StampedCue observations ``obs`` (shape ``(n, 4)``)."""
    env_ids = np.rint((obs[:, 2].astype(np.float64) + 1.0) * ENV_SCALE).astype(np.int64)
    numbers = np.rint((obs[:, 3].astype(np.float64) + 1.0) * STEP_SCALE).astype(np.int64)
    return env_ids, numbers


class StampedCue(Cue):
    """The discrete task with stamped observations (see the module docstring)."""

    def __init__(self, episode_steps: int = 8) -> None:
        super().__init__(episode_steps)
        try:
            from mpi4py import MPI

            rank = MPI.COMM_WORLD.Get_rank()
        except ImportError:  # pragma: no cover - mpi4py is a dependency
            rank = 0
        self.env_id = rank * 16 + MADE[0]
        MADE[0] += 1
        self._shown = -1

    def _obs(self) -> np.ndarray:
        obs = super()._obs()
        self._shown += 1
        obs[2:4] = stamp(self.env_id, self._shown)
        return obs

    def step(self, action):
        STEPS.append((self.env_id, self._shown))
        return super().step(action)


class HeldCue(Cue):
    """The discrete task whose steps wait while the file ``hold`` exists (see the module docstring)."""

    def __init__(self, episode_steps: int = 8, hold: str = "") -> None:
        super().__init__(episode_steps)
        self.hold = Path(hold) if hold else None

    def step(self, action):
        while self.hold is not None and self.hold.exists():
            time.sleep(0.05)
        return super().step(action)


register(id="Cue-v0", entry_point=Cue)
register(id="HeldCue-v0", entry_point=HeldCue)
register(id="StampedCue-v0", entry_point=StampedCue)
register(id="CueBox-v0", entry_point=CueBox)
