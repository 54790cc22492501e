"""drlmpi under a real Slurm: a private single-node cluster (tests/slurm_cluster.py: its own munged,
slurmctld and slurmd on free ports, every file in a temporary directory), shared by the three
tests, runs what docs/scaling-out.md shows:

* a batch job whose allocation runs a sweep of the MPI launcher whose jobs are
  ``srun --mpi=pmi2`` steps;
* a sweep whose jobs are Slurm jobs of their own (Hydra's Submitit launcher);
* the documented preemptible batch script, taken from the docs as it stands (``mpiexec`` inside
  the allocation: MPICH's hydra finds it and starts its proxies with srun): a signal stops the
  run with a checkpoint (exit 4), the script requeues the job and the next attempt resumes.

Why ~27 s of wall time on the 2-core machine (batch job ~6 s, Submitit ~4 s, preemption ~16 s):
the cluster starts in ~1 s and is shared, but each test runs real jobs whose every rank starts
Python, torch and Hydra (~2.5 s of a core each, 2 ranks on 2 cores); the preemption test runs
two attempts of one run, and Slurm holds a requeued job back for ``cred_expire`` (5 s, the least
it accepts). Budgets are tiny (400 CartPole steps; the preempted run 2,500 at 1 ms each, long
enough to be signalled). It needs root and Debian's Slurm
(``apt-get install -y slurm-wlm munge``); without them, or if the cluster does not come up, it
skips saying why.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drlmpi.outputs.checkpoint import read_meta
from tests.mpirun import REPO
from tests.slurm_cluster import ClusterUnavailableError, SlurmCluster, missing_programs
from tests.test_resume import episode_rows

#: tiny CartPole runs: no evaluation, a small network, quiet
TINY = ["env=cartpole", "algo.hidden=[32,32]", "algo.learning_starts=200", "algo.updates_per_step=0.1",
        "run.stop_on_solve=false", "run.eval_every=1000000", "run.progress_every_s=0"]
STEPS = 400
#: the preempted run: 1 ms of simulation per step (~800 steps/s), long enough to be signalled
#: (the signal comes once 10 episodes are on disk, ~500 steps in); no periodic checkpoint, so the
#: one resumed from is the signal's
PREEMPTED = [o for o in TINY if not o.startswith("run.progress_every_s")] + [
    "topology=star", "env.sim_cost_ms=1", "run.checkpoint_every_s=0", "run.progress_every_s=0.2"]
PREEMPTED_STEPS = 2500


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The module's Slurm cluster; every daemon and job process is ended afterwards."""
    if os.geteuid() != 0:
        pytest.skip("the test Slurm cluster needs root (SlurmUser=root, a munged of its own)")
    missing = missing_programs()
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} not found): "
                    f"apt-get install -y slurm-wlm munge")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    # jobs inherit this environment: this interpreter's python and mpiexec first on PATH
    cluster.env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{cluster.env.get('PATH', '')}",
                       OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", MPIEXEC_TIMEOUT="90")
    try:
        cluster.start()
    except ClusterUnavailableError as exc:
        pytest.skip(f"the test Slurm cluster did not come up: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def batch_script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def submit(slurm: SlurmCluster, tmp_path: Path, script: Path, *options: str) -> str:
    """sbatch the script with its output in tmp_path/job.out, working in tmp_path; the job id."""
    return slurm.sbatch([*options, "--time=3", f"--chdir={tmp_path}", f"--output={tmp_path}/job.out",
                         str(script)])


def output(tmp_path: Path) -> str:
    path = tmp_path / "job.out"
    return path.read_text(errors="replace")[-4000:] if path.is_file() else "(no job output)"


def test_a_batch_job_runs_a_sweep_of_srun_steps(slurm, tmp_path):
    """(``mpiexec`` inside an allocation runs in the preemption test's script.)"""
    tiny = " ".join(shlex.quote(o) for o in [*TINY, f"run.max_env_steps={STEPS}"])
    script = batch_script(tmp_path, "job.sh", f"""#!/bin/bash
set -e
python -m drlmpi -m topology=p2p world_size=2 {tiny} \\
    "hydra.launcher.mpiexec=[srun,'--mpi=pmi2']" hydra.launcher.timeout_s=60 hydra.sweep.dir=sweep
""")
    job = submit(slurm, tmp_path, script, "--ntasks=2")
    fields = slurm.wait_for_job(job, timeout=120)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), output(tmp_path)
    (record,) = json.loads((tmp_path / "sweep" / "jobs.json").read_text())
    assert record["status"] == "ok" and record["command"][:4] == ["srun", "--mpi=pmi2", "-n", "2"]
    for run_dir in (tmp_path / record["run_dir"],):  # relative to the job's cwd
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["world_size"] == 2 and summary["topology"] == "p2p"
        assert summary["stop_reason"] == "max_env_steps" and summary["env_steps"] >= STEPS
        assert sorted(p.name for p in run_dir.glob("rank*.log")) == ["rank0.log", "rank1.log"]


