"""The two roles every topology wires together: simulating (:class:`Actor`) and learning
(:class:`Learner`), plus greedy evaluation and the training clock.

No MPI here: a topology moves the packed rows an :class:`Actor` produces to a :class:`Learner`,
and the learner's flat policy parameters back. Both record their progress (environment steps,
batches of updates) for the watchdog (:mod:`drlmpi.watchdog`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from drlmpi.algos.base import Algorithm, GradSync, local_sync
from drlmpi.vector import SerialEnvs, WorkerEnvs
from drlmpi.watchdog import PROGRESS

MAX_CHUNK_STEPS = 1_000_000  # a chunk never grows past this many rows per environment
# A batch of updates records progress for the watchdog at least every this many updates
# (rounded up to a multiple of algo.updates_per_graph), so a long batch is not one silent step.
UPDATES_PER_PROGRESS = 32


class Actor:
    """Steps its environments in lock step with one batched forward pass and packs experience
    rows.

    Args:
        envs: the environments this simulator owns: a list (stepped one after another here) or
            a bank (:mod:`drlmpi.vector`: ``env.vector=async`` steps them in worker processes).
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
        """One step of every environment; returns its rows and the episodes it finished."""
        layout = self.layout
        rows = layout.empty(self.n_envs)
        PROGRESS.begin("acting (policy forward pass)")
        actions, extras = self.algo.act(self.obs, self.global_steps(), explore=True)
        PROGRESS.done()
        layout.put_obs(rows, "obs", self.obs)
        layout.column(rows, "action")[:] = actions
        layout.column(rows, "stream")[:, 0] = self.streams
        if extras is not None:
            start = layout.slices[self.algo.extra_columns[0][0]].start
            rows[:, start : start + extras.shape[1]] = extras
        step = self.envs.step([self.algo.env_action(a) for a in actions])
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
    lengths = layout.column(rows, "episode_length")[:, 0]
    ends = np.nonzero(lengths)[0]
    out = np.empty((len(ends), 2), dtype=np.float32)
    out[:, 0] = layout.column(rows, "episode_return")[ends, 0]
    out[:, 1] = lengths[ends]
    return out


