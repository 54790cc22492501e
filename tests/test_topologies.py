"""The topology contract: every topology, under mpiexec, with the same budget and assertions.

Each job runs DQN on CartPole with a small budget. It must exit 0, write one run directory
(``.hydra/`` only from rank 0), a complete summary, per-episode metrics from every simulator
rank, move exactly the experience it claims over the wire, and its greedy evaluation return
must rise. Wrong world sizes and crashes must end the job quickly and clearly.
"""

from __future__ import annotations

import csv

import pytest

from tests.mpirun import run_job

BUDGET = ["run.max_env_steps=7000", "run.eval_every=1000", "run.progress_every_s=0",
          "run.stop_on_solve=false"]

SUMMARY_KEYS = {
    "solved", "train_seconds_to_threshold", "env_steps_to_threshold", "updates_to_threshold",
    "env_steps", "updates", "train_seconds", "wall_seconds", "env_steps_per_s", "updates_per_s",
    "mpi_wait_share", "world_size", "topology", "algo", "env_id", "per_rank", "versions",
    "best_eval_return", "stop_reason",
}

# (topology, ranks, ranks that simulate)
CASES = [
    ("sequential", 1, [0]),
    ("p2p", 2, [1]),
    ("star", 2, [1]),
    ("star", 3, [1, 2]),
]


@pytest.mark.parametrize(("topology", "ranks", "simulators"), CASES,
                         ids=[f"{t}-n{n}" for t, n, _ in CASES])
def test_topology_contract(tmp_path, topology, ranks, simulators):
    run_dir = tmp_path / "run"
    job = run_job(ranks, [f"topology={topology}", *BUDGET], run_dir, timeout=240)
    assert job.returncode == 0, job.stderr[-3000:]
    summary = job.summary()

    # The summary is complete and describes this job.
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["topology"] == topology
    assert summary["world_size"] == ranks == len(summary["per_rank"])
    assert summary["stop_reason"] == "max_env_steps"
    assert summary["env_steps"] >= 7000
    for key in ("torch", "mpi4py", "mpi_library"):
        assert summary["versions"][key]

    # One run directory for all ranks; only rank 0 wrote Hydra's files.
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert sorted(p.name for p in run_dir.glob("rank*.log")) == [f"rank{r}.log" for r in range(ranks)]
    assert list(tmp_path.iterdir()) == [run_dir]
    assert (run_dir / "policy.pt").is_file()

    # Every simulator rank contributed episodes; job-wide steps add up.
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    episode_ranks = {int(r["rank"]) for r in rows if r["kind"] == "episode"}
    assert episode_ranks == set(simulators)
    per_rank = {r["rank"]: r for r in summary["per_rank"]}
    assert sum(per_rank[r]["env_steps"] for r in simulators) == summary["env_steps"]

    # What crossed the wire: exactly the experience rows counted, and weights to each simulator.
    row_bytes = summary["experience_row_bytes"]
    if ranks > 1:
        learner = per_rank[0]
        assert learner["received"]["experience"][1] == summary["env_steps"] * row_bytes
        for r in simulators:
            sent = per_rank[r]["sent"]["experience"][1]
            assert sent == per_rank[r]["env_steps"] * row_bytes
            weights = per_rank[r]["received"]["weights"]
            assert weights[0] >= 1
            assert weights[1] == weights[0] * summary["policy_param_bytes"]
    else:
        assert per_rank[0]["received"] == {} and per_rank[0]["sent"] == {}

    # It learned: greedy evaluation return rose well above the untrained policy's.
    evals = [float(r["return"]) for r in rows if r["kind"] == "eval"]
    assert len(evals) >= 5
    assert max(evals) >= max(60.0, 2.0 * evals[0]), evals


@pytest.mark.parametrize(("topology", "ranks", "expected"), [
    ("p2p", 3, "topology=p2p needs exactly 2 ranks, but the job has 3"),
    ("star", 1, "topology=star needs at least 2 ranks, but the job has 1"),
    ("sequential", 2, "topology=sequential needs exactly 1 rank, but the job has 2"),
])
def test_wrong_world_size_fails_fast(tmp_path, topology, ranks, expected):
    job = run_job(ranks, [f"topology={topology}"], tmp_path / "run", timeout=60)
    assert job.returncode != 0
    assert expected in job.stderr
    # One line, printed once (by rank 0), not once per rank.
    assert job.stderr.count("drlmpi: error:") == 1


def test_dqn_on_continuous_env_is_refused(tmp_path):
    job = run_job(1, ["env=pendulum"], tmp_path / "run", timeout=60)
    assert job.returncode == 2
    assert "algo=dqn needs a discrete action space" in job.stderr
    assert "algo=td3" in job.stderr


def test_unknown_env_id_is_refused(tmp_path):
    job = run_job(1, ["env.id=NoSuchEnv-v9"], tmp_path / "run", timeout=60)
    assert job.returncode == 2
    assert "env.id='NoSuchEnv-v9' cannot be made" in job.stderr


def test_crashed_simulator_brings_the_job_down(tmp_path):
    """Rank 1 raises mid-run; the learner must not be left waiting in Probe/Recv."""
    job = run_job(2, ["topology=p2p", "env.id=tests.crash_env:CrashingCartPole-v0",
                      "+env.kwargs.crash_after=300", "run.progress_every_s=0"],
                  tmp_path / "run", timeout=90)
    assert job.returncode != 0
    assert "drlmpi: rank 1 failed: RuntimeError: simulated simulator crash" in job.stderr
