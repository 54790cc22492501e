"""Greedy evaluation of a policy on a set of environments (the learner's evaluations, ``play``),
and a simulator's share of the learner's evaluations (:class:`EvaluationShare`,
``run.eval_on=simulators``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np

from drlmpi.algos.base import Algorithm
from drlmpi.job_control.progress import PROGRESS


def evaluate(algo: Algorithm, envs: list[gym.Env], episodes: int, seed: int) -> np.ndarray:
    """Greedy returns of ``episodes`` episodes seeded ``seed``, ``seed + 1``... (see
    :func:`evaluate_seeded`)."""
    return evaluate_seeded(algo, envs, range(seed, seed + episodes))


def evaluate_seeded(algo: Algorithm, envs: list[gym.Env], seeds: Sequence[int]) -> np.ndarray:
    """Greedy returns of one episode per seed of ``seeds``, run ``len(envs)`` at a time with
    batched acting.

    Evaluation is off the training clock but it is work: each environment step is progress for
    the watchdog, so a long evaluation never looks like a hang (a stuck one still does)."""
    progress = PROGRESS
    returns: list[float] = []
    while len(returns) < len(seeds):
        batch = envs[: min(len(envs), len(seeds) - len(returns))]
        first = len(returns)
        progress.begin("evaluation: env.reset")
        obs = np.stack([env.reset(seed=int(seeds[first + i]))[0] for i, env in enumerate(batch)]).astype(
            algo.spec.obs_dtype)
        progress.done()
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


def share_width(episodes: int, shares: int) -> int:
    """Episodes of the largest share when ``shares`` simulators split ``episodes``."""
    return -(-episodes // shares)


def message_width(episodes: int, shares: int) -> int:
    """Floats in a share's message (:meth:`EvaluationShare.play`): the largest share's returns,
    then the seconds spent."""
    return share_width(episodes, shares) + 1


class EvaluationShare:
    """Simulator ``index`` of ``shares``' part of the learner's evaluations: episode ``j`` of
    evaluation ``e`` is played by the simulator ``j % shares``, seeded ``first_seed + e *
    episodes + j`` as the learner would seed it (:meth:`~drlmpi.roles.stopping.Stopping.maybe_evaluate`),
    so the returns are those of the episodes the learner would have played.

    Args:
        algo: the simulator's acting algorithm (it plays with the weights it last received).
        make_envs: builds ``n`` evaluation environments (called once, lazily).
        first_seed: the learner's seed plus ``run.eval_seed_offset``.
        episodes: ``run.eval_episodes``; envs: ``run.eval_envs`` (this share uses at most its
            own episodes' worth).
    """

    def __init__(self, algo: Algorithm, make_envs: Callable[[int], list[gym.Env]], first_seed: int,
                 episodes: int, envs: int, index: int, shares: int) -> None:
        self.algo = algo
        self._make_envs = make_envs
        self._envs: list[gym.Env] | None = None
        self.first_seed = first_seed
        self.episodes = episodes
        self.mine = list(range(index, episodes, shares))  # the episodes j with j % shares == index
        self.n_envs = min(len(self.mine), envs)
        #: a share's message: the returns (NaN-padded to the largest share) and the seconds spent
        self.width = message_width(episodes, shares)
        self.seconds = 0.0  # spent playing, in total

    def seeds(self, evaluation: int) -> list[int]:
        """The seeds of this share's episodes of evaluation ``evaluation`` (0-based)."""
        return [self.first_seed + evaluation * self.episodes + j for j in self.mine]

    def play(self, evaluation: int) -> np.ndarray:
        """This share's returns of evaluation ``evaluation`` and the seconds they took: one
        float64 message of :attr:`width` (returns NaN-padded, then the seconds)."""
        start = time.perf_counter()
        out = np.full(self.width, np.nan)
        if self.mine:
            if self._envs is None:
                self._envs = self._make_envs(self.n_envs)
            out[: len(self.mine)] = evaluate_seeded(self.algo, self._envs, self.seeds(evaluation))
        spent = time.perf_counter() - start
        self.seconds += spent
        out[-1] = spent
        return out

    def close(self) -> None:
        """Close the evaluation environments."""
        for env in self._envs or []:
            env.close()


def merge_shares(table: np.ndarray, episodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The learner's view of every simulator's :meth:`EvaluationShare.play` message (one row
    per simulator, in simulator order): the returns in episode order (episode ``j`` is row
    ``j % shares``, column ``j // shares``) and each simulator's seconds."""
    shares = table.shape[0]
    returns = np.array([table[j % shares, j // shares] for j in range(episodes)])
    return returns, table[:, -1].copy()
