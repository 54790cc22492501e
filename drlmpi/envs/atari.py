"""Atari (ALE) games: the ``env.atari`` options (the atari family's,
:mod:`drlmpi.envs.families.atari`) and what they make of an ``ALE/<Game>-v5`` id.

Every ALE id is played through ale-py's ``AtariVectorEnv`` (its C++ frame skip, max-pool,
grayscale, area resize, frame stack, no-op starts and FIRE at reset), stepped by
:class:`drlmpi.envs.atari_bank.AleBank`. :func:`ale_settings` turns a run's options into the
vector env's arguments plus what drlmpi adds on top, because the vector env's own versions of
these lose what users see (docs/environments.md, "What drlmpi adds"):

* episodic life from ``info["lives"]`` (its ``episodic_life`` restarts the whole game at each
  lost life, so whole-game scores could never be observed);
* reward sign clipping from the raw reward (its ``reward_clipping`` discards the raw reward,
  which the whole-game returns of logging and evaluation need);
* FIRE as the next action after a lost life (it presses FIRE only at reset).

Options, their defaults and meaning: :data:`ATARI_DEFAULTS` and docs/environments.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import gymnasium as gym
import numpy as np

from drlmpi.config.errors import did_you_mean

#: Every ``env.atari`` option with its default (docs/environments.md explains each one). The env
#: files leave ``env.atari`` empty; whatever a run sets is laid over these.
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

#: ``env.kwargs`` an ALE id takes (AtariVectorEnv arguments); anything else is refused.
ALE_KWARGS = ("repeat_action_probability", "full_action_space")

#: Seeds must lie in [0, 2**31): the vector env raises above and silently ignores negative ones.
SEED_RANGE = 2**31


def check_atari_options(options: Mapping | None) -> dict[str, Any]:
    """``options`` with the defaults filled in; a bad key or value raises a one-line ValueError."""
    if options is None:
        return dict(ATARI_DEFAULTS)
    if not isinstance(options, Mapping):
        raise ValueError(f"env.atari must be a mapping or null, got {options!r}")
    out = dict(ATARI_DEFAULTS)
    for key, value in options.items():
        if key not in ATARI_DEFAULTS:
            close = did_you_mean(str(key), ATARI_DEFAULTS, lambda option: f"env.atari.{option}")
            hint = f"{close} " if close else ""
            raise ValueError(f"env.atari has no option {key!r} ({hint}options: {', '.join(ATARI_DEFAULTS)})")
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


def check_ale_kwargs(kwargs: Mapping | None) -> None:
    """Refuse, in one line, an ``env.kwargs`` key that ALE ids do not take (``AtariVectorEnv`` has
    no rendering, game modes or RAM observations; frame skip and screen type are ``env.atari``'s)."""
    for key in kwargs or {}:
        if key not in ALE_KWARGS:
            raise ValueError(f"env.kwargs.{key} is not taken by ALE ids (AtariVectorEnv): they take "
                             f"{' and '.join(ALE_KWARGS)}; frame skip, screen and stack are env.atari's")


def register_ale() -> None:
    """Register the ``ALE/`` ids with Gymnasium, and silence ALE's banner (one per emulator)."""
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


@cache
def action_set(game: str, full_action_space: bool) -> tuple[str, ...]:
    """The names of a game's actions in the order of its ``Discrete`` actions (the ROM's minimal
    set, or all 18), read once per process from one emulator: environments can then report their
    spaces without starting a vector env."""
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.loadROM(ale_py.roms.get_rom_path(game))
    actions = ale.getLegalActionSet() if full_action_space else ale.getMinimalActionSet()
    return tuple(action.name for action in actions)


@dataclass(frozen=True)
class AleSettings:
    """Everything that makes an ALE id's environments: the ``AtariVectorEnv`` arguments and what
    drlmpi does on top of them. Environments with equal settings can share one vector env."""

    env_id: str
    game: str  # the ROM name, snake_case (``breakout``)
    arguments: dict[str, Any]  # AtariVectorEnv keyword arguments
    n_actions: int = 0
    fire_action: int | None = None  # pressed after a lost life (fire_reset on, the game has FIRE)
    obs_shape: tuple[int, ...] = ()  # (frame_stack * channels, screen_size, screen_size)
    life_ends: bool = False  # a lost life ends the training episode (training, episodic_life)
    clip_rewards: bool = False  # training rewards are signs (training, clip_rewards)
    sim_cost_ms: float = 0.0  # CPU milliseconds of busy work per environment step
    num_threads: int = 1  # threads of a simulator's vector env (env.num_threads)


def ale_settings(env_id: str, options: Mapping | None = None, *, train: bool = True,
                 max_episode_steps: int | None = None, sim_cost_ms: float = 0.0,
                 num_threads: int = 1, **kwargs: Any) -> AleSettings:
    """The settings of ``env_id`` (``ALE/<Game>-v5``) under ``options`` (``env.atari``).

    ``train=False`` (evaluation) leaves out episodic life and reward clipping: raw rewards, whole
    games. ``max_episode_steps`` truncates a game at this many agent steps (all lives together;
    ``None``: the id's own limit, 108,000 frames). ``kwargs``: :data:`ALE_KWARGS`.
    """
    opts = check_atari_options(options)
    check_ale_kwargs(kwargs)
    if max_episode_steps is not None and int(max_episode_steps) < 1:
        raise ValueError(f"max_episode_steps must be >= 1 or None, got {max_episode_steps}")
    register_ale()
    registered = gym.spec(env_id).kwargs
    game = str(registered["game"])
    full = bool(kwargs.get("full_action_space", registered.get("full_action_space", False)))
    names = action_set(game, full)
    skip = opts["frame_skip"]
    frames = (int(max_episode_steps) * skip if max_episode_steps is not None
              else int(registered.get("max_num_frames_per_episode", 108_000)))
    arguments = {
        "frameskip": skip, "maxpool": opts["max_pool"], "grayscale": opts["grayscale"],
        "img_height": opts["screen_size"], "img_width": opts["screen_size"],
        "stack_num": opts["frame_stack"], "noop_max": opts["noop_max"],
        "use_fire_reset": opts["fire_reset"],
        "repeat_action_probability": float(kwargs.get("repeat_action_probability",
                                                      opts["repeat_action_probability"])),
        "full_action_space": full, "max_num_frames_per_episode": frames,
        # drlmpi's own versions of these keep the raw game (module docstring): never the vector env's
        "episodic_life": False, "life_loss_info": False, "reward_clipping": False,
    }
    channels = 1 if opts["grayscale"] else 3
    fire = names.index("FIRE") if opts["fire_reset"] and "FIRE" in names else None
    return AleSettings(env_id=env_id, game=game, arguments=arguments, n_actions=len(names),
                       fire_action=fire,
                       obs_shape=(opts["frame_stack"] * channels, opts["screen_size"], opts["screen_size"]),
                       life_ends=train and opts["episodic_life"], clip_rewards=train and opts["clip_rewards"],
                       sim_cost_ms=float(sim_cost_ms or 0.0), num_threads=int(num_threads))
