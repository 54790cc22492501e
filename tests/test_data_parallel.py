"""Data-parallel learning gives the parameters of one process learning from all the data.

Averaging N ranks' gradients of mean losses over equal minibatches is the gradient of the mean
loss over the concatenated minibatch, so ``allgather`` (either reduction) and the parameter
server must end with the parameters - online AND target networks - of one process that updated
on the concatenated minibatches (within float tolerance). Run under mpiexec with the topologies'
real sync classes (tests/dp_reference.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from drlmpi.algos.base import local_sync
from tests.conftest import REPO
from tests.dp_reference import concatenated, make_algo

UPDATES = 6


def _pythonpath() -> str:
    """This checkout first, then whatever the caller's PYTHONPATH already holds."""
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


def _reference(name: str, contributors: list[int]) -> dict[str, torch.Tensor]:
    algo = make_algo(name)
    for k in range(UPDATES):
        algo.update_on(concatenated(algo, contributors, k), local_sync)
    return algo.state_dict()


@pytest.mark.parametrize(("mode", "ranks", "contributors"), [
    ("allreduce", 3, [0, 1, 2]),
    ("allgather", 2, [0, 1]),
    ("server", 3, [1, 2]),
    ("gloo", 3, [0, 1, 2]),
    ("groups", 4, [0, 2]),  # 2 x (1 + 1): the learners' communicator of topology=groups
    ("groups", 6, [0, 3]),  # 2 x (1 + 2)
])
def test_data_parallel_equals_one_process_on_the_concatenated_batch(tmp_path, mode, ranks, contributors):
    names = ["dqn", "td3"]
    script = str(REPO / "tests" / "dp_reference.py")
    cmd = ["mpiexec", "-n", str(ranks), sys.executable, "-m", "mpi4py", script, mode, str(tmp_path),
           str(UPDATES), *names]
    job = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": _pythonpath()})
    assert job.returncode == 0, job.stderr[-3000:]
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
