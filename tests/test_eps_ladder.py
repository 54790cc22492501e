"""DQN's exploration ladder (``algo.eps_ladder``, Ape-X): environment i of the job's N explores with
``epsilon ** (1 + alpha * i / (N - 1))``; positions come from the ranks that step environments."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from drlmpi.algos.dqn import DQN
from drlmpi.config.schema import group_config
from drlmpi.envs.make import probe_spec
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.sequential import Sequential
from drlmpi.topologies.star import Star

AFTER_DECAY = 10**9  # job-wide steps past exploration_steps: epsilon is eps_end


def _dqn(ladder: float) -> DQN:
    cfg = OmegaConf.merge(group_config("algo", "dqn"), {"eps_ladder": ladder, "eps_end": 0.1})
    return DQN(probe_spec("CartPole-v1"), cfg, seed=0, learner=False)


def test_the_ladder_spreads_epsilon_over_the_jobs_environments():
    algo = _dqn(7.0)
    algo.set_env_positions(4, 4, 16)  # a simulator's 4 environments, the job's 4th to 7th of 16
    expected = 0.1 ** (1 + 7 * np.arange(4, 8) / 15)
    assert np.allclose(algo.row_epsilons(AFTER_DECAY, 4), expected)
    assert algo.row_epsilons(0, 4) == pytest.approx(np.ones(4))  # epsilon 1 stays 1
    # Rows of other environments (a learner acting for its simulators): the batch's own order.
    assert np.allclose(algo.row_epsilons(AFTER_DECAY, 3), 0.1 ** (1 + 7 * np.arange(3) / 2))
    # What the actions show: the share of random actions per environment, over many steps.
    algo.rng = np.random.default_rng(1)
    greedy = np.zeros((4, 1), np.float32)  # the network's choice: action 0 everywhere
    random_share = np.mean([algo.finish_act(greedy, AFTER_DECAY, True)[0][:, 0] != 0
                            for _ in range(20000)], axis=0)
    assert np.allclose(random_share, expected / 2, atol=0.006)  # half the random draws are 0 too
    assert (algo.finish_act(greedy + 1, AFTER_DECAY, False)[0][:, 0] == 1).all()  # greedy evaluation


def test_without_a_ladder_or_with_one_environment_nothing_changes():
    off = _dqn(0.0)
    off.set_env_positions(4, 4, 16)
    assert off.row_epsilons(AFTER_DECAY, 4) == pytest.approx(0.1)
    alone = _dqn(7.0)
    alone.set_env_positions(0, 1, 1)  # sequential with one environment
    assert np.allclose(alone.row_epsilons(AFTER_DECAY, 1), [0.1])


@pytest.mark.parametrize(("topology", "world", "rank", "num_envs", "expected"), [
    (Star, 16, 1, 1, (0, 1, 15)),  # rank 0 learns; simulators 1..15 are environments 0..14
    (Star, 16, 15, 1, (14, 1, 15)),
    (Star, 2, 1, 15, (0, 15, 15)),  # one simulator of 15 environments: the same ladder
    (Sequential, 1, 0, 4, (0, 4, 4)),
])
def test_positions_follow_the_ranks_that_step_environments(topology, world, rank, num_envs, expected):
    ctx = SimpleNamespace(rank=rank, plan=SimpleNamespace(world_size=world, topology_cls=topology),
                          cfg=OmegaConf.create({"env": {"num_envs": num_envs}, "topology": {}}))
    assert RunContext.env_positions(ctx, 0, num_envs) == expected
