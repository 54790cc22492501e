"""The default family: any id Gymnasium registers (``CartPole-v1``, ``LunarLander-v3``...),
made by ``gymnasium.make`` with the time limit and :class:`~drlmpi.envs.sim_cost.SimCost` of a run.
It has no options of its own and recognises every id, so it is tried last."""

from __future__ import annotations

from typing import Any

import gymnasium

from drlmpi.envs.families.base import Family
from drlmpi.envs.sim_cost import SimCost


def make(env_id: str, *, sim_cost_ms: float = 0.0, max_episode_steps: int | None = None,
         train: bool = True, **kwargs: Any) -> gymnasium.Env:
    """``gymnasium.make(env_id, **kwargs)`` with the registered time limit replaced by
    ``max_episode_steps`` (when given) and ``sim_cost_ms`` of CPU work per step; training and
    evaluation environments are alike here (``train`` is ignored)."""
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = int(max_episode_steps)
    env = gymnasium.make(env_id, **kwargs)
    if sim_cost_ms and sim_cost_ms > 0:
        env = SimCost(env, sim_cost_ms)
    return env


FAMILY = Family(name="gym", recognises=lambda env_id: True, make=make)
