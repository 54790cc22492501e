"""One run per run directory (drlmpi/run/ownership.py): a live run's directory is refused, a killed
run's stale lock taken over, a finished run kept unless resumed or replaced with run.overwrite;
the ranks a launcher re-launched recognise its lock. In-process, but for one command line that
shows the refusal comes before Hydra or any rank writes there."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf

from drlmpi.config.errors import ConfigError
from drlmpi.run.arguments import claim_run_directory
from drlmpi.run.ownership import INHERITED_LOCK, LOCK_FILE, claim, read_lock, release
from tests.conftest import REPO


def _plant_lock(run_dir, pid: int, host: str | None = None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / LOCK_FILE).write_text(json.dumps({"host": host or socket.gethostname(), "pid": pid,
                                                 "started": "2026-01-01 00:00:00"}))


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: the pid names no process (until reused, which a test cannot wait for)
    return child.pid


def test_a_directory_a_live_run_holds_is_refused_and_its_own_lock_released(tmp_path):
    """Catches: no lock written, a lock that is not checked, and release leaving it behind."""
    run = tmp_path / "run"
    assert claim(run) is None
    assert read_lock(run) == {**read_lock(run), "host": socket.gethostname(), "pid": os.getpid()}
    release(run)
    assert not (run / LOCK_FILE).exists()
    _plant_lock(run, os.getppid())  # a process that runs: the one that started pytest
    with pytest.raises(ConfigError, match=rf"^hydra.run.dir holds a live run \(pid {os.getppid()} on host "
                                          rf"{socket.gethostname()}, started 2026-01-01 00:00:00\)"):
        claim(run, overwrite=True, resuming=True)  # neither option shares a live run's directory
    release(run)  # not this process's lock: it stays
    assert read_lock(run)["pid"] == os.getppid()


def test_a_killed_runs_lock_is_taken_over_with_a_note(tmp_path):
    """Catches: every lock treated as live, so a directory of a job killed with -9 could never be
    resumed; and a zombie (a killed rank not reaped) counted as a running process."""
    run = tmp_path / "run"
    dead = _dead_pid()
    _plant_lock(run, dead)
    note = claim(run)
    assert note == (f"drlmpi: note: {run / LOCK_FILE} named pid {dead}, which is no longer running "
                    f"(a run that was killed): taken over")
    assert read_lock(run)["pid"] == os.getpid()
    zombie = subprocess.Popen(["true"])  # exits at once, not reaped until wait()
    try:
        deadline = time.monotonic() + 10.0  # on a loaded machine `true` may take a while to exit
        while open(f"/proc/{zombie.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.005)
        _plant_lock(run, zombie.pid)
        assert "no longer running" in claim(run)
    finally:
        zombie.wait()


def test_a_lock_of_another_host_cannot_be_checked_and_is_refused(tmp_path):
    run = tmp_path / "run"
    _plant_lock(run, 1, host="elsewhere")
    with pytest.raises(ConfigError, match=rf"a run of another host \(pid 1 on host elsewhere.*which this "
                                          rf"host cannot check: if it has ended, delete {run / LOCK_FILE}"):
        claim(run)


def test_the_ranks_a_launcher_started_take_its_lock_over(tmp_path, monkeypatch):
    """The process the user started claims the directory, then execs mpiexec (same pid): rank 0
    recognises that lock through DRLMPI_RUN_LOCK and rewrites it with its own pid. Catches a
    re-launched job refusing its own launcher's directory."""
    run = tmp_path / "run"
    launcher = os.getppid()
    _plant_lock(run, launcher)
    monkeypatch.setenv(INHERITED_LOCK, f"{socket.gethostname()}:{launcher}")
    assert claim(run) is None and read_lock(run)["pid"] == os.getpid()


