"""Environments: ``gymnasium.make`` plus the wrappers every run uses.

* :func:`make_env` builds one environment as a run configures it, through the family of its id
  (:mod:`drlmpi.envs.families`: Gymnasium, ALE, MuJoCo); :func:`probe_spec` reads its spaces
  (:class:`~drlmpi.envs.spec.EnvSpec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from drlmpi.config.scopes import EnvSettings
from drlmpi.config.settings import thawed
from drlmpi.envs.families import env_settings, family_of, make_options
from drlmpi.envs.spec import EnvSpec, env_spec


def make_env(env_id: str, sim_cost_ms: float = 0.0, max_episode_steps: int | None = None,
             train: bool = True, **kwargs: Any) -> gym.Env:
    """Create one environment with the project's wrappers, through the family of ``env_id``.

    Args:
        env_id: any registered Gymnasium id (``CartPole-v1``, ``LunarLander-v3``, ...), or an
            id of another family (``ALE/Tetris-v5``: :mod:`drlmpi.envs.families.atari`).
        sim_cost_ms: CPU milliseconds of busy work added per step (0 = none).
        max_episode_steps: override of the registered time limit (``None`` keeps it).
        train: ``False`` for evaluation environments (a family may make them differently:
            Atari plays whole games with raw rewards).
        kwargs: the options of the id's family (:func:`env_make_kwargs`; none: their defaults)
            and ``env.kwargs``, which ``gymnasium.make`` (or the family's maker) takes.
    """
    return family_of(env_id).make(env_id, sim_cost_ms=sim_cost_ms, max_episode_steps=max_episode_steps,
                                  train=train, **kwargs)


def env_make_kwargs(env: EnvSettings | Mapping[str, Any]) -> dict[str, Any]:
    """:func:`make_env`'s keyword arguments from an ``env`` section (typed settings, or a checked
    config section; plain values, so they pickle into worker processes): the time limit, the
    options of the id's family and ``env.kwargs``."""
    env = env_settings(env)
    return {"max_episode_steps": env.max_episode_steps, **thawed(make_options(env)), **thawed(env.kwargs)}


def probe_spec(env_id: str, **kwargs: Any) -> EnvSpec:
    """Make ``env_id`` once, read its spec, close it (used by start-up validation)."""
    env = make_env(env_id, **kwargs)
    try:
        return env_spec(env)
    finally:
        env.close()
