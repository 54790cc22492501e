"""Environments: ``gymnasium.make`` plus the wrappers every run uses.

* :func:`make_env` builds one environment as a run configures it, through the family of its id
  (:mod:`drlmpi.envs.families`: Gymnasium, ALE, MuJoCo); :func:`probe_spec` reads its spaces
  (:class:`~drlmpi.envs.spec.EnvSpec`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from drlmpi.envs.families import family_of
from drlmpi.envs.spec import EnvSpec, env_spec


def make_env(env_id: str, sim_cost_ms: float = 0.0, max_episode_steps: int | None = None,
             atari: Any = None, train: bool = True, num_threads: int = 1, **kwargs: Any) -> gym.Env:
    """Create one environment with the project's wrappers.

    Args:
        env_id: any registered Gymnasium id (``CartPole-v1``, ``LunarLander-v3``, ...), or an
            ALE id (``ALE/Tetris-v5``: :func:`drlmpi.envs.atari_bank.make_atari`, one
            ``AtariVectorEnv`` environment with its preprocessing).
        sim_cost_ms: CPU milliseconds of busy work added per step (0 = none).
        max_episode_steps: override of the registered time limit (``None`` keeps it).
        atari: the ``env.atari`` preprocessing options of an ALE id (``None``: defaults).
        train: ``False`` for evaluation environments (Atari: whole games, raw rewards).
        num_threads: ALE ids: the threads of the vector env a simulator's environments join
            (:class:`~drlmpi.envs.vector.SerialEnvs`); others ignore it.
        kwargs: passed to ``gymnasium.make`` (ALE ids: to ``AtariVectorEnv``).
    """
    return family_of(env_id).make(env_id, sim_cost_ms=sim_cost_ms, max_episode_steps=max_episode_steps,
                                  atari=atari, train=train, num_threads=num_threads, **kwargs)


def env_make_kwargs(env_cfg: Any) -> dict[str, Any]:
    """:func:`make_env`'s keyword arguments from an ``env`` config section (plain values, so
    they pickle into worker processes): the time limit, the Atari options and thread count of
    an ALE id and ``env.kwargs``."""
    def plain(value: Any) -> Any:
        try:
            from omegaconf import OmegaConf

            return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except ImportError:  # pragma: no cover
            return value

    out: dict[str, Any] = {"max_episode_steps": env_cfg.get("max_episode_steps")}
    options = family_of(env_cfg["id"]).make_options(env_cfg)
    out.update({key: plain(value) for key, value in options.items()})
    out.update(plain(env_cfg.get("kwargs")) or {})
    return out


def probe_spec(env_id: str, **kwargs: Any) -> EnvSpec:
    """Make ``env_id`` once, read its spec, close it (used by start-up validation)."""
    env = make_env(env_id, **kwargs)
    try:
        return env_spec(env)
    finally:
        env.close()