def test_a_finished_run_is_kept_unless_resumed_or_replaced(tmp_path):
    """Catches: a finished run's directory silently reused (its metrics.csv replaced), resume=
    refused in its own directory, and run.overwrite leaving the old summary, policy, checkpoints
    and TensorBoard files beside the new run's."""
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "tb").mkdir()
    for name in ("summary.json", "policy.pt", "metrics.csv", "checkpoint/meta.json", "tb/events"):
        (run / name).write_text("{}")
    with pytest.raises(ConfigError, match=rf"^hydra.run.dir holds a finished run \(summary.json\): continue "
                                          rf"it with resume={run}, replace it with run.overwrite=true, or "
                                          rf"choose another directory, got {run}$"):
        claim(run)
    assert claim(run, resuming=True) is None and (run / "summary.json").exists()
    release(run)
    assert claim_run_directory([f"hydra.run.dir={run}", "run.overwrite=true"])
    assert sorted(p.name for p in run.iterdir()) == ["metrics.csv", LOCK_FILE]
    release(run)
    (run / "summary.json").write_text("{}")  # no checkpoint: resume= is not offered
    with pytest.raises(ConfigError, match=r"\(summary.json\): replace it with run.overwrite=true"):
        claim_run_directory([f"hydra.run.dir={run}", "run.overwrite=false"])
    assert not claim_run_directory(["hydra.run.dir=out/${algo.name}"])  # left to rank 0, once resolved


def test_the_default_directory_is_claimed_by_rank_0_once_hydra_resolved_it(tmp_path, capsys):
    """Catches the Hydra callback not claiming (two runs of one combination started in the same
    second would share the default outputs/<date>/<time>_... directory)."""
    from drlmpi.run.callbacks import RunChecks

    run = tmp_path / "run"
    config = OmegaConf.create({"hydra": {"run": {"dir": str(run)}}, "run": {"overwrite": False},
                               "resume": None})
    RunChecks().on_run_start(config)
    assert read_lock(run)["pid"] == os.getpid()
    release(run)
    _plant_lock(run, os.getppid())
    with pytest.raises(SystemExit) as info:
        RunChecks().on_run_start(config)
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith("drlmpi: error: hydra.run.dir holds a live run")


def test_a_second_run_into_a_live_runs_directory_is_refused_before_it_writes(tmp_path):
    """The form a user sees: exit code 2, one line, and nothing written into the directory (no
    .hydra/, no rank log). Catches a check made only after Hydra wrote .hydra/ there. ~2 s."""
    run = tmp_path / "run"
    _plant_lock(run, os.getpid())  # this test process: alive
    proc = subprocess.run([sys.executable, "-m", "drlmpi", f"hydra.run.dir={run}", "world_size=3",
                           "topology=star"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"drlmpi: error: hydra.run.dir holds a live run (pid {os.getpid()} on "
                                   f"host {socket.gethostname()}, started 2026-01-01 00:00:00): choose "
                                   f"another directory, got {run}")
    assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]


def test_a_sweep_that_runs_every_job_again_replaces_their_finished_runs(tmp_path):
    """hydra.launcher.resume=false runs every job again: over a finished run it passes
    run.overwrite=true (else the job refuses its own directory), and a later sweep still sees the
    job's overrides as its own. Catches a re-run sweep whose jobs all fail with exit code 2, and
    one that then calls them 'a finished run of other overrides'."""
    from drlmpi.sweep.jobs import recorded_overrides
    from hydra_plugins.drlmpi_launcher.mpi_launcher import MPILauncher

    job = tmp_path / "0_dqn"
    (job / ".hydra").mkdir(parents=True)
    assert MPILauncher(resume=False).replacing(job) == []
    (job / "summary.json").write_text("{}")
    assert MPILauncher(resume=False).replacing(job) == ["run.overwrite=true"]
    assert MPILauncher(resume=True).replacing(job) == []  # reused, never run
    (job / ".hydra" / "overrides.yaml").write_text("- seed=1\n- run.overwrite=true\n")
    assert recorded_overrides(job) == ["seed=1"]
