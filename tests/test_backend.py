"""topology.backend: the learners' gradients averaged through torch.distributed (gloo on CPUs in
CI, NCCL on GPUs) instead of MPI - the same parameters as the MPI path, every byte counted. (The
refusals: tests/test_refusals.py.)

The NCCL tests need 2 GPUs; on the accelerator machine (2 GPUs):
    python -m pytest -q tests/test_backend.py -k nccl
"""

from __future__ import annotations

import pytest
import torch

from tests.mpirun import run_job
from tests.shared_runs import declare

FAST = ["topology=allgather", "run.max_env_steps=1536", "run.stop_on_solve=false", "algo.learning_starts=256",
        "algo.hidden=[32,32]", "run.eval_every=1000000", "run.progress_every_s=0", "seed=5"]
TWO_GPUS = pytest.mark.skipif(torch.cuda.device_count() < 2,
                              reason="needs 2 CUDA devices (NCCL: one rank per GPU)")


def _job(ranks, extra, tmp_path, name):
    """A run as its own MPI job (the GPU tests: one CUDA context per process)."""
    result = run_job(ranks, [*FAST, *extra], tmp_path / name, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.summary()


VIA_MPI = declare("backend-mpi", 2, [*FAST, "topology.backend=mpi"])
VIA_GLOO = declare("backend-gloo", 2, [*FAST, "topology.backend=gloo"])
GLOO_3 = declare("backend-gloo-n3", 3, [*FAST, "topology.backend=gloo", "topology.check_every=50"])


def test_gloo_averages_gradients_like_mpi_and_counts_every_byte(runs):
    via_mpi = runs.get(VIA_MPI).summary()
    via_gloo = runs.get(VIA_GLOO).summary()
    stats = via_gloo["topology_stats"]
    assert stats["backend"] == "gloo" and via_mpi["topology_stats"]["backend"] == "mpi"
    assert via_gloo["topology_label"] == "allgather[gloo]" and via_mpi["topology_label"] == "allgather"
    # two ranks: a sum of two numbers has one order, so both paths give the same parameters
    assert via_gloo["updates"] == via_mpi["updates"] > 0
    assert stats["param_checksums_per_rank"] == via_mpi["topology_stats"]["param_checksums_per_rank"]
    # one all-reduce of the whole flat gradient per update (DQN: one network), on every rank
    calls, nbytes = stats["backend_calls"]["gradients"]
    assert calls == via_gloo["updates"] and nbytes == calls * via_gloo["policy_param_bytes"]
    for rank in via_gloo["per_rank"]:
        assert rank["backend_calls"]["gradients"] == [calls, nbytes]
        assert "gradients" not in rank["sent"]  # nothing of it went through MPI


def test_gloo_keeps_three_learners_identical(runs):
    summary = runs.get(GLOO_3).summary()
    rows = summary["topology_stats"]["param_checksums_per_rank"]
    assert len(rows) == 3 and rows[0] == rows[1] == rows[2]
    assert summary["topology_stats"]["backend_calls"]["checksums"][0] >= 2  # periodic + final


@TWO_GPUS
def test_nccl_two_gpus_identical_parameters(tmp_path):
    summary = _job(2, ["device=cuda", "topology.backend=auto"], tmp_path, "nccl")
    stats = summary["topology_stats"]
    assert stats["backend"] == "nccl" and summary["topology_label"] == "allgather[nccl]"
    rows = stats["param_checksums_per_rank"]
    assert rows[0] == rows[1]
    calls, nbytes = stats["backend_calls"]["gradients"]
    assert calls == summary["updates"] > 0 and nbytes == calls * summary["policy_param_bytes"]
    assert sorted(r["device"] for r in summary["per_rank"]) == ["cuda:0", "cuda:1"]


@TWO_GPUS
def test_nccl_refuses_more_learner_ranks_than_gpus(tmp_path):
    ranks = torch.cuda.device_count() + 1
    result = run_job(ranks, [*FAST, "device=cuda", "topology.backend=nccl"], tmp_path / "run", timeout=180)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "one GPU per learner rank" in result.stderr and "topology=groups" in result.stderr
