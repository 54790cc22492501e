"""Checkpoint, kill -9, resume: every topology continues in the same run directory, metrics.csv
holds every episode once and in order, and the summary covers the whole run."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from drlmpi.checkpoint import file_generation, rank_file, read_meta
from tests.mpirun import REPO, mpiexec_command

FAST = ["algo.hidden=[32,32]", "algo.batch_size=32", "algo.learning_starts=200", "run.stop_on_solve=false",
        "run.eval_every=1000000", "run.progress_every_s=0", "run.checkpoint_every_s=0.5"]
BUDGET = 5000


def start(ranks: int, overrides: list[str], run_dir) -> subprocess.Popen:
    cmd = [*mpiexec_command(ranks), sys.executable, "-m", "mpi4py", "-m", "drlmpi", *overrides,
           f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPIEXEC_TIMEOUT": "200"}
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def kill_after_checkpoint(proc: subprocess.Popen, run_dir, generations: int = 2,
                          timeout: float = 120) -> dict:
    """Wait for checkpoint generation ``generations``, then kill -9 the whole job."""
    meta_file = run_dir / "checkpoint" / "meta.json"
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"the job ended before its checkpoint: {proc.stderr.read()[-2000:]}")
            if meta_file.exists():
                meta = json.loads(meta_file.read_text())
                if meta["generation"] >= generations:
                    return meta
            time.sleep(0.1)
        raise AssertionError("no checkpoint within the timeout")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def episode_rows(run_dir) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["kind"] == "episode"]


@pytest.mark.parametrize("topology,ranks", [("sequential", 1), ("p2p", 2), ("star", 3), ("async", 3),
                                            ("allgather", 3), ("parameter_server", 3), ("groups", 4)])
def test_kill_then_resume_finishes_with_every_episode_once(topology, ranks, tmp_path):
    run_dir = tmp_path / "run"
    extra = [f"topology={topology}", f"run.max_env_steps={BUDGET}", *FAST]
    if topology == "async":
        extra.append("topology.max_policy_lag=64")
    proc = start(ranks, extra, run_dir)
    kill_after_checkpoint(proc, run_dir)
    meta = read_meta(run_dir)  # read again: the job may have published one more before it died
    assert meta["world_size"] == ranks and meta["topology"] == topology
    holders = {"allgather": list(range(ranks)), "parameter_server": list(range(ranks)), "groups": [0, 2]}
    assert sorted(meta["ranks_with_state"]) == holders.get(topology, [0])
    generation = meta["generation"]
    assert all(rank_file(run_dir, r, generation).is_file() for r in meta["ranks_with_state"])
    # besides the published generation: the next one half written, or the previous one whose
    # deletion the kill interrupted - never anything older
    found = {file_generation(p) for p in (run_dir / "checkpoint").glob("*.pt")}
    assert found <= {generation - 1, generation, generation + 1}, found

    resumed = subprocess.run([sys.executable, "-m", "drlmpi", f"resume={run_dir}"], cwd=REPO,
                             capture_output=True, text=True, timeout=240,
                             env={**os.environ, "OMP_NUM_THREADS": "1", "MPIEXEC_TIMEOUT": "200"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= BUDGET and summary["topology"] == topology
    assert summary["train_seconds"] > meta["train_seconds"]
    assert summary["updates"] > meta["updates"] and summary["env_steps"] > meta["env_steps"]
    rows = episode_rows(run_dir)
    assert len(rows) == summary["episodes"]  # every episode once: none lost, none duplicated
    steps = [int(r["env_steps"]) for r in rows]
    seconds = [float(r["train_seconds"]) for r in rows]
    assert steps == sorted(steps) and seconds == sorted(seconds)  # in order across the two parts
    assert steps[-1] > meta["env_steps"]


def test_resume_refusals(tmp_path):
    def refuse(*args):
        proc = subprocess.run([sys.executable, "-m", "drlmpi", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        return proc.stderr.strip().splitlines()[-1]

    assert refuse(f"resume={tmp_path}").startswith("drlmpi: error: resume: ")
    run_dir = tmp_path / "run"
    proc = start(1, ["run.max_env_steps=100000", *FAST], run_dir)
    kill_after_checkpoint(proc, run_dir, generations=1)
    assert "only run.max_env_steps" in refuse(f"resume={run_dir}", "topology=star")
    line = refuse(f"resume={run_dir}", "run.max_env_steps=0")
    assert line == "drlmpi: error: run.max_env_steps must be >= 1, got 0"
    # Another world size than the checkpoint's: refused by every rank before any message.
    job = subprocess.run([*mpiexec_command(2), sys.executable, "-m", "mpi4py", "-m", "drlmpi",
                          f"resume={run_dir}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert job.returncode != 0
    assert "resume: the checkpoint was written by 1 rank(s) and this job has 2" in job.stderr
