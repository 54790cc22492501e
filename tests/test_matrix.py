"""The algorithm x topology matrix: every sensible cell runs, the others are refused clearly.

DQN is covered by the contract test in test_topologies.py; here TD3 (Pendulum) and PPO
(CartPole) run through every multi-rank topology with a small budget, which exercises each
topology's message layout with their extra columns and, for the gradient topologies, their
sync schedules (TD3's delayed actor through a parameter server, PPO's minibatch steps) - and
each cell must make progress: the training episodes of the last quarter of the run return
clearly more than those of the first quarter.
"""

from __future__ import annotations

import csv

import pytest

from tests.mpirun import run_job

TINY = ["run.progress_every_s=0", "run.stop_on_solve=false", "run.eval_every=100000"]
PAIRS = {
    "td3": ["algo=td3", "env=pendulum", "run.max_env_steps=6000", "algo.learning_starts=500"],
    "ppo": ["algo=ppo", "env=cartpole", "run.max_env_steps=6000"],
}


def progressed(algo: str, returns: list[float]) -> bool:
    """Last-quarter mean training return clearly above the first quarter's (Pendulum's returns
    are negative, about -1200 untrained; CartPole's about 20)."""
    n = len(returns) // 4
    first, last = sum(returns[:n]) / n, sum(returns[-n:]) / n
    return last > first + 200 if algo == "td3" else last > 1.25 * first
TOPOLOGIES = {
    "p2p": (2, ["topology=p2p"]),
    "star": (3, ["topology=star"]),
    "parameter_server": (3, ["topology=parameter_server"]),
    "async": (3, ["topology=async"]),  # PPO: the automatic lag bound; TD3 keeps every chunk
    "allgather": (2, ["topology=allgather"]),
    "groups": (4, ["topology=groups"]),  # 2 x (learner + simulator), star wiring
    "groups[async]": (4, ["topology=groups", "topology.group_wiring=async"]),
}


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
@pytest.mark.parametrize("algo", sorted(PAIRS))
def test_every_sensible_cell_runs(tmp_path, algo, topology):
    ranks, overrides = TOPOLOGIES[topology]
    job = run_job(ranks, [*PAIRS[algo], *overrides, *TINY], tmp_path / "run", timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    summary = job.summary()
    assert summary["algo"] == algo and summary["world_size"] == ranks
    assert summary["updates"] > 0 and summary["env_steps"] >= 6000
    with open(tmp_path / "run" / "metrics.csv") as f:
        returns = [float(r["return"]) for r in csv.DictReader(f) if r["kind"] == "episode"]
    assert len(returns) >= 16 and progressed(algo, returns), returns
    if topology in ("parameter_server", "allgather"):
        # Gradients crossed the wire, once per synced network per update on every worker.
        workers = [r for r in summary["per_rank"] if r["role"] in ("worker", "peer")]
        for worker in workers:
            assert worker["sent"]["gradients"][0] >= worker["updates"]
    if topology.startswith("groups"):  # the learners' communicator carried the gradients
        for learner in (r for r in summary["per_rank"] if r["role"] == "learner"):
            assert learner["learners_comm"]["sent"]["gradients"][0] >= learner["updates"] > 0


@pytest.mark.parametrize(("overrides", "message"), [
    (["algo=td3", "env=cartpole"], "algo=td3 needs a continuous (Box) action space"),
    (["algo=dqn", "env=pendulum"], "algo=dqn needs a discrete action space"),
    (["algo=ppo", "topology=async", "topology.utd_mode=free", "topology.max_policy_lag=8"],
     "utd_mode=free is for off-policy algorithms"),
])
def test_mismatches_fail_at_start_up_naming_a_working_choice(tmp_path, overrides, message):
    ranks = 2 if "topology=async" in overrides else 1
    job = run_job(ranks, overrides, tmp_path / "run", timeout=60)
    assert job.returncode == 2 and message in job.stderr
    assert job.stderr.count("drlmpi: error:") == 1
