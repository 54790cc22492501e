"""Atari (ALE) environments with the standard DQN-style preprocessing, in numpy only (no opencv).

:func:`make_atari` builds ``ALE/<Game>-v5`` with ``frameskip=1`` and stacks these wrappers, innermost
first (each one works on any environment with the same spaces, so it can be tested alone; the
frame pipeline - no-ops, frame skip, resize, stack - is in :mod:`drlmpi.envs.frames`):

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

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from drlmpi.envs.frames import FrameStack, MaxAndSkip, NoopReset, ResizeFrame
from drlmpi.envs.spec import RAW_EPISODE_KEY

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


# --------------------------------------------------------------------------------------------------
# Construction


def register_ale() -> None:
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
    register_ale()
    env = gym.make(env_id, frameskip=1, obs_type="grayscale" if opts["grayscale"] else "rgb", **kwargs)
    base = env.unwrapped
    meanings = list(base.get_action_meanings()) if hasattr(base, "get_action_meanings") else []
    fire = meanings.index("FIRE") if "FIRE" in meanings else None
    game = str(getattr(base, "_game", "")).lower()
    return preprocess(env, opts, train=train, max_episode_steps=max_episode_steps, fire_action=fire,
                      rewards_are_lines=game == "tetris")
