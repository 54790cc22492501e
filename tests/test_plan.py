"""``python -m drlmpi.plan``: the model's arithmetic on a probe with known costs, and the
command a user runs (probe, table, plan.json, refusals, --compare)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from drlmpi.planner.model import pace, predict
from drlmpi.planner.probe import Probe
from tests.mpirun import REPO
from tests.shared_runs import CUE


def probe(**changes) -> Probe:
    """A probe with round numbers: 1 ms a step, 2 ms an update, cheap messages, no slowdown."""
    values = dict(cores=16, device="cpu", num_envs=1, sim_step_s=1e-3, env_step_s=0.8e-3,
                  act_s={1: 1e-4, 256: 1e-3}, update_s={8: 1e-3, 128: 2e-3}, update_jitter_s=0.0,
                  learner_update_s=2e-3, batch_size=128, updates_per_step=1.0, learning_starts=0,
                  ingest_row_s=0.0, slowdown={}, allreduce_s={2: 1e-4, 16: 4e-4}, row_bytes=100,
                  weight_bytes=10_000, latency_s=0.0, bandwidth_bytes_per_s=1e12, comm_source="test")
    values.update(changes)
    return Probe(**values)


def cfg(topology: str, max_env_steps=None, **options):
    return OmegaConf.create({"topology": {"name": topology, "sync_every": 64, **options},
                             "run": {"max_env_steps": max_env_steps}})


def test_sequential_steps_and_learns_in_turn():
    assert predict("sequential", 1, probe(), cfg("sequential")).env_steps_per_s == pytest.approx(1 / 3e-3)


def test_a_single_learner_caps_star_async_and_p2p():
    """Simulators add throughput until the learner's 2 ms per update (1 per step) binds."""
    p = probe()
    assert predict("star", 2, p, cfg("star")).env_steps_per_s == pytest.approx(1 / 2e-3, rel=1e-3)
    for name in ("star", "async"):
        cell = predict(name, 16, p, cfg(name))
        assert cell.env_steps_per_s == pytest.approx(500, rel=1e-3) and cell.bound == "learner"
    slow = probe(sim_step_s=10e-3)  # 10 ms a step: 3 simulators give 300 steps/s, below the cap
    cell = predict("star", 4, slow, cfg("star"))
    assert cell.env_steps_per_s == pytest.approx(300, rel=1e-3) and cell.bound == "simulators"


def test_data_parallel_splits_the_batch_and_pays_the_allreduce():
    """allgather, 16 ranks, batch_rule=global: each update costs the 8-row update (1 ms) plus
    the all-reduce (0.4 ms); every rank runs every update of the job's 1 per step."""
    cell = predict("allgather", 16, probe(), cfg("allgather", batch_rule="global"))
    step = 1e-3 / 16 + 1.0 * (1e-3 + 4e-4) + pace("allgather", 16, probe(), cfg("allgather")).comm
    assert cell.env_steps_per_s == pytest.approx(1 / step, rel=1e-6)
    per_rank = predict("allgather", 16, probe(), cfg("allgather", batch_rule="per_rank"))
    assert per_rank.env_steps_per_s > 5 * cell.env_steps_per_s  # 1/16 of the updates per step


def test_the_steps_before_learning_starts_run_at_the_stepping_rate():
    p = probe(learning_starts=1000)
    cell = predict("sequential", 1, p, cfg("sequential", max_env_steps=2000))
    assert cell.env_steps_per_s == pytest.approx(2000 / (1000 * 1e-3 + 1000 * 3e-3))
    assert cell.updates_per_s == pytest.approx(1000 / 4.0)


def test_a_full_machine_slows_compute_by_the_measured_factor():
    p = probe(slowdown={8: 1.0, 16: 1.5})
    assert predict("star", 16, p, cfg("star")).env_steps_per_s == pytest.approx(500 / 1.5, rel=1e-3)
    assert predict("star", 8, p, cfg("star")).env_steps_per_s == pytest.approx(500, rel=1e-3)


def _plan(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "drlmpi.plan", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)


def test_the_plan_command_probes_predicts_and_compares(tmp_path):
    """One probe of a tiny task (about 7 s: start-up, 0.1 s per quantity, an MPI ping-pong)."""
    proc = _plan(tmp_path, CUE, "algo.hidden=[16]", "--seconds", "0.1", "--ranks", "1,2",
                 "--topologies", "sequential,star,groups")
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    cells = {(c["topology"], c["ranks"]): c for c in plan["cells"]}
    assert set(cells) == {(t, n) for t in ("sequential", "star", "groups") for n in (1, 2)}
    assert "needs exactly 1 rank" in cells[("sequential", 2)]["refused"]
    assert "topology.learners=2" in cells[("groups", 2)]["refused"]
    assert cells[("star", 2)]["env_steps_per_s"] > 0 and cells[("sequential", 1)]["env_steps_per_s"] > 0
    assert plan["probe"]["sim_step_s"] > 0 and plan["probe"]["updates_per_step"] > 0
    assert "ping-pong" in plan["probe"]["comm_source"]
    assert "Recommendation on 2 ranks: topology=star" in proc.stdout
    assert "| star |" in proc.stdout
    runs = tmp_path / "runs"
    for name, ranks, rate in (("sequential", 1, cells[("sequential", 1)]["env_steps_per_s"] * 2),
                              ("star", 2, cells[("star", 2)]["env_steps_per_s"])):
        (runs / name).mkdir(parents=True)
        (runs / name / "summary.json").write_text(json.dumps(
            {"topology": name, "world_size": ranks, "algo": "dqn", "env_steps_per_s": rate}))
    compared = _plan(tmp_path, "--plan", "plan.json", "--compare", "runs")
    assert compared.returncode == 0, compared.stderr
    assert "| sequential | 1 |" in compared.stdout and "-50%" in compared.stdout
    assert "1 of 2 cells within +-25% (50%)" in compared.stdout


def test_a_bad_override_is_refused_in_one_line(tmp_path):
    proc = _plan(tmp_path, "algo.lr=-1")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "algo.lr" in proc.stderr


def test_the_probe_runs_for_a_topology_of_several_ranks(tmp_path):
    """The probe runs in one process whatever the topology: a groups-only plan (4 ranks at
    the least) builds its simulator and learner there."""
    from drlmpi.plan import compose
    from drlmpi.planner.probe import _context, smallest_world

    cfg = compose([CUE, "algo.hidden=[16]", "topology=groups"])
    assert smallest_world(cfg) == 4
    ctx = _context(cfg, tmp_path)
    actor = ctx.make_actor(0)
    try:
        assert actor.collect(2).shape[0] == 2 * int(cfg.env.num_envs)
    finally:
        actor.close()
    assert ctx.make_learner(log=False).algo.learner
