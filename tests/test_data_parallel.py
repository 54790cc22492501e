"""Data-parallel learning gives the parameters of one process learning from all the data.

Averaging N ranks' gradients of mean losses over equal minibatches is the gradient of the mean
loss over the concatenated minibatch, so ``allgather`` (either reduction) and the parameter
server must end with the parameters - online AND target networks - of one process that updated
on the concatenated minibatches (within float tolerance). Run on MPI pool ranks with the
topologies' real sync classes (tests/dp_reference.py).
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.dp_reference import concatenated, make_algo
from tests.shared_runs import TINY_DQN

UPDATES = 6


def _reference(name: str, contributors: list[int]) -> dict[str, torch.Tensor]:
    algo = make_algo(name)
    for k in range(UPDATES):
        algo.update_on(concatenated(algo, contributors, k))
    return algo.state_dict()


@pytest.mark.parametrize(("mode", "ranks", "contributors"), [
    ("allreduce", 3, [0, 1, 2]),
    ("allgather", 2, [0, 1]),
    ("server", 3, [1, 2]),
    ("gloo", 3, [0, 1, 2]),
    ("groups", 4, [0, 2]),  # 2 x (1 + 1): the learners' communicator of topology=groups
    ("groups", 6, [0, 3]),  # 2 x (1 + 2)
])
def test_data_parallel_equals_one_process_on_the_concatenated_batch(pool, tmp_path, mode, ranks,
                                                                   contributors):
    names = ["dqn", "td3"]
    pool.submit(ranks, "tests.pool_worker:data_parallel", mode=mode, out_dir=str(tmp_path), updates=UPDATES,
                names=names).result()
    for name in names:
        reference = _reference(name, contributors)
        initial = make_algo(name).state_dict()
        for rank in contributors if mode == "groups" else range(ranks):
            state = torch.load(tmp_path / f"{name}_rank{rank}.pt", weights_only=True)
            assert state.keys() == reference.keys()
            for key, expected in reference.items():
                assert torch.allclose(state[key], expected, atol=2e-5, rtol=1e-4), (name, rank, key)
        # The targets moved too (TD3: Polyak on actor steps; DQN: copied every 3 updates), so
        # the comparison covers the after-update hooks on every rank, the server included.
        assert any("target" in k and not torch.equal(v, initial[k]) for k, v in reference.items())


@pytest.mark.parametrize("topology", ["allgather", "parameter_server"])
def test_the_wait_for_a_learner_slow_to_build_its_network_is_start_up_not_training(pool, tmp_path, topology):
    """2 ranks, rank 1 building its network 2 s after rank 0 (what sixteen CUDA contexts made
    one after another on one GPU did to rank 0's clock): rank 0's training clock starts once
    every rank has its network, so the run's train_seconds leave the 2 s out, its
    startup_seconds hold them and its wall_seconds keep them."""
    delay = 2.0
    run_dir = tmp_path / "run"
    pool.submit(2, "tests.pool_worker:slow_to_build", overrides=[f"topology={topology}", *TINY_DQN,
                                                                  "run.max_env_steps=256"],
                run_dir=str(run_dir), rank=1, delay_s=delay).result()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 256
    assert summary["train_seconds"] < delay / 2, summary["train_seconds"]
    assert summary["wall_seconds"] > 0.9 * delay, summary["wall_seconds"]
    assert delay * 0.9 < summary["startup_seconds"] < delay * 1.5, summary["startup_seconds"]
    assert summary["eval_seconds"] < delay / 2  # the wait is not counted as evaluation
