"""``run.deterministic``: the settings it makes (CPU), and CUDA learners that repeat bit for bit
(on a GPU: ``bash .ci/device_check`` runs these with the other CUDA tests)."""

from __future__ import annotations

import csv
import os

import pytest
import torch

from drlmpi.device.determinism import CUBLAS_WORKSPACE, set_deterministic
from tests.mpirun import fresh_python, run_job
from tests.shared_runs import TINY_DQN
from tests.test_images import IMAGE_ENV
from tests.test_reproducible import CLOCKS, tensors

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_the_switch_sets_and_clears_the_settings(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    benchmark = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        set_deterministic(True)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE
    finally:
        set_deterministic(False)
        torch.backends.cudnn.benchmark = benchmark
    assert not torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.deterministic


def test_a_runs_matmul_precision_is_set_for_the_process():
    """``run.matmul_precision`` reaches torch (the function every rank calls before its role)."""
    from omegaconf import OmegaConf

    from drlmpi.config.schema import defaults
    from drlmpi.device.determinism import apply_run_settings

    run = OmegaConf.create(defaults("run"))
    assert run.matmul_precision == "highest"  # full float32 unless asked
    try:
        run.matmul_precision = "high"
        apply_run_settings(run)
        assert torch.get_float32_matmul_precision() == "high"
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.set_float32_matmul_precision("highest")


def test_leaving_it_off_never_loads_the_compiler_stack():
    """A rank that compiles nothing - a simulator, or a learner on the CPU - must not pay for
    ``torch._dynamo`` (about a second of CPU per process, in every job's start-up): with the
    switch left off, nothing imports it, not even a learner's optimizer taking a step and saving
    its state. Fails when ``set_deterministic(False)`` calls ``torch.use_deterministic_algorithms``
    unconditionally (it imports ``torch._inductor``), and when a CPU learner builds a
    ``torch.optim`` optimizer (constructing one imports ``torch._dynamo``)."""
    code = ("import sys\n"
            "import torch\n"
            "from drlmpi.device.determinism import set_deterministic\n"
            "set_deterministic(False)\n"
            "from drlmpi.algos.dqn import DQN\n"
            "from drlmpi.config.schema import group_config\n"
            "from drlmpi.envs.make import probe_spec\n"
            "algo = DQN(probe_spec('CartPole-v1'), group_config('algo', 'dqn'), seed=0)\n"
            "batch = {'obs': torch.randn(4, 4), 'action': torch.zeros(4, 1), 'reward': torch.ones(4),\n"
            "         'next_obs': torch.randn(4, 4), 'terminated': torch.zeros(4)}\n"
            "algo.update_on(batch)\n"
            "algo.load_training_state(algo.training_state())\n"
            "loaded = [m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules]\n"
            "print(algo.updates, sorted(loaded))\n")
    proc = fresh_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "1 []"


def _rows(run_dir) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as fh:
        return [{k: v for k, v in row.items() if k not in CLOCKS} for row in csv.DictReader(fh)]


CUDA_RUNS = {
    "dqn": [*TINY_DQN, "run.max_env_steps=1500"],
    "ppo-cnn": ["algo=ppo", IMAGE_ENV, "env.reward_threshold=null", "algo.encoder=cnn",
                "algo.rollout_steps=128", "algo.batch_size=32", "algo.epochs=2", "run.max_env_steps=768",
                "run.eval_every=100000", "run.progress_every_s=0"],
}


@needs_cuda
@pytest.mark.parametrize("name", list(CUDA_RUNS))
def test_a_deterministic_cuda_run_repeats_bit_for_bit(tmp_path, name):
    """Two runs of one seed on the GPU, captured updates and (PPO) a CNN: the same metrics.csv
    but its clocks, the same policy.pt."""
    overrides = [*CUDA_RUNS[name], "device=cuda", "run.deterministic=true"]
    first, again = (run_job(1, overrides, tmp_path / run, timeout=300) for run in ("a", "b"))
    for job in (first, again):
        assert job.returncode == 0, job.stderr[-3000:]
    rows = _rows(first.run_dir)
    assert len(rows) > 10 and rows == _rows(again.run_dir)
    mine = tensors(torch.load(first.run_dir / "policy.pt", weights_only=False))
    theirs = tensors(torch.load(again.run_dir / "policy.pt", weights_only=False))
    assert mine and all(torch.equal(mine[k], theirs[k]) for k in mine)
