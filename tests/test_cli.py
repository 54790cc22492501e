"""``python -m drlmpi`` as a user starts it: what only a real MPI job shows.

A multi-rank run started with ``world_size=N`` re-launches itself under ``mpiexec -n N`` and writes
ONE run directory for all ranks (``.hydra/`` from rank 0 only, a log per rank, nothing outside
it; each rank pinned to a core when asked); a rank that crashes takes the whole job down with a
clear line instead of leaving the others waiting. (Refusals: tests/test_refusals.py; hangs:
tests/test_rank_timeout.py; the topologies' behaviour, in-process: tests/test_topologies.py.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.mpirun import run_job
from tests.shared_runs import TINY_DQN


def test_world_size_relaunches_under_mpiexec_and_writes_one_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "drlmpi", "topology=star", "world_size=3", *TINY_DQN,
           "run.max_env_steps=600", "run.progress_every_s=0.05", "bind_ranks=core",
           f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "starting mpiexec -n 3" in proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 3 and summary["topology"] == "star"
    # bind_ranks=core: rank i pinned to the i-th core this test may use (wrapping on 2 cores)
    cpus = sorted(os.sched_getaffinity(0))
    assert summary["bind_ranks"] == "core"
    assert [r["cpus"] for r in summary["per_rank"]] == [str(cpus[i % len(cpus)]) for i in range(3)]
    assert f"outputs: {run_dir}" in proc.stdout  # rank 0's summary lines
    # One run directory for all ranks; only rank 0 wrote Hydra's files.
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert sorted(p.name for p in run_dir.glob("rank*.log")) == ["rank0.log", "rank1.log", "rank2.log"]
    assert list(tmp_path.iterdir()) == [run_dir]
    assert (run_dir / "policy.pt").is_file() and (run_dir / "metrics.csv").is_file()
    # What the run said: the banner first, then progress with the budget's share and an ETA.
    log = (run_dir / "rank0.log").read_text()
    assert f"drlmpi: dqn on tests.tiny_env:Cue-v0 | topology star, 3 rank(s) | device cpu | budget 600 " \
           f"env steps | run directory {run_dir}" in log.splitlines()[0]
    assert re.search(r"steps +\d+ +\d+% ETA +\d+s \| +[\d,]+ steps/s \| updates", log), log


@pytest.mark.parametrize("topology", ["p2p", "central"])
def test_crashed_simulator_brings_the_job_down(tmp_path, topology):
    """Rank 1 raises mid-run; the learner must not be left waiting in Probe/Recv (p2p) or in
    Waitany (central)."""
    job = run_job(2, [f"topology={topology}", "env.id=tests.crash_env:CrashingCartPole-v0",
                      "+env.kwargs.crash_after=300", "run.progress_every_s=0"],
                  tmp_path / "run", timeout=90)
    assert job.returncode != 0
    assert "drlmpi: rank 1 failed: RuntimeError: simulated simulator crash" in job.stderr
