"""Multirun sweeps through the MPI launcher plugin: every job its own MPI world."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from drlmpi.job_control.abort import CONFIG_ERROR_EXIT, SWEEP_FAILED_EXIT
from drlmpi.job_control.launchers import NO_BIND_ARGS, mpi_flavour
from drlmpi.run.command_line import DEFAULT_SWEEPER, _with_default_sweeper
from tests import forked_sweeps
from tests.mpirun import REPO
from tests.shared_runs import TINY_DQN

#: the tiny cue task, quiet (tests/shared_runs.py); budgets set per sweep
TINY_CUE = [o for o in TINY_DQN if not o.startswith("run.max_env_steps")]


def _start_sweep(tmp_path, *overrides: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "drlmpi", "-m", *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def _finish(proc: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        raise AssertionError(f"sweep still running after {timeout} s: {stderr[-2000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _sweep(tmp_path, *overrides: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return _finish(_start_sweep(tmp_path, *overrides), timeout)


def _jobs(tmp_path) -> list[dict]:
    return json.loads((tmp_path / "sweep" / "jobs.json").read_text())


def test_failed_job_is_reported_and_the_sweep_goes_on_then_fails(tmp_path):
    """The sweep ends with its summary line and one line per failed job naming its exit code and
    log, exit code 6 (SWEEP_FAILED_EXIT); no traceback (Hydra raised the first failed job's error
    through its run_and_report)."""
    proc = _sweep(tmp_path, "topology=p2p", "world_size=2",
                  "env.id=tests.crash_env:CrashingCartPole-v0,CartPole-v1",
                  "run.max_env_steps=800", "run.progress_every_s=0", "+env.kwargs.crash_after=100")
    assert proc.returncode == SWEEP_FAILED_EXIT, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    jobs = _jobs(tmp_path)
    assert [j["status"] for j in jobs] == ["failed", "skipped"]  # CartPole-v1 has no crash_after
    assert jobs[0]["returncode"] != 0
    assert "simulated simulator crash" in jobs[0]["log_tail"]
    output = proc.stdout + proc.stderr
    assert "FAILED with exit code" in output and "simulated simulator crash" in output
    label = "topology=p2p world_size=2 env.id=tests.crash_env\\:CrashingCartPole-v0 run.max_env_steps=800 " \
            "run.progress_every_s=0 +env.kwargs.crash_after=100"
    summary, failed = proc.stdout.strip().splitlines()[-2:]
    listed = tmp_path / "sweep" / "jobs.json"
    assert summary.endswith(f"] sweep: 0 ok, 1 failed, 1 skipped; jobs listed in {listed}")
    assert failed.endswith(f"] sweep: failed: [1/2] {label}: exit code {jobs[0]['returncode']}; "
                           f"log {jobs[0]['run_dir']}/job.log")


def test_a_sweep_into_a_live_sweeps_directory_is_refused_before_any_of_its_jobs_runs(tmp_path):
    """A second sweep started into the directory of a sweep that runs is refused in one line naming
    that sweep (exit code 2) before it writes there or starts a job; the first sweep's jobs end as
    they would have alone. Catches the second sweep emptying the first's running job directory and
    running its own job there (it did, and stayed alive). The first sweep's jobs wait
    (tests.tiny_env:HeldCue-v0) until the second has ended. 9-23 s on 2 cores, over the usual
    5: two sweeping processes, the second started once the first runs, and two real jobs."""
    hold, sweep = tmp_path / "hold", tmp_path / "sweep"
    hold.write_text("")
    args = ["env.id=tests.tiny_env:HeldCue-v0", f"+env.kwargs.hold={hold}",
            *(o for o in TINY_CUE if not o.startswith("env.id=")), "run.max_env_steps=600", "seed=0,1"]
    first = _start_sweep(tmp_path, *args)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and first.poll() is None:
            if (sweep / "jobs.json").exists() and "running" in {j["status"] for j in _jobs(tmp_path)}:
                break
            time.sleep(0.1)
        assert first.poll() is None, "the first sweep ended before its first job ran"
        before = {name: (sweep / name).read_bytes() for name in ("multirun.yaml", "provenance.json",
                                                                  "jobs.json")}
        try:
            refused = _sweep(tmp_path, *args, timeout=90)
            after = {name: (sweep / name).read_bytes() for name in before}
        finally:
            hold.unlink()  # the first sweep's jobs go on
        done = _finish(first, timeout=120)
    finally:
        first.kill()
    assert refused.returncode == CONFIG_ERROR_EXIT, refused.stdout[-2000:] + refused.stderr[-2000:]
    line = refused.stderr.strip()
    assert "\n" not in line, refused.stderr
    assert line.startswith(f"drlmpi: error: hydra.sweep.dir holds a live sweep (pid {first.pid} on host "
                           f"{socket.gethostname()}, started ")
    assert line.endswith(f"): wait for it to end or choose another directory, got {sweep}")
    assert "composing" not in refused.stdout  # no job of it was even composed
    assert after == before  # nothing of the first sweep's rewritten (multirun.yaml included)
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = _jobs(tmp_path)
    assert [(j["overrides"][-1], j["status"]) for j in jobs] == [("seed=0", "ok"), ("seed=1", "ok")]
    for job in jobs:  # each job ran once, in the first sweep, to its summary
        summary = json.loads((Path(job["run_dir"]) / "summary.json").read_text())
        assert summary["env_steps"] >= 600 and summary["seed"] == int(job["overrides"][-1][-1])
        assert (Path(job["run_dir"]) / "job.log").read_text().count("$ ") == 1
    assert not (sweep / "sweep.lock").exists()  # removed when the first sweep ended


def _plant_lock(folder: Path, name: str, pid: int, host: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({"host": host or socket.gethostname(), "pid": pid,
                                           "started": "2026-01-01 00:00:00"}))


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: the pid names no process
    return child.pid


def test_the_sweep_lock_refuses_a_live_sweep_and_counts_a_stale_one_as_finished(tmp_path):
    """drlmpi/sweep/lock.py in-process (the sweeps themselves: the tests around this one)."""
    from drlmpi.config.errors import ConfigError
    from drlmpi.run.ownership import read_lock, release
    from drlmpi.sweep.lock import SWEEP_LOCK, claim_sweep

    mine = tmp_path / "mine"
    assert claim_sweep(mine) is None and claim_sweep(mine) is None  # the sweeper, then each launch
    assert read_lock(mine, SWEEP_LOCK)["pid"] == os.getpid()
    release(mine, SWEEP_LOCK)
    assert not (mine / SWEEP_LOCK).exists()
    live = tmp_path / "live"
    _plant_lock(live, SWEEP_LOCK, os.getppid())  # a process that runs: the one that started pytest
    with pytest.raises(ConfigError, match=rf"^hydra.sweep.dir holds a live sweep \(pid {os.getppid()} "
                                          rf"on host {socket.gethostname()}, started 2026-01-01 00:00:00\)"):
        claim_sweep(live)
    _plant_lock(live, SWEEP_LOCK, os.getppid(), host="elsewhere")
    with pytest.raises(ConfigError, match="holds a sweep of another host .* delete .*sweep.lock"):
        claim_sweep(live)
    (live / SWEEP_LOCK).write_text("{")
    with pytest.raises(ConfigError, match="unreadable sweep.lock"):
        claim_sweep(live)
    stale, dead = tmp_path / "stale", _dead_pid()
    _plant_lock(stale, SWEEP_LOCK, dead)
    assert claim_sweep(stale) == (f"drlmpi: note: {stale / SWEEP_LOCK} named pid {dead}, which is no longer "
                                  "running (a sweep that was killed): it counts as finished, and this sweep "
                                  "continues it")
    assert read_lock(stale, SWEEP_LOCK)["pid"] == os.getpid()
    release(stale, SWEEP_LOCK)


def test_a_finished_sweep_is_continued_only_by_a_sweep_of_its_jobs(tmp_path):
    from drlmpi.sweep.lock import other_jobs

    (tmp_path / "jobs.json").write_text(json.dumps([{"job": 0, "overrides": ["seed=0"]},
                                                    {"job": 1, "overrides": ["seed=1"]}]))
    assert other_jobs(tmp_path / "none", [["seed=5"]]) is None  # no jobs.json: a new sweep
    assert other_jobs(tmp_path, [["seed=0"], ["seed=1"]]) is None
    assert other_jobs(tmp_path, [["seed=0"], ["seed=1"], ["seed=2"]]) is None  # one job more
    assert other_jobs(tmp_path, [["seed=1"]], first=1) is None  # a tuner's later batch
    assert other_jobs(tmp_path, [["seed=0"], ["seed=2"]]) == (
        f"hydra.sweep.dir holds a sweep of other jobs (job 1 there: 'seed=1', here: 'seed=2'): re-run "
        f"the command that made it to continue it, or choose another directory; got {tmp_path}")


#: a sweep whose job directories are named by their job numbers alone (tests plant them)
NUMBERED = ["-m", "seed=0,1", "hydra.launcher.dry_run=true", "hydra.sweep.subdir=${hydra.job.num}"]


@pytest.fixture(scope="module")
def planted_sweeps(tmp_path_factory):
    """Dry runs into sweep directories an earlier sweep left: one of other jobs, one of the same
    jobs (its job 0 finished), one whose sweep was killed (a stale sweep.lock; a job of it still
    runs in job 1's directory). All at once, forked from one process that imported drlmpi
    (tests/forked_sweeps.py): about 5 s on 2 cores for the three."""
    folders = {name: tmp_path_factory.mktemp(name) for name in ("other", "same", "stale")}
    for name, listed in (("other", ["seed=5", "seed=1"]), ("same", ["seed=0", "seed=1"]), ("stale", [])):
        sweep = folders[name] / "sweep"
        sweep.mkdir()
        (sweep / "jobs.json").write_text(json.dumps(
            [{"job": i, "overrides": [o], "run_dir": str(sweep / str(i)), "status": "ok", "returncode": 0}
             for i, o in enumerate(listed)], indent=2) + "\n")
        (sweep / "multirun.yaml").write_text("the earlier sweep's\n")
        (sweep / "provenance.json").write_text("{}\n")
    done = folders["same"] / "sweep" / "0"  # a finished job 0
    (done / ".hydra").mkdir(parents=True)
    (done / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (done / "summary.json").write_text(json.dumps({"solved": False}))
    _plant_lock(folders["stale"] / "sweep", "sweep.lock", _dead_pid())
    _plant_lock(folders["stale"] / "sweep" / "1", "run.lock", os.getpid())  # this test process: alive
    before = {p.name: p.read_bytes() for p in (folders["other"] / "sweep").iterdir()}
    runs = [(folder, [*NUMBERED, f"hydra.sweep.dir={folder / 'sweep'}"]) for folder in folders.values()]
    return forked_sweeps.start(runs, tmp_path_factory.mktemp("forked") / "runs.json"), folders, before


def test_a_sweep_of_other_jobs_is_refused_in_one_line_and_one_of_the_same_jobs_continues(planted_sweeps):
    """Catches a sweep that runs into a finished sweep of other jobs (each job then failed on its
    own, or ran where the other sweep's results were) and one refused though its jobs are the same."""
    forked, folders, before = planted_sweeps
    sweep = folders["other"] / "sweep"
    proc = forked.result(folders["other"])
    assert proc.returncode == CONFIG_ERROR_EXIT, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        "drlmpi: error: hydra.sweep.dir holds a sweep of other jobs (job 0 there: 'seed=5', here: "
        "'seed=0'): re-run the command that made it to continue it, or choose another directory; "
        f"got {sweep}")
    assert {p.name: p.read_bytes() for p in sweep.iterdir()} == before  # nothing written, no lock left
    same = forked.result(folders["same"])
    assert same.returncode == 0, same.stderr[-2000:]
    assert [j["status"] for j in _jobs(folders["same"])] == ["reused", "dry_run"]
    assert not (folders["same"] / "sweep" / "sweep.lock").exists()


def test_a_stale_sweep_lock_counts_as_finished_and_a_job_still_running_is_left_alone(planted_sweeps):
    """A sweep killed with -9 leaves its lock (and maybe its jobs: they run in sessions of their
    own): the next sweep says so in one line and continues it, except a job whose run directory a
    live run still holds, which fails with that reason rather than being emptied."""
    forked, folders, _ = planted_sweeps
    sweep = folders["stale"] / "sweep"
    proc = forked.result(folders["stale"])
    assert proc.returncode == SWEEP_FAILED_EXIT, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().startswith(f"drlmpi: note: {sweep / 'sweep.lock'} named pid ")
    assert proc.stderr.strip().endswith("(a sweep that was killed): it counts as finished, and this sweep "
                                        "continues it")
    assert "\n" not in proc.stderr.strip()
    first, second = _jobs(folders["stale"])
    assert first["status"] == "dry_run"
    assert second["status"] == "failed" and second["reason"] == (
        f"{sweep / '1'} holds a live run (pid {os.getpid()} on host {socket.gethostname()}, started "
        "2026-01-01 00:00:00): wait for it to end, then re-run the same command")
    assert proc.stdout.strip().splitlines()[-1].endswith(f"] sweep: failed: [2/2] seed=1: {second['reason']}")
    assert json.loads((sweep / "1" / "run.lock").read_text())["pid"] == os.getpid()  # left as it was
    assert not (sweep / "sweep.lock").exists()


def _kill_processes_naming(path: Path) -> list[int]:
    """Kill (SIGKILL) every process whose command line names ``path``; returns their pids."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and str(path).encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                os.kill(int(entry), signal.SIGKILL)
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_sigterm_stops_the_sweep_and_its_running_job_with_a_checkpoint(tmp_path):
    """SIGTERM to the sweep's own process (what ``timeout`` and batch systems send): the running
    job gets it too and stops with a checkpoint, the next job never starts, and the sweep exits
    with code 4 and one line, no traceback - whatever the launch command does with SIGTERM: here
    it kills its ranks at once, as Open MPI's ``mpirun`` does (tests/kill_on_term_launcher.py), so
    the sweep signals the job's ranks, not its launcher. About 10 s: a real sweep and a real job
    start (the scheduler's side alone: tests/test_launcher_slots.py)."""
    quiet = [o for o in TINY_CUE if not o.startswith("run.progress_every_s")]
    launcher = f"{sys.executable} {REPO / 'tests' / 'kill_on_term_launcher.py'}"
    proc = _start_sweep(tmp_path, *quiet, "run.max_env_steps=10000000", "run.progress_every_s=0.2",
                        "run.checkpoint_every_s=0", "seed=0,1", env={"DRLMPI_MPIEXEC": launcher})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        rows = list((tmp_path / "sweep").glob("0_*/metrics.csv"))
        if rows and len(rows[0].read_text().splitlines()) > 2:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the sweep ended before its first job was learning"
    proc.send_signal(signal.SIGTERM)
    try:
        done = _finish(proc, timeout=90)
    finally:
        time.sleep(0.5)
        left = _kill_processes_naming(tmp_path / "sweep")  # what a broken sweep leaves running
    assert not left, f"processes of the sweep's jobs outlived it: {left}"
    assert done.returncode == 4 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "sweep: stopped by SIGTERM" in done.stdout + done.stderr
    first, second = _jobs(tmp_path)
    assert first["status"] == "failed" and "stopped by a signal with a checkpoint" in first["reason"]
    summary = json.loads((Path(first["run_dir"]) / "summary.json").read_text())
    assert summary["stop_reason"] == "signal" and summary["stop_signal"] == "SIGTERM"
    assert second["status"] == "skipped" and "the sweep was stopped by SIGTERM" in second["reason"]


def test_dry_run_prints_the_command_it_would_submit(tmp_path):
    proc = _sweep(tmp_path, "topology=star", "world_size=4", "hydra.launcher.dry_run=true",
                  "hydra.launcher.mpiexec=[srun,'--mpi=pmix']", "hydra.launcher.extra_args=[--exclusive]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (job,) = _jobs(tmp_path)
    assert job["status"] == "dry_run"
    assert job["command"][:5] == ["srun", "--mpi=pmix", "-n", "4", "--exclusive"]
    assert job["command"][-2:] == [f"hydra.run.dir={job['run_dir']}", "hydra.mode=RUN"]
    assert "topology=star" in job["command"] and "world_size=4" in job["command"]
    # a sweep naming no sweeper gets drlmpi's (each job composed once, by the launcher)
    hydra_cfg = OmegaConf.load(tmp_path / "sweep" / "multirun.yaml").hydra
    assert hydra_cfg.sweeper._target_ == "hydra_plugins.drlmpi_launcher.mpi_sweeper.MPISweeper"


def test_a_sweep_packing_gpu_learners_side_by_side_says_they_share_the_gpu():
    """Cores are not GPUs: two or more device learners packed side by side are named in one
    line; jobs one at a time, or a single device learner among CPU jobs, say nothing."""
    from drlmpi.sweep.scheduler import shared_gpu_note

    note = shared_gpu_note(["cuda", "cpu", "cuda"], 16)
    assert note is not None and "\n" not in note
    assert note.startswith("sweep: 2 jobs learn on a GPU and run side by side on 16 core(s)")
    assert "hydra.launcher.cores=null" in note
    assert shared_gpu_note(["cuda", "cuda"], None) is None
    assert shared_gpu_note(["cuda", "cpu", "cpu"], 16) is None


def test_a_sweep_naming_no_sweeper_gets_drlmpis():
    """Added among the overrides (argparse wants them together), unless the command line or the
    preset's defaults pick one, or nothing is swept."""
    from hydra._internal.utils import get_args_parser

    assert _with_default_sweeper(["-m", "seed=0,1"]) == ["-m", DEFAULT_SWEEPER, "seed=0,1"]
    assert _with_default_sweeper(["+experiment=learning_matrix", "seed=0"])[0] == DEFAULT_SWEEPER
    argv = _with_default_sweeper(["--multirun", "seed=0,1", "algo=dqn"])
    assert get_args_parser().parse_args(argv).overrides == [DEFAULT_SWEEPER, "seed=0,1", "algo=dqn"]
    for keep in (["-m", "hydra/sweeper=optuna", "seed=0"], ["+experiment=tune_dqn_cartpole"], ["seed=0"],
                 ["-m", "--cfg", "job"], ["-m", "--info"]):
        assert _with_default_sweeper(keep) == keep


def test_the_sweeper_leaves_composing_to_the_mpi_launcher():
    """Hydra's basic sweeper composes every job to check it, then the launcher composes each
    again; with the MPI launcher (which composes and checks every job before any starts) the
    sweeper does not, with any other launcher it does."""
    from types import SimpleNamespace

    from hydra_plugins.drlmpi_launcher.mpi_launcher import MPILauncher
    from hydra_plugins.drlmpi_launcher.mpi_sweeper import MPISweeper

    composed = []
    loader = SimpleNamespace(load_sweep_config=lambda master_config, sweep_overrides:
                             composed.append(sweep_overrides))
    sweeper = MPISweeper(max_batch_size=None, params=None)
    sweeper.config, sweeper.hydra_context = OmegaConf.create({}), SimpleNamespace(config_loader=loader)
    sweeper.launcher = MPILauncher()
    sweeper.validate_batch_is_legal([["seed=0"], ["seed=1"]])
    assert composed == []
    sweeper.launcher = SimpleNamespace()  # e.g. Submitit's, composing each job in its Slurm job
    sweeper.validate_batch_is_legal([["seed=0"], ["seed=1"]])
    assert composed == [["seed=0"], ["seed=1"]]


def test_a_job_without_a_world_size_is_named_by_the_ranks_it_runs_on(tmp_path):
    """world_size null: each job runs on its topology's smallest world, and its folder says so
    (``_n2``, not ``_nNone``)."""
    proc = _sweep(tmp_path, "topology=star,sequential", "hydra.launcher.dry_run=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    star, sequential = _jobs(tmp_path)
    assert (star["ranks"], sequential["ranks"]) == (2, 1)
    assert star["run_dir"].endswith("_star_n2") and sequential["run_dir"].endswith("_sequential_n1")


def test_a_job_whose_config_cannot_resolve_is_skipped_with_the_reason(tmp_path):
    proc = _sweep(tmp_path, "+experiment=learning_matrix", "+experiment/pair=dqn_cartpole", "seed=0",
                  "topology=sequential,p2p", "~world_size_by_topology.p2p",
                  "hydra.launcher.dry_run=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    sequential, p2p = _jobs(tmp_path)
    assert sequential["status"] == "dry_run" and sequential["ranks"] == 1
    assert p2p["status"] == "skipped" and "world_size_by_topology" in p2p["reason"]


def test_a_sweep_runs_each_job_in_its_own_world_side_by_side_then_reuses_them(tmp_path):
    """cores=2: impossible combinations are skipped with the reason; each 2-rank job runs under
    mpiexec alone, the 1-rank jobs side by side on their own CPU; each run is its own MPI world of
    its world size. The same command again (same sweep dir) runs nothing and records the jobs as
    reused; another sweep of other jobs is refused in one line, and without jobs.json a job that
    would overwrite a finished run of other overrides fails instead; then python -m drlmpi.report
    on the sweep."""
    args = ["hydra.launcher.cores=2", "topology=sequential,p2p", "world_size=1,2", "seed=0,1",
            "run.max_env_steps=600", *TINY_CUE]
    proc = _sweep(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _jobs(tmp_path)
    assert len(records) == 8
    skipped = [j for j in records if j["status"] == "skipped"]
    assert sorted((j["overrides"][0], j["overrides"][1]) for j in skipped) == \
        [("topology=p2p", "world_size=1")] * 2 + [("topology=sequential", "world_size=2")] * 2
    for job in skipped:  # a sweep's job is sized by its world_size=, which the reason names
        needs = ("exactly 1 rank (world_size=1), the job has world_size=2" if job["overrides"][0] ==
                 "topology=sequential" else "exactly 2 ranks (world_size=2), the job has world_size=1")
        assert job["reason"].endswith(f"needs {needs}")
    assert "skipped: topology=p2p needs exactly 2 ranks (world_size=2)" in proc.stdout + proc.stderr
    record = json.loads((tmp_path / "sweep" / "provenance.json").read_text())
    assert record["command"].startswith("python -m drlmpi -m ") and " ".join(args) in record["command"]
    assert record["launcher"] == ["mpiexec"] and record["commit"] and record["versions"]["torch"]
    jobs = {(j["overrides"][0], j["overrides"][2]): j for j in records if j["status"] != "skipped"}
    assert [j["status"] for j in jobs.values()] == ["ok"] * 4
    for job in jobs.values():  # each run is its own world of its size
        summary = json.loads((Path(job["run_dir"]) / "summary.json").read_text())
        assert summary["world_size"] == int(job["overrides"][1].split("=")[1]) == job["ranks"]
    seq0, seq1 = jobs[("topology=sequential", "seed=0")], jobs[("topology=sequential", "seed=1")]
    assert seq0["started"] < seq1["ended"] and seq1["started"] < seq0["ended"], "not side by side"
    assert {seq0["cpus"], seq1["cpus"]} == {str(c) for c in sorted(os.sched_getaffinity(0))[:2]}
    p2p = [j for key, j in jobs.items() if key[0] == "topology=p2p"]
    unbound = NO_BIND_ARGS[mpi_flavour("mpiexec")]  # MPICH's -bind-to, Open MPI's --bind-to
    assert all(j["command"][:5] == ["mpiexec", "-n", "2", *unbound] for j in p2p)
    for j in p2p:  # a 2-rank job takes both cores: nothing beside it
        assert not any(o is not j and o["started"] < j["ended"] and j["started"] < o["ended"]
                       for o in jobs.values())

    def stamps() -> list[int]:
        return [(Path(j["run_dir"]) / "summary.json").stat().st_mtime_ns for j in jobs.values()]

    before = stamps()
    again = _sweep(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = [r for r in _jobs(tmp_path) if r["status"] != "skipped"]
    assert len(rerun) == 4 and {r["status"] for r in rerun} == {"reused"}
    assert stamps() == before
    assert [(r["started"], r["returncode"]) for r in rerun] == [(j["started"], 0) for j in jobs.values()]
    # Another sweep in the same directory: its job list is not the one jobs.json lists, so it is
    # refused before it writes anything there.
    other_jobs = ["topology=sequential", "world_size=1", "seed=1,0", "hydra.launcher.dry_run=true"]
    listed = (tmp_path / "sweep" / "jobs.json").read_bytes()
    other = _sweep(tmp_path, *other_jobs)
    assert other.returncode == CONFIG_ERROR_EXIT and "Traceback" not in other.stderr, other.stderr[-2000:]
    assert other.stderr.strip().startswith("drlmpi: error: hydra.sweep.dir holds a sweep of other jobs "
                                           "(job 0 ")
    assert (tmp_path / "sweep" / "jobs.json").read_bytes() == listed
    _check_report(tmp_path, jobs)
    # Without jobs.json (deleted), each job's run directory still says whose it is: a job whose run
    # dir holds other overrides' results fails instead of reusing or overwriting them.
    (tmp_path / "sweep" / "jobs.json").unlink()
    other = _sweep(tmp_path, *other_jobs)
    assert other.returncode == SWEEP_FAILED_EXIT
    clash = next(r for r in _jobs(tmp_path)
                 if r["overrides"] == ["topology=sequential", "world_size=1", "seed=1"])
    assert clash["status"] == "failed" and "holds a finished run of other overrides" in clash["reason"]
    assert f"sweep: failed: [1/2] topology=sequential world_size=1 seed=1: {clash['reason']}" in other.stdout


def _check_report(tmp_path, jobs: dict) -> None:
    from drlmpi.report.__main__ import main as report_main

    out = tmp_path / "report"  # the command's own function, in this process (a process costs ~3 s)
    assert report_main([str(tmp_path / "sweep"), "--out", str(out)]) == 0
    with open(out / "table.csv") as f:
        rows = {(r["topology"], int(r["world_size"])): r for r in csv.DictReader(f)}
    assert set(rows) == {("sequential", 1), ("p2p", 2)}
    train: dict[str, list[float]] = {}
    for job in jobs.values():
        summary = json.loads((Path(job["run_dir"]) / "summary.json").read_text())
        train.setdefault(summary["topology"], []).append(summary["train_seconds"])
    assert int(rows[("p2p", 2)]["n"]) == 2
    speedup = float(rows[("p2p", 2)]["speedup_fixed"])
    assert speedup == pytest.approx(sum(train["sequential"]) / sum(train["p2p"]), rel=1e-2)
    assert float(rows[("sequential", 1)]["speedup_fixed"]) == 1.0
    text = (out / "report.md").read_text()
    assert "Standard" in text  # the DQN paper's layout, its other names as the topologies declare
    if json.loads((Path(jobs[("topology=p2p", "seed=0")]["run_dir"]) / "summary.json").read_text()).get(
            "paper_label"):
        assert "2 Processes" in text
    assert "## Learning: solved runs" in text and "## Throughput" in text
    for png in ("return_vs_time.png", "return_vs_steps.png", "speedup.png", "time_breakdown.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


# Every preset: (overrides narrowing its sweep, jobs, jobs that run, {reason of a skipped job:
# how many}, jobs of the whole sweep). The launcher composes and checks each job (~0.1 s on one
# core), so each dry run is narrowed to the kinds of job its preset holds; the whole sweep's size
# and parameters are checked on the preset's own composed config.
PRESETS = {
    "dqn_paper_cartpole": ([], 15, 6, {"topology=sequential needs exactly 1 rank": 4,
                                       "topology=p2p needs exactly 2 ranks": 4,
                                       "topology=star needs at least 2 ranks": 1}, 15),
    "dqn_paper_lunarlander": (["world_size=1,2"], 6, 3, {"topology=sequential needs exactly 1 rank": 1,
                                                        "topology=p2p needs exactly 2 ranks": 1,
                                                        "needs at least 2 ranks": 1}, 15),
    "td3_slides_pendulum": (["seed=0"], 12, 8, {"topology=sequential needs exactly 1 rank": 3,
                                                "needs at least 2 ranks": 1}, 24),
    "ppo_tetris_grid": (["world_size=2"], 6, 6, {}, 30),
    "learning_matrix": (["seed=0", "+experiment/pair=dqn_cartpole,ppo_pendulum"], 14, 14, {}, 126),
    "ddp_cartpole": (["device=cpu"], 6, 6, {}, 6),  # on CPU: allgather's backend auto is mpi
    "ppo_breakout_16": (["device=cpu"], 1, 1, {}, 1),  # one central run of 16 ranks, not a sweep
    "ppo_breakout_groups4": (["device=cpu"], 1, 1, {}, 1),  # one run of 64 ranks (4 groups), not a sweep
    "soak_async": ([], 1, 1, {}, 1),  # one job of 9 ranks, checked by the report (test_report_checks)
    "td3_mujoco": (["seed=0"], 2, 2, {}, 6),  # HalfCheetah and Hopper x 3 seeds, star on 8 ranks
    "dqn_lunarlander_ttt": (["seed=0"], 2, 2, {}, 6),  # sequential and star 16 x 3 seeds
    "td3_halfcheetah_ttt": (["seed=0"], 2, 2, {}, 6),  # sequential and star 8 x 3 seeds
    "dqn_lunarlander_seed_spread": (["seed=0"], 2, 2, {}, 10),  # sequential and star's stand-in x 5 seeds
    "ppo_async_vtrace": (["seed=0", "algo.vtrace=true"], 5, 5, {}, 30),  # 5 settings x V-trace x 3 seeds
    "ppo_breakout_topologies": (["device=cpu"], 4, 4, {}, 4),  # star, central, allgather, the ceiling
    "dqn_act_cost": ([], 3, 3, {}, 3),  # three repeats of one sequential run
    "topology_throughput": (["env.sim_cost_ms=5", "world_size=1,16"], 16, 10,
                            {"topology=sequential needs exactly 1 rank": 2,
                             "topology=star needs at least 2 ranks": 2,
                             "topology=async needs at least 2 ranks": 2}, 120),
}


#: presets whose sweep is not a grid (a dry run cannot list it): where each is tested instead
COVERED_ELSEWHERE = {"tune_dqn_cartpole": "tests/test_tune.py runs 2 of its Optuna trials"}


def test_every_preset_is_covered():
    assert {p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml")} == set(PRESETS) | set(
        COVERED_ELSEWHERE)


@pytest.mark.parametrize("preset", ["dqn_lunarlander_ttt", "td3_halfcheetah_ttt"])
def test_time_to_threshold_presets_shorten_star_rounds_only(preset):
    """Star's rounds are 64 steps a simulator in both studies; sequential keeps its default 256
    steps between training phases (a preset's ``topology.sync_every`` would otherwise reach both),
    and an added topology without an entry is refused by the interpolation, not run as is."""
    from omegaconf.errors import InterpolationKeyError

    from drlmpi.config.schema import group_config
    from drlmpi.run.preflight import make_plan

    star = _compose_preset(preset, "topology=star")
    sequential = _compose_preset(preset, "topology=sequential")
    assert star.topology.sync_every == 64 and star.topology.sync_unit == "steps"
    assert sequential.topology.sync_every == group_config("topology", "sequential").sync_every == 256
    assert (sequential.world_size, star.world_size) == (1, 16 if preset.startswith("dqn") else 8)
    assert star.device == "auto" and star.run.stop_on_solve
    for cfg in (star, sequential):  # as measured: 8 updates a graph replay, TF32 products
        assert cfg.algo.updates_per_graph == 8 and cfg.run.matmul_precision == "high"
    assert make_plan(sequential, world_size=1).topology_cls.name == "sequential"
    with pytest.raises(InterpolationKeyError):
        _ = _compose_preset(preset, "topology=async").topology.sync_every


def _compose_preset(preset: str, *overrides: str, hydra: bool = False):
    """``+experiment=preset`` composed in-process with ``overrides`` (``hydra``: with Hydra's own
    config, whose directories need the ``launch_time`` resolver)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from drlmpi.run.command_line import _launch_time_resolver

    OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=[f"+experiment={preset}", *overrides], return_hydra_config=hydra)


def _sweep_params(preset: str) -> dict[str, list[str]]:
    """The preset's sweep: parameter -> its values, from its composed config."""
    cfg = _compose_preset(preset, hydra=True)
    params = cfg.hydra.sweeper.params or {}  # a one-run preset sweeps nothing
    return {key: str(value).split(",") for key, value in params.items()}


@pytest.fixture(scope="module")
def preset_dry_runs(tmp_path_factory):
    """Every preset's (narrowed) dry run, all at once: each is one sweeping process composing
    configs on one core, forked from one process that imported drlmpi (tests/forked_sweeps.py),
    so the ten pay drlmpi's imports - torch's 1.9 s - once; each still runs the whole command
    to its exit status. The first test to ask waits for all of them."""
    folders = {preset: tmp_path_factory.mktemp(preset) for preset in [*PRESETS, PLAIN]}
    runs = [(folders[preset], ["-m", f"+experiment={preset}", *narrow, "hydra.launcher.dry_run=true",
                               f"hydra.sweep.dir={folders[preset] / 'sweep'}"])
            for preset, (narrow, *_) in PRESETS.items()]
    runs.append((folders[PLAIN], ["-m", *PLAIN_SWEEP, f"hydra.sweep.dir={folders[PLAIN] / 'sweep'}"]))
    return forked_sweeps.start(runs, tmp_path_factory.mktemp("forked") / "runs.json"), folders


#: a user's own sweep, dry run beside the presets' (not a preset's name: a folder's)
PLAIN = "plain_sweep"
PLAIN_SWEEP = ["topology=sequential,star", "world_size=1,3", "run.max_env_steps=500",
               "hydra.launcher.dry_run=true"]


def test_any_sweep_records_its_provenance_and_names_world_size_in_a_skip(preset_dry_runs):
    """provenance.json in the sweep directory (here without a GPU or nvidia-smi: none listed),
    and each skipped job's line naming the world_size= its topology needs."""
    forked, folders = preset_dry_runs
    proc = forked.result(folders[PLAIN])
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((folders[PLAIN] / "sweep" / "provenance.json").read_text())
    assert record["command"].startswith("python -m drlmpi -m ") and " ".join(PLAIN_SWEEP) in record["command"]
    assert record["commit"] and record["date"].endswith("UTC") and record["launcher"]
    assert record["machine"]["cores"] and record["machine"]["cpu"] is not None
    assert len(record["machine"]["gpus"]) == len(record["machine"]["gpu_details"])
    assert record["versions"]["drlmpi"] and record["versions"]["mpi4py"] and "earlier" not in record
    output = proc.stdout + proc.stderr
    assert ("skipped: topology=sequential needs exactly 1 rank (world_size=1), the job has world_size=3"
            in output)
    assert ("skipped: topology=star needs at least 2 ranks (world_size=2 or more), the job has world_size=1"
            in output)
    assert "launch it with" not in output and [j["status"] for j in _jobs(folders[PLAIN])] == [
        "dry_run", "skipped", "skipped", "dry_run"]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_compose_into_their_studies(preset_dry_runs, preset):
    narrow, total, runs, skipped, whole = PRESETS[preset]
    params = _sweep_params(preset)
    assert math.prod(len(values) for values in params.values()) == whole
    forked, folders = preset_dry_runs
    folder = folders[preset]
    proc = forked.result(folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = _jobs(folder)
    assert len(jobs) == total and sum(j["status"] == "dry_run" for j in jobs) == runs
    reasons = [j["reason"] for j in jobs if j["status"] == "skipped"]
    assert len(reasons) == total - runs
    for text, count in skipped.items():
        assert sum(text in r for r in reasons) == count, (text, reasons)
    ran = [j for j in jobs if j["status"] == "dry_run"]
    if preset == "dqn_paper_cartpole":  # Standard, 2 Processes, MP(2)..MP(5)
        assert sorted((j["overrides"][0], j["ranks"]) for j in ran) == [
            ("topology=p2p", 2), ("topology=sequential", 1), ("topology=star", 2), ("topology=star", 3),
            ("topology=star", 4), ("topology=star", 5)]
    if preset == "learning_matrix":  # 6 pairs x 7 topologies (x 3 seeds), each at its world size
        assert len(params["+experiment/pair"]) == 6 and len(params["seed"]) == 3
        ranks = {o.split("=")[1]: j["ranks"] for j in jobs for o in j["overrides"]
                 if o.startswith("topology=")}
        assert ranks == {"sequential": 1, "p2p": 2, "star": 3, "parameter_server": 3, "async": 3,
                         "allgather": 3, "central": 3}
    if preset == "ppo_breakout_16":  # one run on the 16 ranks the preset names
        assert ran[0]["ranks"] == 16 and "+experiment=ppo_breakout_16" in ran[0]["overrides"]
    if preset == "td3_mujoco":  # the paper's 1M steps, evaluated every 5,000
        assert sorted(o for j in ran for o in j["overrides"] if o.startswith("env=")) == [
            "env=halfcheetah", "env=hopper"] and all(j["ranks"] == 8 for j in ran)
    if preset.endswith("_ttt"):  # time to threshold: sequential on 1 rank against star on many
        assert params == {"topology": ["sequential", "star"], "seed": ["0", "1", "2"]}
        assert sorted((o, j["ranks"]) for j in ran for o in j["overrides"] if o.startswith("topology=")) == [
            ("topology=sequential", 1), ("topology=star", 16 if preset.startswith("dqn") else 8)]
    if preset == "dqn_lunarlander_seed_spread":  # star's stand-in: 2 ranks, sequential's 1
        assert sorted((j["overrides"][0], j["ranks"]) for j in ran) == [("topology=sequential", 1),
                                                                         ("topology=star", 2)]
    if preset in ("ppo_async_vtrace", "ppo_breakout_topologies"):  # a setting a job, from the preset's group
        group = "vtrace" if preset == "ppo_async_vtrace" else "breakout"
        settings = {o for j in ran for o in j["overrides"] if o.startswith(f"+experiment/{group}=")}
        assert len(settings) == len(ran)
        assert {j["ranks"] for j in ran} == {3 if group == "vtrace" else 16}
    if preset == "topology_throughput":  # the raw-stepping ceiling: algo=random beside each cell
        assert params["algo"] == ["dqn", "random"]
        assert sum("algo=random" in j["overrides"] for j in ran) == 5
        assert max(j["ranks"] for j in ran) == 16


def test_sweeping_process_never_initialises_mpi():
    code = ("import sys\n"
            "from hydra_plugins.drlmpi_launcher.mpi_launcher import MPILauncher, job_ranks\n"
            "from drlmpi.run.preflight import make_plan\n"
            "import drlmpi.topologies.star, drlmpi.topologies.asynchronous, drlmpi.topologies.allgather\n"
            "import drlmpi.algos.random_policy, drlmpi.report\n"
            "assert 'mpi4py.MPI' not in sys.modules, 'MPI imported'\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


def test_hydra_plugins_import_no_torch():
    """Hydra's plugin scan imports every module of hydra_plugins/ in every Hydra app it starts
    (where drlmpi is installed, other projects' apps too): the launcher imports make_plan - torch,
    Gymnasium - only in the functions that check a job. (A sweeping process does import torch: its
    first job's make_plan builds the algorithm and asks torch about CUDA devices.)"""
    code = ("import importlib, pkgutil, sys\n"
            "import hydra_plugins.drlmpi_launcher as plugins\n"
            "for module in pkgutil.walk_packages(plugins.__path__, plugins.__name__ + '.'):\n"
            "    importlib.import_module(module.name)\n"
            "heavy = [m for m in ('torch', 'gymnasium', 'matplotlib', 'scipy') if m in sys.modules]\n"
            "assert not heavy, f'hydra_plugins/drlmpi_launcher imports {heavy}'\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


def test_a_one_value_sweep_is_not_relaunched():
    """``world_size=16`` in a sweep preset (hydra.mode: MULTIRUN) is one sweep value: re-launching
    the sweeping process itself under ``mpiexec -n 16`` ran 16 sweepers (each calling mpiexec)."""
    from drlmpi.run.command_line import _is_multirun

    assert _is_multirun(["+experiment=topology_throughput", "world_size=16"])
    assert _is_multirun(["experiment=learning_matrix", "world_size=3"])
    assert _is_multirun(["hydra.mode=MULTIRUN", "world_size=2"]) and _is_multirun(["-m", "world_size=2"])
    assert not _is_multirun(["world_size=2", "topology=p2p"])
    assert not _is_multirun(["+experiment=no_such_preset", "world_size=2"])
