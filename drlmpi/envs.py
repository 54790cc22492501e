"""Environments: ``gymnasium.make`` plus the wrappers every run uses.

* :class:`SimCost` burns real CPU time per step (a busy loop, not a sleep), so the
  simulator-bound regime of the DQN paper (its expensive Box Slider simulator) can be reproduced
  with cheap classic-control environments: ``env.sim_cost_ms=2``.
* :func:`env_spec` describes an environment's spaces in the terms an algorithm needs, so an
  algorithm can refuse a space it cannot handle before any rank starts working.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

#: ``info`` key of a step that ends a whole game in an environment whose training episodes are
#: shorter (Atari's episodic life) or whose training rewards are transformed (clipped): its value
#: is ``(raw_return, raw_length)`` of the game. An environment with the attribute
#: ``reports_raw_episodes = True`` sets it, and simulators then log these raw episodes instead of
#: their own per-episode sums of the training rewards.
RAW_EPISODE_KEY = "drlmpi_raw_episode"


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
        deadline = time.thread_time() + self.cost_s
        x = 1.0
        while time.thread_time() < deadline:
            for _ in range(200):
                x = x * 1.0000001 + 1e-9
        return self.env.step(action)


@dataclass(frozen=True)
class EnvSpec:
    """What an algorithm needs to know about an environment.

    Observations are either flat float vectors (``obs_shape == (obs_dim,)``, ``obs_dtype``
    ``float32``) or uint8 images (``obs_shape`` ``(H, W)``, ``(H, W, C)`` or ``(C, H, W)``,
    ``obs_dtype`` ``uint8``; ``obs_dim`` is then the number of pixels times channels), which
    travel and are stored as bytes (:class:`drlmpi.comm.ExperienceLayout`).
    """

    env_id: str
    obs_dim: int
    discrete: bool
    n_actions: int  # discrete only, else 0
    action_dim: int  # 1 for discrete (the action index), else the Box dimension
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    obs_shape: tuple[int, ...] = ()
    obs_dtype: str = "float32"
    #: the environment reports whole games through ``info[RAW_EPISODE_KEY]`` (Atari)
    raw_episodes: bool = False

    def __post_init__(self) -> None:
        if not self.obs_shape:
            object.__setattr__(self, "obs_shape", (int(self.obs_dim),))

    @property
    def image(self) -> bool:
        """Whether observations are uint8 images."""
        return self.obs_dtype == "uint8"

    def describe_obs(self) -> str:
        """``image 4x84x84 uint8`` or ``vector of 8``: for messages."""
        if self.image:
            return f"image {'x'.join(map(str, self.obs_shape))} uint8"
        return f"vector of {self.obs_dim}"


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` names an Arcade Learning Environment game (``ALE/<Game>-v5``)."""
    return str(env_id).startswith("ALE/")


def make_env(env_id: str, sim_cost_ms: float = 0.0, max_episode_steps: int | None = None,
             atari: Any = None, train: bool = True, **kwargs: Any) -> gym.Env:
    """Create one environment with the project's wrappers.

    Args:
        env_id: any registered Gymnasium id (``CartPole-v1``, ``LunarLander-v3``, ...), or an
            ALE id (``ALE/Tetris-v5``: :func:`drlmpi.atari.make_atari` with its preprocessing).
        sim_cost_ms: CPU milliseconds of busy work added per step (0 = none).
        max_episode_steps: override of the registered time limit (``None`` keeps it).
        atari: the ``env.atari`` preprocessing options of an ALE id (``None``: defaults).
        train: ``False`` for evaluation environments (Atari: whole games, raw rewards).
        kwargs: passed to ``gymnasium.make``.
    """
    if is_atari(env_id):
        from drlmpi.atari import make_atari

        env = make_atari(env_id, atari, train=train, max_episode_steps=max_episode_steps, **kwargs)
    else:
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = int(max_episode_steps)
        env = gym.make(env_id, **kwargs)
    if sim_cost_ms and sim_cost_ms > 0:
        env = SimCost(env, sim_cost_ms)
    return env


def env_make_kwargs(env_cfg: Any) -> dict[str, Any]:
    """:func:`make_env`'s keyword arguments from an ``env`` config section (plain values, so
    they pickle into worker processes): the time limit, the Atari options of an ALE id and
    ``env.kwargs``."""
    def plain(value: Any) -> Any:
        try:
            from omegaconf import OmegaConf

            return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except ImportError:  # pragma: no cover
            return value

    out: dict[str, Any] = {"max_episode_steps": env_cfg.get("max_episode_steps")}
    if is_atari(env_cfg.get("id", "")):
        out["atari"] = plain(env_cfg.get("atari"))
    out.update(plain(env_cfg.get("kwargs")) or {})
    return out


def env_spec(env: gym.Env) -> EnvSpec:
    """Describe ``env``'s spaces: flat Box observations (any dtype, used as float32) or uint8
    Box images of 2 or 3 dimensions; Discrete or 1-D Box actions. Anything else is refused."""
    env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    obs_space = env.observation_space
    shape = tuple(int(d) for d in getattr(obs_space, "shape", None) or ())
    image = (isinstance(obs_space, gym.spaces.Box) and obs_space.dtype == np.uint8
             and len(shape) in (2, 3))
    if not isinstance(obs_space, gym.spaces.Box) or not (len(shape) == 1 or image):
        raise ValueError(
            f"{env_id}: observations must be a flat Box or a uint8 Box image (H, W), (H, W, C) or "
            f"(C, H, W), got {obs_space}"
        )
    obs = {"obs_dim": int(np.prod(shape)), "obs_shape": shape,
           "obs_dtype": "uint8" if image else "float32",
           "raw_episodes": bool(_wrapper_attr(env, "reports_raw_episodes"))}
    act_space = env.action_space
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpec(env_id, discrete=True, n_actions=int(act_space.n), action_dim=1,
                       action_low=(), action_high=(), **obs)
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        return EnvSpec(
            env_id,
            discrete=False,
            n_actions=0,
            action_dim=int(act_space.shape[0]),
            action_low=tuple(float(v) for v in np.asarray(act_space.low)),
            action_high=tuple(float(v) for v in np.asarray(act_space.high)),
            **obs,
        )
    raise ValueError(f"{env_id}: unsupported action space {act_space}")


def _wrapper_attr(env: gym.Env, name: str) -> object:
    """``name`` on ``env`` or any wrapper inside it (``None`` when nobody has it)."""
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return None


def probe_spec(env_id: str, **kwargs: Any) -> EnvSpec:
    """Make ``env_id`` once, read its spec, close it (used by start-up validation)."""
    env = make_env(env_id, **kwargs)
    try:
        return env_spec(env)
    finally:
        env.close()
