"""DQN: the double-DQN target, exploration schedule, and the update-to-data ratio."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drlmpi.algos.dqn import DQN
from drlmpi.config.errors import ConfigError
from drlmpi.config.schema import group_config
from drlmpi.envs.make import probe_spec


@pytest.fixture
def cfg():
    return group_config("algo", "dqn")


@pytest.fixture
def spec():
    return probe_spec("CartPole-v1")


def test_double_dqn_target_and_huber_loss(cfg, spec):
    cfg.target_update_every = 10_000
    algo = DQN(spec, cfg, seed=0)
    obs = torch.randn(8, 4)
    next_obs = torch.randn(8, 4)
    batch = {"obs": obs, "action": torch.randint(0, 2, (8, 1)).float(), "reward": torch.ones(8),
             "next_obs": next_obs, "terminated": torch.tensor([0, 1] * 4, dtype=torch.float32)}
    # Make the target net differ from the online net so the two roles can be told apart.
    with torch.no_grad():
        for p in algo.q_target.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        online_next = algo.q(next_obs)
        target_next = algo.q_target(next_obs)
        chosen = online_next.argmax(1, keepdim=True)  # online picks, target evaluates
        y = 1.0 + 0.99 * (1 - batch["terminated"]) * target_next.gather(1, chosen).squeeze(1)
        q_taken = algo.q(obs).gather(1, batch["action"].long()).squeeze(1)
        expected = torch.nn.functional.smooth_l1_loss(q_taken, y)
    before = algo.policy.flat.params.clone()
    metrics = algo.update_on(batch)
    assert metrics["loss"] == pytest.approx(float(expected), rel=1e-5)
    assert not torch.equal(before, algo.policy.flat.params)  # it stepped
    assert algo.updates == 1


def test_hard_target_copy_every_n_updates(cfg, spec):
    cfg.target_update_every = 2
    algo = DQN(spec, cfg, seed=0)
    batch = {"obs": torch.randn(4, 4), "action": torch.zeros(4, 1), "reward": torch.ones(4),
             "next_obs": torch.randn(4, 4), "terminated": torch.zeros(4)}
    algo.update_on(batch)
    assert not torch.equal(algo.q_target[0].weight, algo.q[0].weight)
    algo.update_on(batch)
    assert torch.equal(algo.q_target[0].weight, algo.q[0].weight)


def test_epsilon_follows_job_wide_steps(cfg, spec):
    algo = DQN(spec, cfg, seed=0, learner=False)
    assert algo.epsilon(0) == pytest.approx(cfg.eps_start)
    assert algo.epsilon(cfg.exploration_steps // 2) == pytest.approx((cfg.eps_start + cfg.eps_end) / 2)
    assert algo.epsilon(10 * cfg.exploration_steps) == pytest.approx(cfg.eps_end)
    obs = np.zeros((1000, 4), dtype=np.float32)
    greedy, _ = algo.act(obs, 10**9, explore=False)
    assert len(np.unique(greedy)) == 1
    explored, _ = algo.act(obs, 0, explore=True)  # epsilon 1: uniformly random
    assert 400 < np.sum(explored == 0) < 600


def test_updates_due_respects_learning_starts_and_ratio(cfg, spec):
    cfg.learning_starts = 100
    cfg.updates_per_step = 0.25
    algo = DQN(spec, cfg, seed=0)
    rows = algo.layout.empty(50)
    algo.observe(rows)
    assert algo.updates_due(50) == 0  # below learning_starts
    algo.observe(algo.layout.empty(50))
    assert algo.updates_due(50) == 12  # 12.5 -> 12, half carried
    assert algo.updates_due(2) == 1  # 0.5 + 0.5


def test_acting_only_instance_allocates_no_learner_state(cfg, spec):
    algo = DQN(spec, cfg, seed=0, learner=False)
    assert algo.replay is None and algo.policy.optimizer is None


def test_refuses_continuous_actions(cfg):
    with pytest.raises(ConfigError, match="algo=dqn needs a discrete action space.*algo=td3"):
        DQN(probe_spec("Pendulum-v1"), cfg)


def test_plain_dqn_target_uses_the_target_nets_maximum(cfg, spec):
    cfg.double_q = False
    cfg.target_update_every = 10_000
    algo = DQN(spec, cfg, seed=0)
    with torch.no_grad():
        for p in algo.q_target.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    batch = {"obs": torch.randn(8, 4), "action": torch.zeros(8, 1), "reward": torch.zeros(8),
             "next_obs": torch.randn(8, 4), "terminated": torch.zeros(8)}
    with torch.no_grad():
        y = 0.99 * algo.q_target(batch["next_obs"]).max(1).values
        q = algo.q(batch["obs"])[:, 0]
        expected = torch.nn.functional.smooth_l1_loss(q, y)
    assert algo.update_on(batch)["loss"] == pytest.approx(float(expected), rel=1e-5)
