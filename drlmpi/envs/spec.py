"""What an algorithm needs to know about an environment (:class:`EnvSpec`), read from its spaces, so
an algorithm can refuse a space it cannot handle before any rank starts working; the ``info``
key by which an environment reports whole games (:data:`RAW_EPISODE_KEY`); and one step of a
bank of environments (:class:`BankStep`: what the vector banks and the Atari bank return).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

#: ``info`` key of a step that ends a whole game in an environment whose training episodes are
#: shorter (Atari's episodic life) or whose training rewards are transformed (clipped): its value
#: is ``(raw_return, raw_length)`` of the game. An environment with the attribute
#: ``reports_raw_episodes = True`` sets it, and simulators then log these raw episodes instead of
#: their own per-episode sums of the training rewards.
RAW_EPISODE_KEY = "drlmpi_raw_episode"


@dataclass(frozen=True)
class EnvSpec:
    """What an algorithm needs to know about an environment.

    Observations are either flat float vectors (``obs_shape == (obs_dim,)``, ``obs_dtype``
    ``float32``) or uint8 images (``obs_shape`` ``(H, W)``, ``(H, W, C)`` or ``(C, H, W)``,
    ``obs_dtype`` ``uint8``; ``obs_dim`` is then the number of pixels times channels), which
    travel and are stored as bytes (:class:`drlmpi.data.layout.ExperienceLayout`).
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


@dataclass
class BankStep:
    """One step of every environment of a bank."""

    obs: np.ndarray  # (n, *obs_shape): the step's observation (final where the episode ended)
    reward: np.ndarray  # (n,) float64
    terminated: np.ndarray  # (n,) bool
    truncated: np.ndarray  # (n,) bool
    next_obs: np.ndarray  # (n, *obs_shape): what to act on next (reset where it ended)
    raw: dict[int, tuple[float, int]] = field(default_factory=dict)  # env index -> raw game
    #: env index -> the action sent instead of the one asked for (ALE: FIRE after a lost life)
    forced: dict[int, int] = field(default_factory=dict)
