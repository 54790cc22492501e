"""The default family: any id Gymnasium registers (``CartPole-v1``, ``LunarLander-v3``...),
made by ``gymnasium.make`` with the time limit and :class:`~drlmpi.envs.sim_cost.SimCost` of a run.
It recognises every id, so it is tried last."""

from __future__ import annotations

from typing import Any

import gymnasium

from drlmpi.config.errors import ConfigError
from drlmpi.envs.families.base import Family
from drlmpi.envs.sim_cost import SimCost


def make(env_id: str, *, sim_cost_ms: float = 0.0, max_episode_steps: int | None = None,
         atari: Any = None, train: bool = True, num_threads: int = 1, **kwargs: Any) -> gymnasium.Env:
    """``gymnasium.make(env_id, **kwargs)`` with the registered time limit replaced by
    ``max_episode_steps`` (when given) and ``sim_cost_ms`` of CPU work per step; ``atari``,
    ``train`` and ``num_threads`` are for ALE ids and ignored here."""
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = int(max_episode_steps)
    env = gymnasium.make(env_id, **kwargs)
    if sim_cost_ms and sim_cost_ms > 0:
        env = SimCost(env, sim_cost_ms)
    return env


def make_options(env_cfg: Any) -> dict[str, Any]:
    """No options of its own: the time limit and ``env.kwargs`` are every family's."""
    return {}


def check_options(env: Any) -> None:
    """Refuse, in one line, ``env.atari`` or ``env.num_threads`` > 1 (both are for ALE ids)."""
    atari = env.get("atari")
    threads = env.get("num_threads") or 1
    if atari is not None:
        raise ConfigError(f"env.atari is for ALE/ ids (env=tetris, env.id=ALE/Pong-v5), but env.id="
                          f"{env.id}: remove env.atari, got env.atari={dict(atari)}")
    if threads > 1:
        raise ConfigError(f"env.num_threads is for ALE/ ids (the threads of their AtariVectorEnv), but "
                          f"env.id={env.id}: use env.vector=async to step its environments in "
                          f"parallel, got env.num_threads={threads}")


FAMILY = Family(name="gym", recognises=lambda env_id: True, make=make, make_options=make_options,
                check_options=check_options)
