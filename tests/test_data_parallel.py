"""Data-parallel learning gives the parameters of one process learning from all the data.

Averaging N ranks' gradients of mean losses over equal minibatches is the gradient of the mean
loss over the concatenated minibatch, so ``allgather`` (either reduction) and the parameter
server must end with the parameters - online AND target networks - of one process that updated
on the concatenated minibatches (within float tolerance). Run on MPI pool ranks with the
topologies' real sync classes (tests/dp_reference.py).
"""

from __future__ import annotations

import pytest
import torch

from tests.dp_reference import concatenated, make_algo

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
