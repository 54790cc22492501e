"""A tiny learnable image task for tests: which side is the bright square on?

``tests.image_env:ImageSide-v0`` shows a noisy uint8 image with a 255-valued square in its left
or right third; action 0 (left) or 1 (right) earns 1 when it names the square's side, 0
otherwise, and every step shows a new image. An episode lasts ``episode_steps`` steps, so a
random policy returns about half of that and a learned one all of it. Options (``+env.kwargs.``):
``size`` (square images, default 36: the smallest the Nature CNN takes), ``channels``,
``layout`` (``chw``, ``hwc`` or ``hw``), ``episode_steps``, ``noise`` (the background's
largest value), ``lives`` (> 0: it reports whole games through ``info[RAW_EPISODE_KEY]``,
a "game" being ``lives`` training episodes whose rewards are doubled in the raw return).

The background noise makes every byte value likely somewhere in a row, so packed float32 slots
holding image bytes take NaN, infinity and subnormal bit patterns: whatever copies them must
keep their bits.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import register

from drlmpi.envs.spec import RAW_EPISODE_KEY


class ImageSide(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, size: int = 36, channels: int = 1, layout: str = "chw", episode_steps: int = 16,
                 noise: int = 60, lives: int = 0) -> None:
        self.size, self.channels, self.layout = int(size), int(channels), str(layout)
        self.episode_steps, self.noise, self.lives = int(episode_steps), int(noise), int(lives)
        shape = {"chw": (self.channels, self.size, self.size), "hwc": (self.size, self.size, self.channels),
                 "hw": (self.size, self.size)}[self.layout]
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.reports_raw_episodes = self.lives > 0
        self._t = 0
        self._side = 0
        self._life = 0
        self._game_return = 0.0
        self._game_length = 0

    def _image(self) -> np.ndarray:
        rng = self.np_random
        self._side = int(rng.integers(2))
        img = rng.integers(0, self.noise + 1, (self.channels, self.size, self.size), dtype=np.uint8)
        third = self.size // 3
        cols = slice(0, third) if self._side == 0 else slice(self.size - third, self.size)
        img[:, third : 2 * third, cols] = 255
        if self.layout == "hwc":
            return np.ascontiguousarray(img.transpose(1, 2, 0))
        return img[0] if self.layout == "hw" else img

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        if self.lives and self._life == 0:
            self._game_return, self._game_length = 0.0, 0
        return self._image(), {}

    def step(self, action):
        reward = 1.0 if int(action) == self._side else 0.0
        self._t += 1
        truncated = self._t >= self.episode_steps
        info: dict = {}
        if self.lives:
            self._game_return += 2.0 * reward
            self._game_length += 1
            if truncated:
                self._life = (self._life + 1) % self.lives
                if self._life == 0:
                    info[RAW_EPISODE_KEY] = (self._game_return, self._game_length)
        return self._image(), reward, False, truncated, info


register(id="ImageSide-v0", entry_point=ImageSide)
