"""Greedy evaluation of a policy on a set of environments (the learner's evaluations, ``play``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from drlmpi.algos.base import Algorithm
from drlmpi.job_control.progress import PROGRESS


def evaluate(algo: Algorithm, envs: list[gym.Env], episodes: int, seed: int) -> np.ndarray:
    """Greedy returns of ``episodes`` episodes, run ``len(envs)`` at a time with batched acting.

    Evaluation is off the training clock but it is work: each environment step is progress for
    the watchdog, so a long evaluation never looks like a hang (a stuck one still does)."""
    progress = PROGRESS
    returns: list[float] = []
    next_seed = seed
    while len(returns) < episodes:
        batch = envs[: min(len(envs), episodes - len(returns))]
        progress.begin("evaluation: env.reset")
        obs = np.stack([env.reset(seed=next_seed + i)[0] for i, env in enumerate(batch)]).astype(
            algo.spec.obs_dtype)
        progress.done()
        next_seed += len(batch)
        totals = np.zeros(len(batch))
        active = np.ones(len(batch), dtype=bool)
        while active.any():
            actions, _ = algo.act(obs, 0, explore=False)
            for i, env in enumerate(batch):
                if not active[i]:
                    continue
                progress.begin("evaluation: env.step of environment %d", i)
                obs_i, reward, terminated, truncated, _ = env.step(algo.env_action(actions[i]))
                progress.done()
                totals[i] += reward
                obs[i] = obs_i
                if terminated or truncated:
                    active[i] = False
        returns.extend(totals.tolist())
    return np.asarray(returns)
