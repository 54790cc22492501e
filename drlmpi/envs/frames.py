"""The frame pipeline of Atari preprocessing, in numpy: frame skip with a max-pool over the last
two frames, an area resize to ``screen_size`` squared (two small matrix products), and a stack of
the last ``frame_stack`` frames (see :mod:`drlmpi.envs.atari`)."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np


class NoopReset(gym.Wrapper):
    """After a real reset, take 1..``noop_max`` (uniform) no-op steps, so that games start in varied
    states. The no-ops are raw frames when this wraps the frame-level environment."""

    def __init__(self, env: gym.Env, noop_max: int, noop_action: int = 0) -> None:
        super().__init__(env)
        self.noop_max = int(noop_max)
        self.noop_action = noop_action

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        if self.noop_max <= 0:
            return obs, info
        for _ in range(int(self.np_random.integers(1, self.noop_max + 1))):
            obs, _, terminated, truncated, info = self.env.step(self.noop_action)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info



def _plain_ale(env: gym.Env):
    """The ALE ``AtariEnv`` under ``env`` when stepping it directly is equivalent to ``env.step``:
    frame skip 1, image observations, discrete actions, and nothing between but pass-through
    wrappers. ``None`` otherwise."""
    try:
        from ale_py.env import AtariEnv
    except ImportError:  # pragma: no cover - ale_py is optional for the wrappers themselves
        return None
    base = env.unwrapped
    if not isinstance(base, AtariEnv):
        return None
    if (getattr(base, "_frameskip", None) != 1 or getattr(base, "continuous", True)
            or getattr(base, "sound_obs", True) or getattr(base, "_action_set", None) is None
            or getattr(base, "_obs_type", None) not in ("grayscale", "rgb")):
        return None
    from gymnasium.wrappers.common import OrderEnforcing, PassiveEnvChecker

    layer = env
    while layer is not base:
        if not isinstance(layer, (OrderEnforcing, PassiveEnvChecker, NoopReset)):
            return None
        layer = layer.env
    return base


class MaxAndSkip(gym.Wrapper):
    """Repeat each action ``skip`` frames, sum their rewards and return the pixel-wise maximum of the
    last two frames (``max_pool``; Atari sprites flicker between frames). A game that ends within a
    skip returns its last frame. With ``skip=1`` there is nothing to pool."""

    def __init__(self, env: gym.Env, skip: int = 4, max_pool: bool = True, direct: bool = True) -> None:
        super().__init__(env)
        if skip < 1:
            raise ValueError(f"skip must be >= 1, got {skip}")
        self.skip = int(skip)
        self.max_pool = bool(max_pool) and self.skip > 1
        self._prev = np.zeros(env.observation_space.shape, env.observation_space.dtype)
        base = _plain_ale(env) if direct else None
        #: True when frames come straight from the emulator (ale.act + screen reads into buffers).
        self.direct = base is not None
        if self.direct:
            self._ale = base.ale
            self._actions = list(base._action_set)
            self._grab = (self._ale.getScreenGrayscale if base._obs_type == "grayscale"
                          else self._ale.getScreenRGB)
            self._last = np.zeros_like(self._prev)

    def step(self, action: Any):
        if self.direct:
            return self._step_direct(action)
        total = 0.0
        pool = False
        for i in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
            if i == self.skip - 2:
                np.copyto(self._prev, obs)
                pool = self.max_pool
        if pool and i == self.skip - 1:
            obs = np.maximum(self._prev, obs)
        return obs, total, terminated, truncated, info

    def _step_direct(self, action: Any):
        ale = self._ale
        code = self._actions[int(action)]
        total = 0
        pool = False
        for i in range(self.skip):
            total += ale.act(code)
            if ale.game_over():
                break
            if i == self.skip - 2 and self.max_pool:
                self._grab(self._prev)
                pool = True
        self._grab(self._last)
        obs = np.maximum(self._prev, self._last) if pool and i == self.skip - 1 else self._last.copy()
        info = {"lives": ale.lives(), "episode_frame_number": ale.getEpisodeFrameNumber(),
                "frame_number": ale.getFrameNumber()}
        return obs, float(total), ale.game_over(with_truncation=False), ale.game_truncated(), info


#: Largest matrix product (multiply-adds) done in one call. OpenBLAS spreads bigger ones over
#: several threads, which on a host running one rank per core costs far more than it saves (a
#: 3x slowdown measured on a busy 2-core machine); larger products are split into row chunks.
_MATMUL_CHUNK = 200_000


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a @ b`` for 2-D arrays, in row chunks of at most ``_MATMUL_CHUNK`` multiply-adds."""
    rows = max(1, _MATMUL_CHUNK // max(1, a.shape[1] * b.shape[1]))
    if rows >= a.shape[0]:
        np.matmul(a, b, out=out)
        return
    for start in range(0, a.shape[0], rows):
        np.matmul(a[start:start + rows], b, out=out[start:start + rows])


def area_weights(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` float32 matrix of area-averaging weights: output pixel i is the mean of the
    input over ``[i * n_in / n_out, (i + 1) * n_in / n_out)``, partial pixels weighted by their
    overlap. Each row sums to 1. Computed in integers (units of 1 / n_out of an input pixel), so
    the matrix is exactly block diagonal with ``gcd(n_in, n_out)`` identical blocks."""
    i = np.arange(n_out)[:, None]
    j = np.arange(n_in)[None, :]
    lo = np.maximum(i * n_in, j * n_out)
    hi = np.minimum((i + 1) * n_in, (j + 1) * n_out)
    return (np.maximum(hi - lo, 0) / n_in).astype(np.float32)


class ResizeFrame(gym.ObservationWrapper):
    """Area-averaging resize of ``(H, W)`` (grayscale) or ``(H, W, C)`` frames to channels-first
    ``(C, size, size)`` uint8, numpy only.

    Mathematically ``out[c] = rint(Wr @ frame[..., c] @ Wc.T)`` with ``Wr = area_weights(H, size)``
    and ``Wc = area_weights(W, size)``. Both matrices are block diagonal with identical blocks (for
    210x160 -> 84: 42 blocks of 2x5 rows, 4 blocks of 21x40 columns), so each product is computed
    as one small matrix product over all blocks at once, into preallocated float32 buffers: about a
    tenth of the dense products' arithmetic, the same numbers.
    """

    def __init__(self, env: gym.Env, size: int = 84) -> None:
        super().__init__(env)
        shape = env.observation_space.shape
        if len(shape) not in (2, 3):
            raise ValueError(f"ResizeFrame needs (H, W) or (H, W, C) frames, got shape {shape}")
        h, w = shape[:2]
        c = 1 if len(shape) == 2 else shape[2]
        self.in_shape = tuple(shape)
        self.size = int(size)
        self.Wr = area_weights(h, self.size)
        self.Wc = area_weights(w, self.size)
        gr, gc = math.gcd(h, self.size), math.gcd(w, self.size)
        pr, qr, pc, qc = h // gr, self.size // gr, w // gc, self.size // gc
        self._dims = (h, w, c, gr, pr, qr, gc, pc, qc)
        self._br = np.ascontiguousarray(self.Wr[:qr, :pr])
        self._bct = np.ascontiguousarray(self.Wc[:qc, :pc].T)
        self._f = np.empty((pr, gr, w * c), np.float32)
        self._t = np.empty((qr, gr * w * c), np.float32)
        self._t2 = np.empty((c, gr, qr, w), np.float32)
        self._o = np.empty((c * self.size * gc, qc), np.float32)
        self.observation_space = gym.spaces.Box(0, 255, (c, self.size, self.size), np.uint8)

    def observation(self, frame: np.ndarray) -> np.ndarray:
        h, w, c, gr, pr, qr, gc, pc, qc = self._dims
        # rows: every block of pr input rows -> qr output rows, all blocks in one product
        np.copyto(self._f, frame.reshape(gr, pr, w * c).transpose(1, 0, 2), casting="unsafe")
        _matmul(self._br, self._f.reshape(pr, gr * w * c), self._t)
        # to channels first, rows in output order
        np.copyto(self._t2, self._t.reshape(qr, gr, w, c).transpose(3, 1, 0, 2))
        # columns: every block of pc input columns -> qc output columns
        _matmul(self._t2.reshape(c * self.size * gc, pc), self._bct, self._o)
        np.rint(self._o, out=self._o)
        return self._o.reshape(c, self.size, self.size).astype(np.uint8)


class FrameStack(gym.Wrapper):
    """The last ``k`` channels-first frames concatenated along the channel axis, oldest first, newest
    last: ``(k * C, H, W)``. A reset fills the stack with the first frame. Frames go into a ring of
    ``2k`` slots (each frame written twice, k apart), so the current stack is always one contiguous
    slice; each step returns a copy of it."""

    def __init__(self, env: gym.Env, k: int = 4) -> None:
        super().__init__(env)
        space = env.observation_space
        if len(space.shape) != 3:
            raise ValueError(f"FrameStack needs (C, H, W) frames, got shape {space.shape}")
        self.k = int(k)
        c, h, w = space.shape
        self._ring = np.zeros((2 * self.k, c, h, w), space.dtype)
        self._pos = 0
        self.observation_space = gym.spaces.Box(
            np.tile(space.low, (self.k, 1, 1)), np.tile(space.high, (self.k, 1, 1)), (self.k * c, h, w),
            space.dtype)

    def _stack(self) -> np.ndarray:
        return self._ring[self._pos + 1:self._pos + 1 + self.k].reshape(self.observation_space.shape).copy()

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._ring[:] = obs
        self._pos = self.k - 1
        return self._stack(), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._pos = (self._pos + 1) % self.k
        self._ring[self._pos] = obs
        self._ring[self._pos + self.k] = obs
        return self._stack(), reward, terminated, truncated, info
