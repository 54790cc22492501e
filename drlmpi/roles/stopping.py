"""When a learner's run stops: the training clock (wall time with evaluations taken out), greedy
evaluations every ``run.eval_every`` steps and the solve they find, the share of the budget
spent, and the one reason the run stops (:class:`Stopping`, a part of
:class:`~drlmpi.roles.learner.Learner`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from drlmpi.algos.base import Algorithm
from drlmpi.roles.evaluate import evaluate


class TrainingClock:
    """Wall-clock time of a run with evaluation pauses and start-up waits taken out."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.paused_s = 0.0
        #: seconds of waiting for other ranks before training began (:meth:`starts_now`)
        self.startup_s = 0.0
        #: training seconds when the clock was set (0, or a resumed run's saved time)
        self._set_at = 0.0

    def set_to(self, wall: float, train: float, startup: float = 0.0) -> None:
        """Continue from ``wall`` seconds of wall clock, ``train`` of them training and
        ``startup`` of them start-up (a resume)."""
        self.start = time.perf_counter() - wall
        self.startup_s = startup
        self.paused_s = wall - train - startup
        self._set_at = train

    def starts_now(self) -> None:
        """Training starts now, not when the clock was set: the seconds since are start-up (a
        learner waiting for the slowest rank to build its network), off the training clock and
        on the wall clock. Called before the run's first step."""
        self.startup_s += self.elapsed() - self._set_at

    def exclude(self, seconds: float) -> None:
        """Take ``seconds`` off the training clock (an evaluation, a checkpoint being written)."""
        self.paused_s += seconds

    def elapsed(self) -> float:
        """Seconds since start, excluding evaluation and start-up."""
        return time.perf_counter() - self.start - self.paused_s - self.startup_s

    def wall(self) -> float:
        """Seconds since start, including evaluation."""
        return time.perf_counter() - self.start


class Moment(NamedTuple):
    """A learner's counters and clocks at one moment (what a ``metrics.csv`` row is stamped with)."""

    train_seconds: float
    wall_seconds: float
    env_steps: int
    updates: int


class Stopping:
    """The learner's budget, evaluations and stop decision. It reads the counters and the
    ``run`` options below, which :class:`~drlmpi.roles.learner.Learner` sets, and keeps the
    evaluation history (``next_eval``, ``evaluations``, ``last_eval``, ``best_eval``,
    ``solved_at``) and the stop reason up to date."""

    algo: Algorithm
    log: Callable[..., None] | None
    seed: int
    clock: TrainingClock
    env_steps: int
    episodes: int
    updates: int
    # the run section: budgets, evaluation, threshold handling
    max_env_steps: int | None
    max_train_seconds: float | None
    max_episodes: int | None
    eval_every: int
    eval_episodes: int
    eval_seed_offset: int
    stop_on_solve: bool
    reward_threshold: float | None
    stop_request: Callable[[], str | None] | None
    # evaluation history and the stop
    next_eval: int
    evaluations: int
    last_eval: float | None
    best_eval: float | None
    solved_at: dict[str, float] | None
    _stopped_by: str | None
    _time_schedules: bool
    _make_eval_envs: Callable[[], list[gym.Env]]
    _eval_envs: list[gym.Env] | None

    # -- the budget ---------------------------------------------------------------------------
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

    def settle(self) -> float:
        """Wait for queued updates (:meth:`~drlmpi.roles.learner.Learner.settle`)."""
        return 0.0

    # -- evaluation and stopping --------------------------------------------------------------
    def evaluation_due(self) -> bool:
        """Whether ``eval_every`` job-wide steps have passed since the last evaluation was due."""
        return self.env_steps >= self.next_eval

    def take_evaluation(self) -> int:
        """Move the schedule past this evaluation (the next is due ``eval_every`` steps on)
        and return its index, the count of evaluations recorded before it (its seeds follow
        it: :meth:`evaluation_seed`)."""
        while self.next_eval <= self.env_steps:
            self.next_eval += self.eval_every
        return self.evaluations

    def evaluation_seed(self, index: int) -> int:
        """The seed of the first episode of evaluation ``index``; episode ``j`` adds ``j``."""
        return self.seed + self.eval_seed_offset + index * self.eval_episodes

    def moment(self) -> Moment:
        """The counters and clocks now, to stamp what is recorded later (an evaluation the
        simulators play: :meth:`record_evaluation`)."""
        return Moment(self.clock.elapsed(), self.clock.wall(), self.env_steps, self.updates)

    def maybe_evaluate(self, force: bool = False) -> bool:
        """Evaluate greedily if ``eval_every`` steps have passed; returns True if it ran.

        The time spent is taken off the training clock.
        """
        if not force and not self.evaluation_due():
            return False
        self.settle()  # queued updates finish on the training clock, not the evaluation's
        index = self.take_evaluation()
        t0 = time.perf_counter()
        if self._eval_envs is None:
            self._eval_envs = self._make_eval_envs()
        returns = evaluate(self.algo, self._eval_envs, self.eval_episodes, seed=self.evaluation_seed(index))
        # Take the evaluation off the clock *before* recording anything, so neither the
        # metrics row nor the time to threshold includes it.
        self.clock.exclude(time.perf_counter() - t0)
        self.record_evaluation(returns)
        return True

    def record_evaluation(self, returns: np.ndarray, at: Moment | None = None) -> None:
        """Count an evaluation's greedy ``returns``: the last and best means, the ``eval`` row of
        the log and the solve, stamped with ``at`` (the moment its weights were sent, for one
        the simulators played) or now."""
        self.evaluations += 1
        mean = float(returns.mean())
        self.last_eval = mean
        self.best_eval = mean if self.best_eval is None else max(self.best_eval, mean)
        if self.log is not None:
            stamp = {} if at is None else {"at": at}
            self.log("eval", return_=mean, length=0, rank=-1, return_std=float(returns.std()), **stamp)
        if (self.solved_at is None and self.reward_threshold is not None
                and mean >= self.reward_threshold):
            at = at or self.moment()
            self.solved_at = {
                "train_seconds": at.train_seconds,
                "env_steps": at.env_steps,
                "updates": at.updates,
            }

    def stop_reason(self) -> str | None:
        """Why the run should stop now (``None``: keep going). The first reason found is kept:
        a run stops once, for one reason, and what comes after the stop (the last updates, the
        signal's checkpoint, the summary) reads that reason even if a budget runs out meanwhile."""
        if self._stopped_by is None:
            self._stopped_by = self._find_stop_reason()
        return self._stopped_by

    def _find_stop_reason(self) -> str | None:
        if self.stop_on_solve and self.solved_at is not None:
            return "solved"
        if self.max_env_steps is not None and self.env_steps >= self.max_env_steps:
            return "max_env_steps"
        if self.max_episodes is not None and self.episodes >= int(self.max_episodes):
            return "max_episodes"
        if self.max_train_seconds is not None and self.clock.elapsed() >= float(self.max_train_seconds):
            return "max_train_seconds"
        if self.stop_request is not None and self.stop_request() is not None:
            return "signal"
        return None

    def close(self) -> None:
        """Close the evaluation environments."""
        for env in self._eval_envs or []:
            env.close()
