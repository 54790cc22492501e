"""The simulating role: an :class:`Actor` steps its environments with an acting copy of the policy
and packs what happened into experience rows (no MPI here: a topology moves them).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

from drlmpi.algos.base import Algorithm
from drlmpi.config.errors import NonFiniteError
from drlmpi.envs.vector import SerialEnvs, WorkerEnvs
from drlmpi.job_control.progress import PROGRESS

MAX_CHUNK_STEPS = 1_000_000  # a chunk never grows past this many rows per environment


class Actor:
    """Steps its environments in lock step with one batched forward pass and packs experience
    rows.

    Args:
        envs: the environments this simulator owns: a list (stepped one after another here; ALE
            environments join one vector env) or a bank (:mod:`drlmpi.envs.vector`:
            ``env.vector=async`` steps them in worker processes).
        algo: an algorithm instance used only for :meth:`Algorithm.act`.
        stream_base: the job-wide id of ``envs[0]`` (ids ``stream_base + i`` tag each row's
            environment, so a learner can rebuild per-environment sequences).
        seed: seeds the environments' resets (``seed + i``).

    Episodes: a row that ends an episode carries its return and length, the sums this actor
    kept - except for environments that report whole games (``spec.raw_episodes``: Atari with
    episodic life and clipped training rewards), whose rows carry the game's raw return and
    length, on the row where the game ends (a lost life ends a training episode, not a game).
    """

    def __init__(self, envs: list[gym.Env] | SerialEnvs | WorkerEnvs, algo: Algorithm, stream_base: int,
                 seed: int) -> None:
        self.algo = algo
        self.layout = algo.layout
        self.envs = SerialEnvs(envs, self.layout.obs_dtype) if isinstance(envs, list) else envs
        self.n_envs = self.envs.n
        self.raw_episodes = bool(algo.spec.raw_episodes)
        self.streams = np.arange(stream_base, stream_base + self.n_envs, dtype=np.float32)
        self.obs = self.envs.reset(seed)
        self.episode_return = np.zeros(self.n_envs)
        self.episode_length = np.zeros(self.n_envs, dtype=np.int64)
        self.steps = 0  # this actor's own environment steps
        self.episodes = 0
        self.sim_s = 0.0  # wall time spent stepping envs and acting
        # The job-wide step count as last published by the learner, and how to extrapolate it.
        self._global_at_sync = 0
        self._local_at_sync = 0
        self._simulators = 1

    @property
    def weights(self):
        """The acting policy's flat float32 parameters as a numpy view: a topology receives
        published weights straight into it (``Recv``/``Bcast``), no copy."""
        return self.algo.policy.flat.params_numpy()

    def load_weights(self, flat: np.ndarray) -> None:
        """Copy published policy parameters (a learner's, or a message payload) into the
        acting policy."""
        self.algo.policy.flat.load_params(flat)

    def follow(self, algo: Algorithm) -> None:
        """Act with ``algo``'s current policy (a learner's on the same rank): its weights are
        copied in, unless this actor acts with that very network already."""
        if algo is not self.algo:
            self.load_weights(algo.policy.flat.params_numpy())

    def set_global_steps(self, global_steps: int, simulators: int = 1) -> None:
        """Record the learner's job-wide step count; between syncs it is extrapolated as
        ``global + simulators * steps since``."""
        self._global_at_sync = int(global_steps)
        self._local_at_sync = self.steps
        self._simulators = max(1, simulators)

    def global_steps(self) -> int:
        """Best estimate of the job-wide environment step count (drives exploration)."""
        return self._global_at_sync + self._simulators * (self.steps - self._local_at_sync)

    def collect(self, amount: int, unit: str = "steps") -> np.ndarray:
        """Step until ``amount`` steps (per environment) or episodes (in total) are done.

        Returns the packed rows ``(n, layout.width)``, in time order per environment.
        """
        if unit not in ("steps", "episodes"):
            raise ValueError(f"unit must be 'steps' or 'episodes', got {unit!r}")
        t0 = time.perf_counter()
        blocks: list[np.ndarray] = []
        episodes_done = 0
        step_rounds = 0
        while True:
            block, finished = self._step_all()
            blocks.append(block)
            episodes_done += finished
            step_rounds += 1
            if unit == "steps" and step_rounds >= amount:
                break
            if unit == "episodes" and episodes_done >= amount:
                break
            if step_rounds >= MAX_CHUNK_STEPS:
                break
        self.sim_s += time.perf_counter() - t0
        return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]

    def close(self) -> None:
        """Close the environments (and their worker processes)."""
        self.envs.close()

    def _step_all(self) -> tuple[np.ndarray, int]:
        """Act, then one step of every environment; returns its rows and the episodes it
        finished."""
        PROGRESS.begin("acting (policy forward pass)")
        try:
            actions, extras = self.algo.act(self.obs, self.global_steps(), explore=True)
        except Exception as exc:
            # A policy that samples (PPO) raises on NaN observations before any learner sees
            # them: say so as the learner's finite check would (checked only here, at no cost
            # to a step that acts).
            if self.layout.packed or np.isfinite(self.obs).all():
                raise
            raise NonFiniteError(f"non-finite observation in its own environments at their env step "
                                 f"{self.steps:,} (acting on it raised {type(exc).__name__})") from None
        PROGRESS.done()
        return self.step(actions, extras)

    def step_served(self, actions: np.ndarray) -> tuple[np.ndarray, int]:
        """:meth:`step` with actions a learner chose for this simulator (central inference), its
        time counted as simulation (:attr:`sim_s`), as :meth:`collect`'s is."""
        t0 = time.perf_counter()
        try:
            return self.step(actions)
        finally:
            self.sim_s += time.perf_counter() - t0

    def step(self, actions: np.ndarray, extras: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """One step of every environment with ``actions`` ``(n_envs, action_dim)`` (chosen here
        or by a learner that acts for this simulator) and their ``extras`` columns, if any;
        returns the packed rows and the episodes it finished. A row's action is the one the
        environment took (Atari's FIRE after a lost life may replace the policy's)."""
        layout = self.layout
        rows = layout.empty(self.n_envs)
        layout.put_obs(rows, "obs", self.obs)
        layout.column(rows, "action")[:] = actions
        layout.column(rows, "stream")[:, 0] = self.streams
        if extras is not None:
            rows[:, layout.extras_slice] = extras
        step = self.envs.step([self.algo.env_action(a) for a in actions])
        if step.forced:  # the row holds the action the environment got, and its extras
            forced = sorted(step.forced)
            layout.column(rows, "action")[forced, 0] = [step.forced[i] for i in forced]
            if extras is not None:
                redone = self.algo.extras_for(self.obs[forced], layout.column(rows, "action")[forced])
                rows[forced, layout.extras_slice] = redone
        layout.put_obs(rows, "next_obs", step.obs)
        layout.column(rows, "reward")[:, 0] = step.reward
        layout.column(rows, "terminated")[:, 0] = step.terminated
        layout.column(rows, "truncated")[:, 0] = step.truncated
        self.episode_return += step.reward
        self.episode_length += 1
        ended = np.nonzero(step.terminated | step.truncated)[0]
        finished = 0
        for i in ended:
            if self.raw_episodes:
                game = step.raw.get(int(i))
            else:
                game = (self.episode_return[i], self.episode_length[i])
            if game is not None:
                layout.column(rows, "episode_return")[i, 0] = game[0]
                layout.column(rows, "episode_length")[i, 0] = game[1]
                finished += 1
            self.episode_return[i] = 0.0
            self.episode_length[i] = 0
        self.obs = step.next_obs
        self.steps += self.n_envs
        self.episodes += finished
        return rows, finished


def episode_stats(rows: np.ndarray, layout: Any) -> np.ndarray:
    """``(k, 2)`` float32 ``[return, length]`` of the episodes that end in ``rows``."""
    return episode_ends(rows, layout)[1]


def episode_ends(rows: np.ndarray, layout: Any) -> tuple[np.ndarray, np.ndarray]:
    """The positions in ``rows`` of the rows that end an episode, in order, and their
    :func:`episode_stats`."""
    lengths = layout.column(rows, "episode_length")[:, 0]
    ends = np.nonzero(lengths)[0]
    out = np.empty((len(ends), 2), dtype=np.float32)
    out[:, 0] = layout.column(rows, "episode_return")[ends, 0]
    out[:, 1] = lengths[ends]
    return ends, out
