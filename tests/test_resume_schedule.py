"""A run that spans several launches (stopped with a checkpoint on a signal, resumed with
``resume=``; docs/runs.md, "A run longer than one allocation") continues where it stopped: its
step and update counts, its training clock and so its learning-rate schedule. Here at the
learner: PPO with ``lr_schedule=linear`` over a time budget (``run.max_train_seconds``, as the
Breakout preset) and over a step budget; the preset's own path, central PPO resumed from a
checkpoint of its networks alone, through files and pool ranks; a signal's path through every
topology is tests/test_signal_stop.py's."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from drlmpi.algos.ppo import PPO
from drlmpi.config.schema import defaults, group_config
from drlmpi.envs.make import make_env
from drlmpi.envs.spec import env_spec
from drlmpi.outputs.checkpoint import rank_file, read_meta
from drlmpi.roles.actor import Actor
from drlmpi.roles.learner import Learner
from tests.conftest import run_in_pool

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


def test_central_ppo_resumes_from_its_networks_alone(pool, tmp_path):
    """The Breakout preset's way in small: PPO on central, 3 ranks, ``run.checkpoint_replay=false``
    (a checkpoint of networks, optimizer and counters, no rollout rows). ``resume=`` from its
    last periodic checkpoint with a larger budget starts a new rollout and goes on from the saved
    counts; the summary's totals cover both parts, ``part`` and ``per_rank`` the second; every
    game is in metrics.csv once, in order. Failed before the learner dropped, with the rows, the
    updates it owed for them. 6-9 s on an idle machine, 17 s in a loaded fresh-clone run: two short
    runs in the pool (an end-to-end resume of the preset's path is worth them)."""
    run_dir = tmp_path / "run"
    common = ["algo=ppo", "topology=central", "algo.hidden=[32]", "algo.rollout_steps=256",
              "algo.batch_size=64", "algo.lr_schedule=linear", "run.checkpoint_replay=false",
              "run.eval_every=1000000", "run.stop_on_solve=false", "run.progress_every_s=0"]
    run_in_pool(pool, 3, [*common, "run.max_env_steps=6000", "run.checkpoint_every_s=0.3"], run_dir).result()
    meta = read_meta(run_dir)
    saved = torch.load(rank_file(run_dir, 0, meta["generation"]), weights_only=False)
    assert meta["with_storage"] is False and saved["algo"]["storage"] is None
    assert 0 < meta["env_steps"] < 6000 and meta["updates"] > 0
    more = ["run.max_env_steps=9000"]
    pool.submit(3, "tests.pool_worker:resume", run_dir=str(run_dir), extra=more).result()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumes"] == 1 and summary["stop_reason"] == "max_env_steps"
    assert summary["env_steps"] >= 9000
    part = summary["part"]
    assert (part["from_env_steps"], part["from_updates"]) == (meta["env_steps"], meta["updates"])
    assert summary["per_rank"][0]["updates"] == part["updates"] == summary["updates"] - meta["updates"] > 0
    with open(run_dir / "metrics.csv", newline="") as fh:
        games = [r for r in csv.DictReader(fh) if r["kind"] == "episode"]
    steps = [int(r["env_steps"]) for r in games]
    assert len(games) == summary["episodes"] and steps == sorted(steps) and steps[-1] > meta["env_steps"]
