"""A run that spans several launches (stopped with a checkpoint on a signal, resumed with
``resume=``; docs/runs.md, "A run longer than one allocation") continues where it stopped: its
step and update counts, its training clock and so its learning-rate schedule. Here at the
learner: PPO with ``lr_schedule=linear`` over a time budget (``run.max_train_seconds``, as the
Breakout preset) and over a step budget; the whole path through files and ranks is
tests/test_signal_stop.py's."""

from __future__ import annotations

import pytest

from drlmpi.algos.ppo import PPO
from drlmpi.config.schema import defaults, group_config
from drlmpi.envs.make import make_env
from drlmpi.envs.spec import env_spec
from drlmpi.roles.actor import Actor
from drlmpi.roles.learner import Learner

LR = 1e-3
BUDGET_S = 100.0


def _learner(run: dict) -> Learner:
    cfg = {**group_config("algo", "ppo"), "lr": LR, "lr_schedule": "linear", "rollout_steps": 64,
           "batch_size": 32, "epochs": 1}
    algo = PPO(env_spec(make_env("CartPole-v1")), cfg, seed=0)
    return Learner(algo, lambda: [], {**defaults("run"), "eval_every": 10**9, **run}, reward_threshold=None)


def _feed(learner: Learner, steps: int, seed: int) -> None:
    """``steps`` of two CartPole environments acted by the learner's own policy, then the updates
    they entitle (the learning rate is set from the budget spent before each batch)."""
    actor = Actor([make_env("CartPole-v1") for _ in range(2)], learner.algo, stream_base=0, seed=seed)
    learner.ingest(actor.collect(steps, "steps"), source_rank=0)
    assert learner.train() > 0


@pytest.mark.parametrize("budget", ["seconds", "steps"])
def test_a_resumed_ppo_run_continues_its_counts_clock_and_learning_rate(budget):
    run = ({"max_env_steps": None, "max_train_seconds": BUDGET_S} if budget == "seconds"
           else {"max_env_steps": 1000, "max_train_seconds": None})
    first = _learner(run)
    first.clock.start -= 40.0  # 40 s of training so far (a time budget's schedule reads the clock)
    _feed(first, 200, seed=1)  # 400 steps (a step budget's schedule reads them)
    spent = first.budget_used()
    assert 0.39 < spent < 0.45, spent
    state = first.checkpoint_state()

    resumed = _learner(run)
    resumed.restore(state)
    assert (resumed.env_steps, resumed.updates, resumed.episodes) == (first.env_steps, first.updates,
                                                                       first.episodes)
    assert resumed.clock.elapsed() == pytest.approx(first.clock.elapsed(), abs=0.5)
    assert (first.resumes, resumed.resumes) == (0, 1)
    assert resumed.algo.policy.lr_value == pytest.approx(first.algo.policy.lr_value)
    _feed(resumed, 32, seed=2)  # one more rollout: its rate follows the budget spent in all
    expected = LR * (1 - resumed.budget_used())
    assert resumed.algo.policy.lr_value == pytest.approx(expected, rel=0.02)
    assert resumed.algo.policy.lr_value < 0.65 * LR  # not restarted from the full rate

    restarted = _learner(run)  # what a run that lost its counts would do: the schedule starts over
    _feed(restarted, 32, seed=2)
    assert restarted.algo.policy.lr_value > 0.9 * LR
