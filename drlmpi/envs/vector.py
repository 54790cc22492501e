"""A simulator's environments, stepped together: ``env.vector=sync`` or ``async``.

The banks take a list of actions and return, for every environment, the step's observation
(the *final* one where the episode ended, which is what the experience row needs), reward and
flags, the observation to act on next (the reset one where it ended), and the raw-episode
reports of environments that end whole games (:data:`drlmpi.envs.spec.RAW_EPISODE_KEY`).

* :class:`SerialEnvs` (``sync``): the environments live in the simulator's process and are
  stepped one after another; the watchdog sees each step. Where the family of their id steps
  several together (``Family.join``: :func:`drlmpi.envs.families.joined_bank`), they are
  stepped in the one bank it returns instead.
* :class:`WorkerEnvs` (``async``): one worker process per environment (Gymnasium's
  ``AsyncVectorEnv``, shared memory, ``spawn`` start so no worker inherits MPI state), stepped
  in parallel: one simulator rank then uses up to ``env.num_envs`` cores, like the threads of
  an OpenMP simulator. Resets happen inside the workers in the same step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from drlmpi.envs.families import joined_bank
from drlmpi.envs.spec import RAW_EPISODE_KEY, BankStep
from drlmpi.job_control.progress import PROGRESS

VECTOR_MODES = ("sync", "async")


class SerialEnvs:
    """Environments stepped one after another in this process (``env.vector=sync``), or in the
    one bank their family joins them into (``mode``: the bank's)."""

    mode = "sync"

    def __init__(self, envs: list[gym.Env], dtype: Any = np.float32) -> None:
        self.envs = envs
        self.n = len(envs)
        self.dtype = dtype
        self.joined = joined_bank(envs, dtype)
        if self.joined is not None:
            self.mode = self.joined.mode

    def reset(self, seed: int) -> np.ndarray:
        if self.joined is not None:
            return self.joined.reset(seed)
        return np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)]).astype(self.dtype)

    def step(self, actions: list[Any]) -> BankStep:
        if self.joined is not None:
            return self.joined.step(actions)
        progress = PROGRESS
        out: list[np.ndarray] = []
        nxt: list[np.ndarray] = []
        reward = np.zeros(self.n)
        terminated = np.zeros(self.n, dtype=bool)
        truncated = np.zeros(self.n, dtype=bool)
        raw: dict[int, tuple[float, int]] = {}
        for i, env in enumerate(self.envs):
            progress.begin("env.step of environment %d", i)
            obs, reward[i], terminated[i], truncated[i], info = env.step(actions[i])
            progress.done()
            out.append(obs)
            if RAW_EPISODE_KEY in info:
                ret, length = info[RAW_EPISODE_KEY]
                raw[i] = (float(ret), int(length))
            if terminated[i] or truncated[i]:
                progress.begin("env.reset of environment %d", i)
                obs, _ = env.reset()
                progress.done()
            nxt.append(obs)
        return BankStep(np.stack(out).astype(self.dtype, copy=False), reward, terminated, truncated,
                        np.stack(nxt).astype(self.dtype, copy=False), raw)

    def close(self) -> None:
        if self.joined is not None:
            self.joined.close()
        for env in self.envs:
            env.close()


class WorkerEnvs:
    """One worker process per environment, stepped in parallel (``env.vector=async``)."""

    mode = "async"

    def __init__(self, make_fns: list[Callable[[], gym.Env]], dtype: Any = np.float32) -> None:
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode

        self.n = len(make_fns)
        self.dtype = dtype
        with PROGRESS.paused("start-up: starting %d environment worker process(es)", self.n):
            self.vec = AsyncVectorEnv(make_fns, shared_memory=True, context="spawn",
                                      autoreset_mode=AutoresetMode.SAME_STEP)

    def reset(self, seed: int) -> np.ndarray:
        obs, _ = self.vec.reset(seed=[seed + i for i in range(self.n)])
        return np.asarray(obs).astype(self.dtype, copy=False)

    def step(self, actions: list[Any]) -> BankStep:
        PROGRESS.begin("env.step of %d environments in worker processes", self.n)
        nxt, reward, terminated, truncated, info = self.vec.step(np.asarray(actions))
        PROGRESS.done()
        nxt = np.asarray(nxt).astype(self.dtype)  # a copy: the shared buffer is reused
        obs = nxt
        raw: dict[int, tuple[float, int]] = {}
        if "final_obs" in info:
            done = np.nonzero(info["_final_obs"])[0]
            obs = nxt.copy()
            for i in done:
                obs[i] = info["final_obs"][i]
            # A game ends only where an episode does: its report is in the ended step's info.
            final = info.get("final_info", {})
            if RAW_EPISODE_KEY in final:
                for i in np.nonzero(final[f"_{RAW_EPISODE_KEY}"])[0]:
                    ret, length = final[RAW_EPISODE_KEY][i]
                    raw[int(i)] = (float(ret), int(length))
        return BankStep(obs, np.asarray(reward, dtype=np.float64), np.asarray(terminated, dtype=bool),
                        np.asarray(truncated, dtype=bool), nxt, raw)

    def close(self) -> None:
        self.vec.close()
