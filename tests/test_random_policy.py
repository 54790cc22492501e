"""algo=random: uniform random actions, no learning - the raw-stepping ceiling of a topology."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from drlmpi.algos.random_policy import RandomPolicy
from drlmpi.envs.make import probe_spec
from tests.shared_runs import declare


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_acts_within_the_action_space_and_never_learns(env_id):
    spec = probe_spec(env_id)
    algo = RandomPolicy(spec, OmegaConf.create({"name": "random"}), seed=0)
    actions, extras = algo.act(np.zeros((64, spec.obs_dim), np.float32), 0, explore=True)
    assert actions.shape == (64, spec.action_dim) and actions.dtype == np.float32 and extras is None
    if spec.discrete:
        assert set(np.unique(actions)) == set(range(spec.n_actions))
    else:
        assert (actions >= np.array(spec.action_low)).all() and (actions <= np.array(spec.action_high)).all()
    algo.observe(np.zeros((5, algo.layout.width), np.float32))
    assert algo.updates_due(1000) == 0 and algo.policy.flat.numel == 0
    with pytest.raises(RuntimeError, match="never learns"):
        algo.update()


RANDOM_ALLGATHER = declare("random-allgather", 2, [
    "algo=random", "topology=allgather", "run.max_env_steps=1000", "run.eval_every=1000000000",
    "run.progress_every_s=0", "run.stop_on_solve=false"])


def test_ranks_step_independently_under_allgather(runs):
    summary = runs.get(RANDOM_ALLGATHER).summary()
    assert summary["updates"] == 0 and summary["env_steps"] >= 1000 and summary["world_size"] == 2
    assert all(r["env_steps"] > 0 for r in summary["per_rank"])
