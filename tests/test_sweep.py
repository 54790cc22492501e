"""Multirun sweeps through the MPI launcher plugin: every job its own MPI world."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpirun import REPO


def _sweep(tmp_path, *overrides: str, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "drlmpi", "-m", *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def _jobs(tmp_path) -> list[dict]:
    return json.loads((tmp_path / "sweep" / "jobs.json").read_text())


def test_sweep_runs_each_job_in_its_own_world_and_skips_impossible_ones(tmp_path):
    proc = _sweep(tmp_path, "topology=sequential,star", "world_size=1,2", "run.max_env_steps=1500",
                  "run.eval_every=500", "run.progress_every_s=0", "algo.learning_starts=200")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = {(j["overrides"][0], j["overrides"][1]): j for j in _jobs(tmp_path)}
    assert len(jobs) == 4
    assert jobs[("topology=sequential", "world_size=1")]["status"] == "ok"
    assert jobs[("topology=star", "world_size=2")]["status"] == "ok"
    assert jobs[("topology=star", "world_size=2")]["command"][:3] == ["mpiexec", "-n", "2"]
    skipped = jobs[("topology=sequential", "world_size=2")]
    assert skipped["status"] == "skipped" and "needs exactly 1 rank" in skipped["reason"]
    assert "needs at least 2 ranks" in jobs[("topology=star", "world_size=1")]["reason"]
    assert "skipped: topology=star needs at least 2 ranks" in proc.stdout + proc.stderr
    for job in jobs.values():
        if job["status"] == "ok":
            summary = json.loads((Path(job["run_dir"]) / "summary.json").read_text())
            assert summary["world_size"] == int(job["overrides"][1].split("=")[1])


def test_failed_job_is_reported_and_the_sweep_goes_on_then_fails(tmp_path):
    proc = _sweep(tmp_path, "topology=p2p", "world_size=2",
                  "env.id=tests.crash_env:CrashingCartPole-v0,CartPole-v1",
                  "run.max_env_steps=800", "run.progress_every_s=0", "+env.kwargs.crash_after=100")
    assert proc.returncode != 0
    jobs = _jobs(tmp_path)
    assert [j["status"] for j in jobs] == ["failed", "skipped"]  # CartPole-v1 has no crash_after
    assert jobs[0]["returncode"] != 0
    assert "simulated simulator crash" in jobs[0]["log_tail"]
    output = proc.stdout + proc.stderr
    assert "FAILED with exit code" in output and "simulated simulator crash" in output


def test_dry_run_prints_the_command_it_would_submit(tmp_path):
    proc = _sweep(tmp_path, "topology=star", "world_size=4", "hydra.launcher.dry_run=true",
                  "hydra.launcher.mpiexec=[srun,'--mpi=pmix']", "hydra.launcher.extra_args=[--exclusive]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (job,) = _jobs(tmp_path)
    assert job["status"] == "dry_run"
    assert job["command"][:5] == ["srun", "--mpi=pmix", "-n", "4", "--exclusive"]
    assert job["command"][-2:] == [f"hydra.run.dir={job['run_dir']}", "hydra.mode=RUN"]
    assert "topology=star" in job["command"] and "world_size=4" in job["command"]


def test_presets_compose_into_the_source_documents_studies(tmp_path):
    proc = _sweep(tmp_path, "+experiment=dqn_paper_cartpole", "hydra.launcher.dry_run=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    ran = sorted((j["overrides"][0], j["ranks"]) for j in _jobs(tmp_path) if j["status"] == "dry_run")
    # Standard, 2 Processes, MP(2)..MP(5): the columns of the paper's tables.
    assert ran == [("topology=p2p", 2), ("topology=sequential", 1), ("topology=star", 2),
                   ("topology=star", 3), ("topology=star", 4), ("topology=star", 5)]


def test_sweeping_process_never_initialises_mpi():
    code = ("import sys\n"
            "from hydra_plugins.drlmpi_launcher.mpi_launcher import MPILauncher, job_ranks\n"
            "from drlmpi.run import validate\n"
            "import drlmpi.topologies.star, drlmpi.topologies.asynchronous, drlmpi.topologies.allgather\n"
            "assert 'mpi4py.MPI' not in sys.modules, 'MPI imported'\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


def test_world_size_alone_relaunches_under_mpiexec(tmp_path):
    cmd = [sys.executable, "-m", "drlmpi", "topology=p2p", "world_size=2", "run.max_env_steps=600",
           "run.progress_every_s=0", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "starting mpiexec -n 2" in proc.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["world_size"] == 2


def test_sweep_then_report_tables_and_plots(tmp_path):
    """Two topologies x two sizes with tiny budgets, then python -m drlmpi.report on the sweep."""
    proc = _sweep(tmp_path, "topology=sequential,p2p", "world_size=1,2", "run.max_env_steps=1200",
                  "run.eval_every=400", "run.progress_every_s=0", "algo.learning_starts=200",
                  "run.stop_on_solve=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "report"
    report = subprocess.run([sys.executable, "-m", "drlmpi.report", str(tmp_path / "sweep"),
                             "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    with open(out / "table.csv") as f:
        rows = {(r["topology"], int(r["world_size"])): r for r in csv.DictReader(f)}
    assert set(rows) == {("sequential", 1), ("p2p", 2)}  # every job that could run; 2 skipped
    runs = {}
    for job in _jobs(tmp_path):
        if job["status"] == "ok":
            summary = json.loads((Path(job["run_dir"]) / "summary.json").read_text())
            runs[summary["topology"]] = summary["train_seconds"]
    speedup = float(rows[("p2p", 2)]["speedup_fixed"])
    assert speedup == pytest.approx(runs["sequential"] / runs["p2p"], rel=1e-2)
    assert float(rows[("sequential", 1)]["speedup_fixed"]) == 1.0
    text = (out / "report.md").read_text()
    assert "Standard" in text and "2 Processes" in text  # the DQN paper's layout
    for png in ("return_vs_time.png", "return_vs_steps.png", "speedup.png", "time_breakdown.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
