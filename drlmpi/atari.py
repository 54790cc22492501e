"""Atari (ALE) environments with the standard DQN-style preprocessing, in numpy only (no opencv).

:func:`make_atari` builds ``ALE/<Game>-v5`` with ``frameskip=1`` and stacks these wrappers, innermost
first (each one works on any environment with the same spaces, so it can be tested alone):

* :class:`NoopReset`: after a real reset, 1..``noop_max`` random no-op frames.
* :class:`MaxAndSkip`: repeat the action ``frame_skip`` times, sum the rewards, max-pool the last two
  frames. On a plain ALE environment it drives the emulator directly (``ale.act``) and reads only the
  frames it needs into preallocated buffers; otherwise it calls ``env.step`` per frame.
* :class:`FireReset`: presses FIRE after a reset and after every life loss (inside that step).
* :class:`GameMonitor`: counts the agent steps and the unclipped rewards of the whole game, truncates
  at ``max_episode_steps`` agent steps and reports ``info[RAW_EPISODE_KEY] = (raw_return,
  raw_length)`` on the step that ends the game.
* :class:`EpisodicLife` (training only): a life loss ends the training episode; the next ``reset``
  continues the game instead of restarting it.
* :class:`ClipReward` (training only): the sign of the reward.
* :class:`ResizeFrame`: area-averaging resize to ``screen_size`` x ``screen_size``, channels first.
* :class:`FrameStack`: the last ``frame_stack`` frames, oldest first, from a preallocated ring.

Options, their defaults and meaning: :data:`ATARI_DEFAULTS` and docs/environments.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from drlmpi.envs import RAW_EPISODE_KEY

#: Every ``env.atari`` option with its default (docs/environments.md explains each one).
ATARI_DEFAULTS: dict[str, Any] = {
    "noop_max": 30,
    "frame_skip": 4,
    "max_pool": True,
    "grayscale": True,
    "screen_size": 84,
    "frame_stack": 4,
    "episodic_life": True,
    "clip_rewards": True,
    "fire_reset": True,
    "repeat_action_probability": 0.0,
}

_INT_LOW = {"noop_max": 0, "frame_skip": 1, "screen_size": 1, "frame_stack": 1}
_BOOLS = ("max_pool", "grayscale", "episodic_life", "clip_rewards", "fire_reset")


def check_atari_options(options: Mapping | None) -> dict[str, Any]:
    """``options`` with the defaults filled in; a bad key or value raises a one-line ValueError."""
    if options is None:
        return dict(ATARI_DEFAULTS)
    if not isinstance(options, Mapping):
        raise ValueError(f"env.atari must be a mapping or null, got {options!r}")
    out = dict(ATARI_DEFAULTS)
    for key, value in options.items():
        if key not in ATARI_DEFAULTS:
            raise ValueError(f"env.atari has no option {key!r} (options: {', '.join(ATARI_DEFAULTS)})")
        if key in _INT_LOW:
            low = _INT_LOW[key]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"env.atari.{key} must be an integer >= {low}, got {value!r}")
            value = int(value)
        elif key in _BOOLS:
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"env.atari.{key} must be true or false, got {value!r}")
            value = bool(value)
        else:  # repeat_action_probability
            if (isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating))
                    or not 0.0 <= float(value) <= 1.0):
                raise ValueError(f"env.atari.{key} must be a number in [0, 1], got {value!r}")
            value = float(value)
        out[key] = value
    return out


# --------------------------------------------------------------------------------------------------
# Wrappers


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


class GameMonitor(gym.Wrapper):
    """Whole-game accounting, below any episodic-life or reward-clipping wrapper.

    On the step that ends the game (terminated, truncated by the environment, or truncated here at
    ``max_episode_steps`` agent steps) ``info[RAW_EPISODE_KEY] = (raw_return, raw_length)``: the sum
    of the unclipped rewards and the number of steps since the last real reset. With
    ``rewards_are_lines`` (ALE Tetris, whose reward is the number of cleared lines) ``info["lines"]``
    is added next to it.
    """

    reports_raw_episodes = True

    def __init__(self, env: gym.Env, max_episode_steps: int | None = None,
                 rewards_are_lines: bool = False) -> None:
        super().__init__(env)
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1 or None, got {max_episode_steps}")
        self.max_episode_steps = max_episode_steps
        self.rewards_are_lines = rewards_are_lines
        self._return = 0.0
        self._length = 0

    def reset(self, **kwargs: Any):
        self._return = 0.0
        self._length = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        self._length += 1
        if self.max_episode_steps is not None and self._length >= self.max_episode_steps:
            truncated = True
        if terminated or truncated:
            info = dict(info)
            info[RAW_EPISODE_KEY] = (self._return, self._length)
            if self.rewards_are_lines:
                info["lines"] = int(round(self._return))
        return obs, reward, terminated, truncated, info


class FireReset(gym.Wrapper):
    """Press ``fire_action`` once after every real reset and after every life loss (``info["lives"]``
    dropping), for games that wait for FIRE to (re)launch play. The extra step's reward is added to
    the step that lost the life, and its observation and info are returned."""

    def __init__(self, env: gym.Env, fire_action: int) -> None:
        super().__init__(env)
        self.fire_action = fire_action
        self._lives = 0

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(self.fire_action)
        if terminated or truncated:  # a game over at its very first step: start another one
            obs, info = self.env.reset()
        self._lives = info.get("lives", 0)
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = info.get("lives", 0)
        if lives < self._lives and not (terminated or truncated):
            obs, extra, terminated, truncated, info = self.env.step(self.fire_action)
            reward = float(reward) + float(extra)
            lives = info.get("lives", 0)
        self._lives = lives
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """Training episodes end at every life loss (``info["lives"]`` dropping); the next ``reset``
    continues the same game from where it stands (no emulator reset, no step) unless the game itself
    ended or a seed is given. Evaluation leaves this wrapper out and plays whole games."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._pending: tuple[Any, dict] | None = None

    def reset(self, **kwargs: Any):
        if self._pending is not None and kwargs.get("seed") is None:
            obs, info = self._pending
            self._pending = None
            return obs, info
        self._pending = None
        obs, info = self.env.reset(**kwargs)
        self._lives = info.get("lives", 0)
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = info.get("lives", 0)
        game_over = terminated or truncated
        life_lost = lives < self._lives and not game_over
        self._lives = lives
        self._pending = (np.array(obs, copy=True), dict(info)) if life_lost else None
        return obs, reward, terminated or life_lost, truncated, info