class TrainingClock:
    """Wall-clock time of a run with evaluation pauses taken out."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.paused_s = 0.0

    def elapsed(self) -> float:
        """Seconds since start, excluding evaluation."""
        return time.perf_counter() - self.start - self.paused_s

    def wall(self) -> float:
        """Seconds since start, including evaluation."""
        return time.perf_counter() - self.start


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


class Learner:
    """Owns the learning algorithm, the job-wide counters, evaluation and the stop decision.

    Topologies drive it through methods only (they never assign its attributes):

    * :meth:`ingest` - experience arrived from a simulator: store it, count it, log its episodes;
    * :meth:`store` + :meth:`count_steps` - data-parallel ranks store their own rows and count
      the job-wide steps the ranks agreed on;
    * :meth:`discard` - count and log experience without learning from it (too stale);
    * :meth:`train` - run the updates the data entitles (gradients reduced by a ``sync``);
      :meth:`train_free` - one update regardless (a free-running learner);
      :meth:`apply_remote_updates` - updates whose gradients were computed on other ranks (a
      parameter server);
    * :meth:`policy_weights` - the flat policy parameters simulators need (one copy on a GPU).

    Args:
        algo: the learner-side algorithm instance.
        make_eval_envs: builds the evaluation environments (called once, lazily).
        run: the ``run`` section of the config (budgets, evaluation, threshold handling).
        reward_threshold: greedy evaluation mean that counts as solved.
        log: receives ``log(kind, **fields)`` for episodes and evaluations (or ``None``).
        seed: seeds evaluation episodes (``seed + run.eval_seed_offset + ...``).
        mpi_clock: seconds spent inside MPI so far on this rank: MPI time during updates
            (gradient collectives) is counted as MPI wait, not as learning.
    """

    def __init__(self, algo: Algorithm, make_eval_envs: Callable[[], list[gym.Env]],
                 run: Any, reward_threshold: float | None,
                 log: Callable[..., None] | None = None, seed: int = 0,
                 mpi_clock: Callable[[], float] | None = None) -> None:
        self.algo = algo
        self._make_eval_envs = make_eval_envs
        self._eval_envs: list[gym.Env] | None = None
        self.max_env_steps = None if run.get("max_env_steps") is None else int(run["max_env_steps"])
        self.max_train_seconds = run.get("max_train_seconds")
        self.max_episodes = run.get("max_episodes")
        self.eval_every = int(run["eval_every"])
        self.eval_episodes = int(run["eval_episodes"])
        self.eval_seed_offset = int(run.get("eval_seed_offset", 1_000_000))
        self.recent_window = int(run.get("recent_window", 20))
        self.stop_on_solve = bool(run["stop_on_solve"])
        self.reward_threshold = reward_threshold
        self.log = log
        self.seed = seed
        self.clock = TrainingClock()
        self.env_steps = 0
        self.episodes = 0
        self.pending_updates = 0
        self.learn_s = 0.0
        self.next_eval = self.eval_every
        self.solved_at: dict[str, float] | None = None
        self.last_eval: float | None = None
        self.best_eval: float | None = None
        self.evaluations = 0
        self.recent_returns: list[float] = []
        # The latest update's metrics (loss, Q, KL...): a mapping name -> float whose values
        # may still be one device tensor (drlmpi.device.Metrics), converted when first read.
        self.last_metrics: Mapping[str, float] = {}
        self.policy_lags: list[int] = []  # learner updates between acting and learning
        self._time_schedules = True  # see follow_steps_only
        self.mpi_clock: Callable[[], float] = mpi_clock or (lambda: 0.0)

    @property
    def updates(self) -> int:
        """Gradient updates done so far."""
        return self.algo.updates

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint_state(self, with_storage: bool = True) -> dict[str, Any]:
        """The algorithm's training state and this learner's counters, clocks and evaluation
        history (tensors and plain values only: see :mod:`drlmpi.checkpoint`)."""
        return {
            "algo": self.algo.training_state(with_storage=with_storage),
            "learner": {
                "env_steps": self.env_steps, "episodes": self.episodes,
                "pending_updates": self.pending_updates, "learn_s": self.learn_s,
                "next_eval": self.next_eval, "solved_at": self.solved_at, "last_eval": self.last_eval,
                "best_eval": self.best_eval, "evaluations": self.evaluations,
                "recent_returns": list(self.recent_returns),
                "policy_lags": torch.tensor(self.policy_lags, dtype=torch.int64),
                "train_seconds": self.clock.elapsed(), "wall_seconds": self.clock.wall(),
            },
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`checkpoint_state`: the clocks go on from the saved times."""
        self.algo.load_training_state(state["algo"])
        saved = state["learner"]
        for key in ("env_steps", "episodes", "pending_updates", "next_eval", "evaluations"):
            setattr(self, key, int(saved[key]))
        self.learn_s = float(saved["learn_s"])
        self.solved_at = saved["solved_at"]
        self.last_eval, self.best_eval = saved["last_eval"], saved["best_eval"]
        self.recent_returns = [float(r) for r in saved["recent_returns"]]
        self.policy_lags = saved["policy_lags"].tolist()
        wall, train = float(saved["wall_seconds"]), float(saved["train_seconds"])
        self.clock.start = time.perf_counter() - wall
        self.clock.paused_s = wall - train

    @property
    def layout(self) -> Any:
        """The experience layout of the rows this learner takes."""
        return self.algo.layout

    # -- experience ---------------------------------------------------------------------------
    def ingest(self, rows: np.ndarray, source_rank: int, policy_lag: int | None = None) -> int:
        """Store experience from ``source_rank``, count it, log the episodes it finished.

        ``policy_lag``: learner updates between the policy that acted and now, if known.
        Returns the updates these rows entitle.
        """
        n = rows.shape[0]
        if n == 0:
            return 0
        due = self.store(rows)
        self.env_steps += n
        if policy_lag is not None:
            self.policy_lags.append(int(policy_lag))
        self.log_episodes(rows, source_rank)
        return due

    def store(self, rows: np.ndarray) -> int:
        """Store rows and accrue the updates they entitle, without counting job-wide steps
        (data-parallel ranks count the agreed job-wide total with :meth:`count_steps`).
        Returns the updates these rows entitle."""
        if rows.shape[0] == 0:
            return 0
        self.algo.observe(rows)
        due = self.algo.updates_due(rows.shape[0])
        self.pending_updates += due
        return due

    def count_steps(self, n: int) -> None:
        """Count ``n`` job-wide environment steps stored or learned from elsewhere."""
        self.env_steps += int(n)

    def discard(self, rows: np.ndarray, source_rank: int) -> None:
        """Count experience and log its episodes without learning from it (e.g. too stale)."""
        self.env_steps += rows.shape[0]
        self.log_episodes(rows, source_rank)

    def log_episodes(self, rows: np.ndarray, source_rank: int) -> None:
        """Count and log the episodes that ``rows`` finished (without storing the rows)."""
        for ret, length in episode_stats(rows, self.algo.layout):
            self.record_episode(float(ret), int(length), source_rank)

    def record_episode(self, episode_return: float, length: int, source_rank: int) -> None:
        """Count and log one finished training episode run by ``source_rank``."""
        self.episodes += 1
        self.recent_returns.append(episode_return)
        del self.recent_returns[:-self.recent_window]
        if self.log is not None:
            self.log("episode", return_=episode_return, length=length, rank=source_rank)

    # -- learning -----------------------------------------------------------------------------
    def train(self, sync: GradSync = local_sync, max_updates: int | None = None) -> int:
        """Run the updates the stored data entitles (at most ``max_updates``); returns count."""
        n = self.pending_updates if max_updates is None else min(self.pending_updates, max_updates)
        self._run_updates(lambda k: self.algo.run_updates(k, sync), n)
        self.pending_updates -= n
        return n

    def train_free(self, sync: GradSync = local_sync) -> None:
        """One update regardless of what the data entitles (a free-running learner; the
        algorithm must be :meth:`~drlmpi.algos.base.Algorithm.ready_to_update`)."""
        self._run_updates(lambda k: self.algo.checked_update(sync))

    def apply_remote_updates(self, n: int, sync: GradSync) -> None:
        """``n`` updates whose gradients were computed on other ranks: for each network the
        update's schedule names, ``sync`` brings the gradients in and steps; then the
        algorithm's own after-update hooks run (target networks)."""
        def updates(k: int) -> Mapping[str, float]:
            metrics: Mapping[str, float] = {}
            for _ in range(k):
                metrics = self.algo.remote_update(sync)
            return metrics

        self._run_updates(updates, n)

    def _run_updates(self, updates: Callable[[int], Mapping[str, float]], n: int = 1) -> None:
        """Run ``n`` updates (``updates(k)`` runs ``k`` of them) and charge their time, less MPI,
        to ``learn_s``.

        The batch runs in parts of :data:`UPDATES_PER_PROGRESS` updates (a multiple of
        ``algo.updates_per_graph``, so the updates run are the same), each of which is progress
        for the watchdog; gradient collectives inside them are progress of their own."""
        if n <= 0:
            return
        self.algo.set_progress(self.budget_used())
        per_graph = self.algo.updates_per_graph
        part = per_graph * -(-UPDATES_PER_PROGRESS // per_graph)
        t0, mpi0 = time.perf_counter(), self.mpi_clock()
        for first in range(0, n, part):
            k = min(part, n - first)
            PROGRESS.begin("learner updates (%d to %d of a batch of %d)", first + 1, first + k, n)
            self.last_metrics = updates(k)
            PROGRESS.done()
        PROGRESS.begin("learner updates (waiting for the device)")
        self.algo.synchronize()  # a device queues updates: count them when they are done
        PROGRESS.done()
        self.learn_s += (time.perf_counter() - t0) - (self.mpi_clock() - mpi0)

    def budget_used(self) -> float:
        """The share of the run's budget spent: job-wide steps over ``run.max_env_steps``, else
        training seconds over ``run.max_train_seconds`` (0 without a budget, or with only a
        time budget after :meth:`follow_steps_only`)."""
        if self.max_env_steps:
            return min(1.0, self.env_steps / self.max_env_steps)
        if self.max_train_seconds and self._time_schedules:
            return min(1.0, self.clock.elapsed() / float(self.max_train_seconds))
        return 0.0

    def follow_steps_only(self) -> None:
        """Schedules follow job-wide steps only, never this rank's clock: learners that must
        stay identical (data-parallel ranks averaging gradients) agree on steps, not on clocks.
        With only ``run.max_train_seconds`` they then keep their initial values (said once)."""
        self._time_schedules = False
        if not self.max_env_steps and self.max_train_seconds and self.log is not None \
                and getattr(self.algo, "lr_schedule", "constant") != "constant":
            warnings.warn(f"drlmpi: algo.lr_schedule={self.algo.lr_schedule} follows run.max_env_steps "
                          f"under data-parallel learners (their clocks differ); with only "
                          f"run.max_train_seconds the learning rate stays constant", stacklevel=2)

    def finish(self) -> None:
        """At a budget stop, run the updates the last data entitled (as the sequential loop
        does), so every topology does the same number of updates for the same experience.
        After a solve they would be wasted, so they are skipped."""
        if self.stop_reason() != "solved":
            self.train()

    def policy_weights(self) -> np.ndarray:
        """The policy's flat float32 parameters (a view on CPU, one copy from a GPU)."""
        return self.algo.policy.flat.params_numpy()

    # -- evaluation and stopping --------------------------------------------------------------
    def maybe_evaluate(self, force: bool = False) -> bool:
        """Evaluate greedily if ``eval_every`` steps have passed; returns True if it ran.

        The time spent is taken off the training clock.
        """
        if not force and self.env_steps < self.next_eval:
            return False
        while self.next_eval <= self.env_steps:
            self.next_eval += self.eval_every
        t0 = time.perf_counter()
        if self._eval_envs is None:
            self._eval_envs = self._make_eval_envs()
        returns = evaluate(self.algo, self._eval_envs, self.eval_episodes,
                           seed=self.seed + self.eval_seed_offset + self.evaluations * self.eval_episodes)
        self.evaluations += 1
        # Take the evaluation off the clock *before* recording anything, so neither the
        # metrics row nor the time to threshold includes it.
        self.clock.paused_s += time.perf_counter() - t0
        mean = float(returns.mean())
        self.last_eval = mean
        self.best_eval = mean if self.best_eval is None else max(self.best_eval, mean)
        if self.log is not None:
            self.log("eval", return_=mean, length=0, rank=-1, return_std=float(returns.std()))
        if (self.solved_at is None and self.reward_threshold is not None
                and mean >= self.reward_threshold):
            self.solved_at = {
                "train_seconds": self.clock.elapsed(),
                "env_steps": self.env_steps,
                "updates": self.updates,
            }
        return True

    def stop_reason(self) -> str | None:
        """Why the run should stop now (``None``: keep going)."""
        if self.stop_on_solve and self.solved_at is not None:
            return "solved"
        if self.max_env_steps is not None and self.env_steps >= self.max_env_steps:
            return "max_env_steps"
        if self.max_episodes is not None and self.episodes >= int(self.max_episodes):
            return "max_episodes"
        if self.max_train_seconds is not None and self.clock.elapsed() >= float(self.max_train_seconds):
            return "max_train_seconds"
        return None

    def close(self) -> None:
        """Close the evaluation environments."""
        for env in self._eval_envs or []:
            env.close()
