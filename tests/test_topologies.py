"""The topology contract: every topology, under mpiexec, with the same budget and assertions.

Each job runs DQN on CartPole with a small budget. It must exit 0, write one run directory
(``.hydra/`` only from rank 0), a complete summary, per-episode metrics from every simulator
rank, move exactly the experience it claims over the wire, and its greedy evaluation return
must rise. Wrong world sizes and crashes must end the job quickly and clearly.
"""

from __future__ import annotations

import csv

import pytest

from drlmpi.comm import ChunkHeader, WeightsHeader
from tests.mpirun import run_job

BUDGET = ["run.max_env_steps=8000", "run.eval_every=1000", "run.progress_every_s=0",
          "run.stop_on_solve=false", "algo.learning_starts=500"]

SUMMARY_KEYS = {
    "solved", "train_seconds_to_threshold", "env_steps_to_threshold", "updates_to_threshold",
    "env_steps", "updates", "train_seconds", "wall_seconds", "env_steps_per_s", "updates_per_s",
    "mpi_wait_share", "world_size", "topology", "algo", "env_id", "per_rank", "versions",
    "best_eval_return", "stop_reason",
}

# (topology overrides, ranks, ranks that simulate, what carries experience to rank 0)
CASES = [
    ("sequential", 1, [0], None),
    ("p2p", 2, [1], "experience"),
    ("star", 2, [1], "experience"),
    ("star", 3, [1, 2], "experience"),
    ("star", 4, [1, 2, 3], "experience"),
    ("parameter_server", 3, [1, 2], "gradients"),
    ("async", 2, [1], "experience"),
    ("async", 3, [1, 2], "experience"),
    ("async", 4, [1, 2, 3], "experience"),
    ("allgather", 2, [0, 1], "gradients"),
    ("allgather", 3, [0, 1, 2], "gradients"),
    ("allgather topology.reduce=allgather", 4, [0, 1, 2, 3], "gradients"),
]


@pytest.mark.parametrize(("topology", "ranks", "simulators", "carrier"), CASES,
                         ids=[f"{t.split()[-1].replace('topology.', '')}-n{n}" for t, n, _, _ in CASES])