class ClipReward(gym.RewardWrapper):
    """The sign of each reward (-1, 0, 1), so one learning rate suits games with any score scale."""

    def reward(self, reward: float) -> float:
        return float(np.sign(reward))


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


# --------------------------------------------------------------------------------------------------
# Construction


def _register_ale() -> None:
    import ale_py

    gym.register_envs(ale_py)
    # No banner on every environment made: one per simulator's environment was noise.
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


def preprocess(env: gym.Env, options: Mapping | None = None, *, train: bool = True,
               max_episode_steps: int | None = None, fire_action: int | None = None,
               rewards_are_lines: bool = False) -> gym.Env:
    """Stack the preprocessing wrappers on a frame-level environment (frame skip 1, ``(H, W)`` or
    ``(H, W, C)`` uint8 frames, ``info["lives"]``). ``fire_action``: the FIRE action's index, or
    ``None`` when the game has none (then ``fire_reset`` does nothing)."""
    opts = check_atari_options(options)
    if opts["noop_max"] > 0:
        env = NoopReset(env, opts["noop_max"])
    env = MaxAndSkip(env, opts["frame_skip"], opts["max_pool"])
    if opts["fire_reset"] and fire_action is not None:
        env = FireReset(env, fire_action)
    env = GameMonitor(env, max_episode_steps, rewards_are_lines)
    if train and opts["episodic_life"]:
        env = EpisodicLife(env)
    if train and opts["clip_rewards"]:
        env = ClipReward(env)
    env = ResizeFrame(env, opts["screen_size"])
    env = FrameStack(env, opts["frame_stack"])
    env.reports_raw_episodes = True
    return env