def test_a_submitit_sweep_runs_each_job_as_a_slurm_job(slurm, tmp_path):
    """Two jobs of one rank, side by side, each a Slurm job (of a job array) whose task unpickles
    and runs drlmpi's task function. The sweep directory's name holds the launch time to the
    microsecond: the jobs must write where the launcher said (they resolve it in their own
    processes, from the config's cached value)."""
    cmd = [sys.executable, "-m", "drlmpi", "-m", "hydra/launcher=submitit_slurm", "seed=1,2", "world_size=1",
           *TINY, f"run.max_env_steps={STEPS}", "hydra.sweep.dir=multirun/${launch_time:%H-%M-%S.%f}",
           "hydra.launcher.nodes=1", "hydra.launcher.tasks_per_node=1", "hydra.launcher.cpus_per_task=1",
           "hydra.launcher.timeout_min=3", "hydra.launcher.partition=debug",
           f"hydra.launcher.submitit_folder={tmp_path}/submitit/%j"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=slurm.env, capture_output=True, text=True, timeout=150)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-4000:]
    sweep = tmp_path / re.search(r"Submitit 'slurm' sweep output dir : (\S+)", said).group(1)
    assert list((tmp_path / "multirun").iterdir()) == [sweep]
    runs = sorted(p.parent for p in sweep.glob("*/summary.json"))
    assert [p.name for p in runs] == ["0_dqn_cartpole_sequential_n1", "1_dqn_cartpole_sequential_n1"]
    summaries = [json.loads((p / "summary.json").read_text()) for p in runs]
    assert [s["seed"] for s in summaries] == [1, 2]
    assert all(s["world_size"] == 1 and s["stop_reason"] == "max_env_steps" for s in summaries)
    # each ran as a Slurm job: submitit's log of each job's task (<array>_<job>_<task>_log.out)
    logs = {tuple(p.name.split("_")[1:3]): p.read_text() for p in (tmp_path / "submitit").glob("*/*_log.out")}
    assert sorted(logs) == [("0", "0"), ("1", "0")]
    assert all("Job completed successfully" in text for text in logs.values()), logs


def documented_batch_script(overrides: list[str]) -> str:
    """docs/scaling-out.md's preemptible batch script with its first attempt's run made tiny (the
    ``set -- ...`` line): everything else runs as documented. Its #SBATCH resources are
    overridden on sbatch's command line."""
    doc = (REPO / "docs" / "scaling-out.md").read_text()
    start = doc.index("```bash\n", doc.index("A batch script that stops in time")) + len("```bash\n")
    script = doc[start:doc.index("```", start)]
    (fresh,) = [line for line in script.splitlines()
                if re.match(r"\s*set -- .*hydra\.run\.dir=\"\$RUN\"", line)]
    new = f"    set -- {' '.join(shlex.quote(o) for o in overrides)} hydra.run.dir=\"$RUN\""
    return script.replace(fresh, new)


def wait_for_episodes(slurm: SlurmCluster, job: str, run_dir: Path, tmp_path: Path, count: int = 10,
                      timeout: float = 60) -> None:
    """Until ``count`` episode rows of the running job are on disk."""
    deadline = time.monotonic() + timeout
    path = run_dir / "metrics.csv"
    while not (path.is_file() and len(path.read_text().splitlines()) > count):
        state = slurm.job(job)["JobState"]
        assert state in ("PENDING", "CONFIGURING", "RUNNING"), f"job {job} {state}: {output(tmp_path)}"
        assert time.monotonic() < deadline, f"no episodes on disk within {timeout} s: {output(tmp_path)}"
        time.sleep(0.1)


def test_a_preempted_job_requeues_itself_and_the_next_attempt_resumes(slurm, tmp_path):
    script = documented_batch_script([*PREEMPTED, f"run.max_env_steps={PREEMPTED_STEPS}"])
    run_dir = tmp_path / re.search(r"^RUN=(\S+)", script, re.MULTILINE).group(1)
    job = submit(slurm, tmp_path, batch_script(tmp_path, "preemptible.sh", script),
                 "--nodes=1", "--ntasks-per-node=2")
    wait_for_episodes(slurm, job, run_dir, tmp_path)
    assert slurm.job(job)["Restarts"] == "0"
    slurm.command(["scancel", "--signal=USR1", "--batch", job])  # as --signal=B:USR1@120 would

    fields = slurm.wait_for_job(job, timeout=120)
    said = output(tmp_path)
    # The first attempt stopped on the signal (exit 4: the only code on which the script
    # requeues), Slurm ran the script again and that attempt finished the budget.
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("COMPLETED", "0:0", "1"), said
    assert "drlmpi: stopped by SIGUSR1: checkpoint written" in said
    meta = read_meta(run_dir)
    assert meta["generation"] == 1 and 0 < meta["env_steps"] < PREEMPTED_STEPS
    assert (f"drlmpi: resumed from checkpoint generation 1 at {meta['env_steps']:,} env steps"
            in (run_dir / "rank0.log").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "max_env_steps" and summary["stop_signal"] is None
    assert summary["env_steps"] >= PREEMPTED_STEPS and summary["world_size"] == 2
    # every episode once: the first attempt's rows up to the checkpoint, then only later ones
    steps = [int(r["env_steps"]) for r in episode_rows(run_dir)]
    assert len(steps) == summary["episodes"] and steps == sorted(steps)
    before = meta["metrics_rows"]
    assert steps[before - 1] <= meta["env_steps"] < steps[before]