def test_topology_contract(tmp_path, topology, ranks, simulators, carrier):
    run_dir = tmp_path / "run"
    overrides = [f"topology={topology.split()[0]}", *topology.split()[1:]]
    job = run_job(ranks, [*overrides, *BUDGET], run_dir, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    summary = job.summary()

    # The summary is complete and describes this job.
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["topology"] == overrides[0].split("=")[1]
    assert summary["world_size"] == ranks == len(summary["per_rank"])
    assert summary["stop_reason"] == "max_env_steps"
    assert summary["env_steps"] >= 8000
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
    simulated = sum(per_rank[r]["env_steps"] for r in simulators)
    if summary["topology"] == "async":  # chunks that arrived or were ready as the run stopped
        simulated -= summary["topology_stats"]["steps_after_stop"]
        simulated -= sum(per_rank[r]["unsent_steps"] for r in simulators)
    assert simulated == summary["env_steps"]

    # What crossed the wire.
    row_bytes = summary["experience_row_bytes"]
    if carrier == "experience":
        # Exactly the experience rows counted (async adds a header per chunk and per weights
        # message), and whole weight buffers to each simulator.
        is_async = summary["topology"] == "async"
        header = 8 * len(ChunkHeader) if is_async else 0
        weights_header = 8 * len(WeightsHeader) if is_async else 0
        learner = per_rank[0]
        messages, nbytes = learner["received"]["experience"]
        after_stop = summary["topology_stats"].get("steps_after_stop", 0)
        assert nbytes == (summary["env_steps"] + after_stop) * row_bytes + messages * header
        for r in simulators:
            messages, nbytes = per_rank[r]["sent"]["experience"]
            sent_steps = per_rank[r]["env_steps"] - per_rank[r].get("unsent_steps", 0)
            assert nbytes == sent_steps * row_bytes + messages * header
            weights = per_rank[r]["received"]["weights"]
            assert weights[0] >= 1
            assert weights[1] == weights[0] * (summary["policy_param_bytes"] + weights_header)
        # Every weights message the learner sent arrived at a simulator, and nothing else did.
        received = [sum(per_rank[r]["received"]["weights"][i] for r in simulators) for i in (0, 1)]
        assert received == per_rank[0]["sent"]["weights"]
    elif carrier == "gradients":
        # No experience moves; every learning rank sent gradients; nobody sent rows.
        for rank in per_rank.values():
            assert "experience" not in rank["sent"] and "experience" not in rank["received"]
        for r in simulators:
            messages, nbytes = per_rank[r]["sent"]["gradients"]
            assert messages >= per_rank[r]["updates"] > 0
    else:
        assert per_rank[0]["received"] == {} and per_rank[0]["sent"] == {}

    # It learned: greedy evaluation return rose well above the untrained policy's.
    evals = [float(r["return"]) for r in rows if r["kind"] == "eval"]
    assert len(evals) >= 5
    assert max(evals) >= max(60.0, 2.0 * evals[0]), evals


def test_async_learner_does_not_wait_for_a_slow_simulator(tmp_path):
    """Rank 1 spends 8 ms of CPU per step; rank 2 is fast. The run finishes and the fast
    simulator contributes more."""
    job = run_job(3, ["topology=async", "env.sim_cost_ms_by_rank={1: 8}", "run.max_env_steps=6000",
                      "run.progress_every_s=0", "run.stop_on_solve=false"], tmp_path / "run",
                  timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    summary = job.summary()
    per_rank = {r["rank"]: r for r in summary["per_rank"]}
    assert per_rank[2]["env_steps"] > 2 * per_rank[1]["env_steps"] > 0
    chunks = summary["topology_stats"]["chunks_received"]
    assert chunks["2"] > 2 * chunks["1"] > 0
    assert summary["policy_lag_max"] is not None and summary["policy_lag_mean"] >= 0


def test_async_discards_chunks_beyond_max_policy_lag(tmp_path):
    job = run_job(3, ["topology=async", "topology.utd_mode=free", "topology.max_policy_lag=0",
                      "topology.publish_every=1000", "run.max_env_steps=6000",
                      "run.progress_every_s=0", "run.stop_on_solve=false"], tmp_path / "run",
                  timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    summary = job.summary()
    stats = summary["topology_stats"]
    assert stats["utd_mode"] == "free" and stats["discarded_chunks"] > 0
    assert summary["policy_lag_max"] == 0  # every chunk it learned from was fresh


def test_allgather_keeps_parameters_identical(tmp_path):
    job = run_job(3, ["topology=allgather", "topology.check_every=50", "run.max_env_steps=4000",
                      "run.progress_every_s=0", "run.stop_on_solve=false",
                      "algo.learning_starts=300"], tmp_path / "run", timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    summary = job.summary()
    checksums = summary["topology_stats"]["param_checksums_per_rank"]
    assert len(checksums) == 3 and checksums[0] == checksums[1] == checksums[2]
    per_rank = summary["per_rank"]
    assert all(r["updates"] == per_rank[0]["updates"] > 100 for r in per_rank)
    # check_every=50: a checksum Allgather at the first round boundary after every 50 updates
    # (96 updates per round here: batch_rule=global gives each rank 0.5 x 3 updates per local
    # step, 0.5 per job-wide step), plus one at the end.
    assert per_rank[0]["sent"]["checksums"][0] >= per_rank[0]["updates"] // 100


def test_async_rejects_episode_chunks(tmp_path):
    job = run_job(2, ["topology=async", "topology.sync_unit=episodes"], tmp_path / "run", timeout=60)
    assert job.returncode == 2 and "use topology.sync_unit=steps" in job.stderr


@pytest.mark.parametrize(("topology", "ranks", "expected"), [
    ("p2p", 3, "topology=p2p needs exactly 2 ranks, but the job has 3"),
    ("star", 1, "topology=star needs at least 2 ranks, but the job has 1"),
    ("sequential", 2, "topology=sequential needs exactly 1 rank, but the job has 2"),
    ("async", 1, "topology=async needs at least 2 ranks, but the job has 1"),
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


def test_same_data_budget_same_number_of_updates(tmp_path):
    """Topologies with one learner run exactly the updates the sequential loop runs on the same
    experience: chunks of 256 steps, a budget of 12 chunks, 0.5 updates per step once the
    replay holds 1000 transitions. The pipelined ones train the last chunk's updates at the
    budget stop (``Learner.finish``)."""
    budget = ["run.max_env_steps=3072", "topology.sync_every=256", "run.eval_every=100000",
              "run.progress_every_s=0", "run.stop_on_solve=false", "algo.learning_starts=1000"]
    expected_updates = (3072 - 768) // 2  # the first three chunks come before the replay is ready
    for topology, ranks in (("sequential", 1), ("p2p", 2), ("star", 3), ("async", 3)):
        job = run_job(ranks, [f"topology={topology}", *budget], tmp_path / topology, timeout=180)
        assert job.returncode == 0, job.stderr[-3000:]
        summary = job.summary()
        assert summary["env_steps"] == 3072, topology
        assert summary["updates"] == expected_updates, topology


def test_async_learner_bursts_only_on_a_device_that_queues_updates():
    """A CPU learner takes one owed update between polls; a device learner runs up to the next
    publication in one call (one GPU wait per burst, not per update)."""
    from types import SimpleNamespace

    from drlmpi.topologies.asynchronous import _AsyncLearner

    def burst(queues: bool, since_publish: int) -> int:
        fake = SimpleNamespace(publish_every=32,
                               learner=SimpleNamespace(algo=SimpleNamespace(queues_updates=queues)))
        return _AsyncLearner._burst(fake, since_publish)

    assert [burst(False, s) for s in (0, 5, 31)] == [1, 1, 1]
    assert [burst(True, s) for s in (0, 5, 31)] == [32, 27, 1]
