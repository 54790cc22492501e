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
    """What an algorithm needs to know about an environment."""

    env_id: str
    obs_dim: int
    discrete: bool
    n_actions: int  # discrete only, else 0
    action_dim: int  # 1 for discrete (the action index), else the Box dimension
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]


def make_env(env_id: str, sim_cost_ms: float = 0.0, max_episode_steps: int | None = None,
             **kwargs: Any) -> gym.Env:
    """Create one environment with the project's wrappers.

    Args:
        env_id: any registered Gymnasium id (``CartPole-v1``, ``LunarLander-v3``, ...).
        sim_cost_ms: CPU milliseconds of busy work added per step (0 = none).
        max_episode_steps: override of the registered time limit (``None`` keeps it).
        kwargs: passed to ``gymnasium.make``.
    """
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = int(max_episode_steps)
    env = gym.make(env_id, **kwargs)
    if sim_cost_ms and sim_cost_ms > 0:
        env = SimCost(env, sim_cost_ms)
    return env


def env_spec(env: gym.Env) -> EnvSpec:
    """Describe ``env``'s observation and action spaces (flat Box observations only)."""
    env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    obs_space = env.observation_space
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(
            f"{env_id}: only flat Box observations are supported, got {obs_space}"
        )
    act_space = env.action_space
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpec(env_id, int(obs_space.shape[0]), True, int(act_space.n), 1, (), ())
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        return EnvSpec(
            env_id,
            int(obs_space.shape[0]),
            False,
            0,
            int(act_space.shape[0]),
            tuple(float(v) for v in np.asarray(act_space.low)),
            tuple(float(v) for v in np.asarray(act_space.high)),
        )
    raise ValueError(f"{env_id}: unsupported action space {act_space}")


def probe_spec(env_id: str, **kwargs: Any) -> EnvSpec:
    """Make ``env_id`` once, read its spec, close it (used by start-up validation)."""
    env = make_env(env_id, **kwargs)
    try:
        return env_spec(env)
    finally:
        env.close()
