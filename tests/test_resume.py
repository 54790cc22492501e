"""Checkpoint, kill -9, resume: the run continues in the same run directory, metrics.csv holds
every episode once and in order, and the summary covers the whole run.

The job that is killed is a real ``mpiexec`` job; the resumed part runs on MPI pool ranks
(:func:`tests.pool_worker.resume` does what ``python -m drlmpi resume=DIR`` does after
re-reading the run's overrides), except for star, which is resumed from the command line as a
user would (re-launched under ``mpiexec -n 3``). The refusals: tests/test_refusals.py.

Resume restores everything: the runs use :class:`tests.resume_probe.ResumeProbeDQN`, whose
resumed learners write a digest of their state as their first new update starts (a SHA-256 of
every network tensor, online and target, of Adam's moments and step, of the numpy, torch and
replay-sampler random states, plus the update counter and the optimizer's hyperparameters); every
rank that saved state must match, key by key, the same digest of its rank file of the generation
the run resumed from (read before resuming: the resumed part's checkpoints delete it). Checked to
fail when the resume skips the networks' weights, the optimizer state, or any of the three random
states (``TrainingState.load_training_state``, ``ReplayBuffer.load_state``), and when building a
simulator on the learner's rank reseeds torch after the restore (sequential, allgather, parameter
server workers: ``RunContext.make_local_actor``). It costs a few milliseconds per rank; the same
check follows every topology's signal stop (tests/test_signal_stop.py)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from drlmpi.outputs.checkpoint import file_generation, rank_file, read_meta
from tests.mpirun import REPO, mpiexec_command
from tests.resume_probe import ENV_VAR, assert_restored, holders, saved_digests

FAST = ["algo.hidden=[32,32]", "algo.batch_size=32", "algo.learning_starts=200", "algo.updates_per_step=0.1",
        "run.stop_on_solve=false", "run.eval_every=1000000", "run.progress_every_s=0",
        "run.checkpoint_every_s=0.2"]
#: the killed part's budget (it is killed long before); the resumed part is given 600 steps more
#: than the checkpoint holds (a resumed run may change its budget)
NEVER_REACHED = 1_000_000
MORE_STEPS = 600


def start(ranks: int, overrides: list[str], run_dir, stdout: int = subprocess.DEVNULL) -> subprocess.Popen:
    cmd = [*mpiexec_command(ranks), sys.executable, "-m", "mpi4py", "-m", "drlmpi", *overrides,
           f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPIEXEC_TIMEOUT": "200"}
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=stdout, stderr=subprocess.PIPE,
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


#: what a crash leaves (a generation half written or half deleted, rows past the checkpoint) is
#: the checkpointer's and the log's, the same under every topology: killed on one rank, on three
#: with the resume from the command line, and on groups' two state holders. That every topology
#: restores each rank's state is checked on every topology by tests/test_signal_stop.py.
@pytest.mark.parametrize("topology,ranks", [("sequential", 1), ("star", 3), ("groups", 4)])
def test_kill_then_resume_finishes_with_every_episode_once(pool, topology, ranks, tmp_path):
    run_dir = tmp_path / "run"
    extra = [f"topology={topology}", f"run.max_env_steps={NEVER_REACHED}",
             "algo._target_=tests.resume_probe.ResumeProbeDQN", *FAST]
    if topology == "async":
        extra.append("topology.max_policy_lag=64")
    proc = start(ranks, extra, run_dir)
    kill_after_checkpoint(proc, run_dir)
    meta = read_meta(run_dir)  # read again: the job may have published one more before it died
    assert meta["world_size"] == ranks and meta["topology"] == topology
    assert sorted(meta["ranks_with_state"]) == holders(topology, ranks)
    generation = meta["generation"]
    assert all(rank_file(run_dir, r, generation).is_file() for r in meta["ranks_with_state"])
    # besides the published generation: the next one half written, or the previous one whose
    # deletion the kill interrupted - never anything older
    found = {file_generation(p) for p in (run_dir / "checkpoint").glob("*.pt")}
    assert found <= {generation - 1, generation, generation + 1}, found

    saved = saved_digests(run_dir, meta)
    probe = tmp_path / "probe"

    budget = meta["env_steps"] + MORE_STEPS
    if topology == "star":
        resumed = subprocess.run([sys.executable, "-m", "drlmpi", f"resume={run_dir}",
                                  f"run.max_env_steps={budget}"], cwd=REPO,
                                 capture_output=True, text=True, timeout=240,
                                 env={**os.environ, "OMP_NUM_THREADS": "1", "MPIEXEC_TIMEOUT": "200",
                                      ENV_VAR: str(probe)})
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"starting mpiexec -n {ranks}" in resumed.stderr
    else:
        pool.submit(ranks, "tests.resume_probe:resume", run_dir=str(run_dir), probe=str(probe),
                    extra=[f"run.max_env_steps={budget}"]).result()
    assert_restored(saved, probe, generation)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= budget and summary["topology"] == topology
    assert summary["stop_reason"] == "max_env_steps"
    assert summary["train_seconds"] > meta["train_seconds"]
    assert summary["updates"] > meta["updates"] and summary["env_steps"] > meta["env_steps"]
    # the totals cover the whole run; per_rank (and topology_stats) this part, from the checkpoint on
    part = summary["part"]
    assert (part["from_env_steps"], part["from_updates"]) == (meta["env_steps"], meta["updates"])
    # (meta.json's clock is read a moment after the learner's state: tens of ms on a loaded machine)
    assert part["from_train_seconds"] == pytest.approx(meta["train_seconds"], abs=0.25)
    assert summary["per_rank"][0]["updates"] == part["updates"] == summary["updates"] - meta["updates"]
    rows = episode_rows(run_dir)
    assert len(rows) == summary["episodes"]  # every episode once: none lost, none duplicated
    steps = [int(r["env_steps"]) for r in rows]
    seconds = [float(r["train_seconds"]) for r in rows]
    assert steps == sorted(steps) and seconds == sorted(seconds)  # in order across the two parts
    assert steps[-1] > meta["env_steps"]