def make_atari(env_id: str, options: Mapping | None = None, *, train: bool = True,
               max_episode_steps: int | None = None, **kwargs: Any) -> gym.Env:
    """``env_id`` (any ALE id, e.g. ``ALE/Breakout-v5``) with the preprocessing of ``options``
    (``env.atari``; see :data:`ATARI_DEFAULTS`).

    The emulator runs with ``frameskip=1`` (the skip is done here), ``obs_type`` grayscale or rgb,
    and ``repeat_action_probability`` from the options (0.0 by default, as in the classic
    NoFrameskip-v4 setups; v5's own default is 0.25), which ``kwargs`` may override; other
    ``kwargs`` go to ``gymnasium.make``. ``train=False`` (evaluation) leaves out episodic life and
    reward clipping: raw rewards, whole games. ``max_episode_steps`` truncates a game at this many
    agent steps (after frame skip, all lives together).

    The returned environment has ``reports_raw_episodes = True`` and sets
    ``info[RAW_EPISODE_KEY] = (raw_return, raw_length)`` on the step that ends a game.
    """
    opts = check_atari_options(options)
    for key in ("frameskip", "obs_type"):
        if key in kwargs:
            raise ValueError(f"{env_id}: {key} is set by env.atari (frame_skip, grayscale), "
                             "not by env.kwargs")
    kwargs.setdefault("repeat_action_probability", opts["repeat_action_probability"])
    _register_ale()
    env = gym.make(env_id, frameskip=1, obs_type="grayscale" if opts["grayscale"] else "rgb", **kwargs)
    base = env.unwrapped
    meanings = list(base.get_action_meanings()) if hasattr(base, "get_action_meanings") else []
    fire = meanings.index("FIRE") if "FIRE" in meanings else None
    game = str(getattr(base, "_game", "")).lower()
    return preprocess(env, opts, train=train, max_episode_steps=max_episode_steps, fire_action=fire,
                      rewards_are_lines=game == "tetris")


# --------------------------------------------------------------------------------------------------
# Cost measurement: python -m drlmpi.atari [ALE id ...]


def _rate(env: gym.Env, actions: np.ndarray) -> float:
    import time

    start = time.process_time()
    for a in actions:
        _, _, terminated, truncated, _ = env.step(int(a))
        if terminated or truncated:
            env.reset()
    return len(actions) / (time.process_time() - start)


def benchmark(env_id: str = "ALE/Tetris-v5", steps: int = 2000, rounds: int = 5) -> dict[str, float]:
    """Agent steps per CPU second of this process (random actions; resets included) of the raw
    emulator at frame skip 4 vs. the full preprocessing (training and evaluation stacks): the
    median over ``rounds`` interleaved rounds of ``steps`` steps each, so that other load on the
    host hits all alike. Run it with ``OMP_NUM_THREADS=1`` for one core's figure."""
    _register_ale()
    envs = {"raw_frameskip4": gym.make(env_id, frameskip=4, repeat_action_probability=0.0,
                                       obs_type="grayscale"),
            "preprocessed_train": make_atari(env_id, train=True),
            "preprocessed_eval": make_atari(env_id, train=False)}
    rng = np.random.default_rng(0)
    rates: dict[str, list[float]] = {name: [] for name in envs}
    for env in envs.values():
        env.reset(seed=0)
    for _ in range(rounds):
        actions = rng.integers(0, envs["raw_frameskip4"].action_space.n, steps)
        for name, env in envs.items():
            rates[name].append(_rate(env, actions))
    for env in envs.values():
        env.close()
    return {name: float(np.median(r)) for name, r in rates.items()}


if __name__ == "__main__":  # pragma: no cover
    import sys

    for env_id in sys.argv[1:] or ["ALE/Tetris-v5", "ALE/Breakout-v5"]:
        rates = benchmark(env_id)
        raw = rates["raw_frameskip4"]
        print(env_id, "  ".join(f"{k}: {v:.0f} steps/s" for k, v in rates.items()),
              f" (preprocessing: +{1e6 / rates['preprocessed_train'] - 1e6 / raw:.0f} us/step)")
