"""One launch command (``DRLMPI_MPIEXEC``, drlmpi/job_control/launchers.py) for every launch drlmpi
makes: ``python -m drlmpi world_size=N`` re-executing itself, each job of a sweep (a preset's too)
and the planner's probes. A stand-in launcher on PATH records the arguments each is started with."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from drlmpi.config.errors import ConfigError
from drlmpi.job_control import launchers
from drlmpi.job_control.launchers import launch_command, mpiexec_command, size_refusal
from tests.mpirun import REPO

#: records every launch beside itself, one JSON list of its arguments a line, and starts nothing
FAKE_LAUNCHER = """#!/usr/bin/env python3
import json, os, sys
with open(os.path.join(os.path.dirname(sys.argv[0]), "launches.jsonl"), "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
"""


@pytest.fixture
def fake_launcher(tmp_path, monkeypatch):
    """``DRLMPI_MPIEXEC`` naming a stand-in launcher (with a flag of its own); its launches."""
    script = tmp_path / "fake-mpirun"
    script.write_text(FAKE_LAUNCHER)
    script.chmod(0o755)
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("DRLMPI_MPIEXEC", f"{script} --site-flag 'two words'")
    monkeypatch.delenv("DRLMPI_PLAN_MPIEXEC", raising=False)

    def launches() -> list[list[str]]:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    return script, launches


def test_the_setting_is_read_split_and_refused_in_one_line_when_unusable(monkeypatch):
    monkeypatch.delenv("DRLMPI_MPIEXEC", raising=False)
    monkeypatch.delenv("DRLMPI_PLAN_MPIEXEC", raising=False)
    assert mpiexec_command() == ["mpiexec"]
    monkeypatch.setenv("DRLMPI_MPIEXEC", "mpirun --bind-to none -x 'A=1 2'")
    assert mpiexec_command() == ["mpirun", "--bind-to", "none", "-x", "A=1 2"]
    monkeypatch.setenv("DRLMPI_MPIEXEC", "  ")
    with pytest.raises(ConfigError, match="^DRLMPI_MPIEXEC is empty"):
        mpiexec_command()
    monkeypatch.setenv("DRLMPI_MPIEXEC", "mpirun 'unclosed")
    with pytest.raises(ConfigError, match="cannot be split into words"):
        mpiexec_command()
    monkeypatch.setenv("DRLMPI_MPIEXEC", "mpiexec")
    monkeypatch.setenv("DRLMPI_PLAN_MPIEXEC", "mpirun --oversubscribe")
    with pytest.raises(ConfigError, match="^DRLMPI_PLAN_MPIEXEC is no longer read: set DRLMPI_MPIEXEC"):
        mpiexec_command()


def test_drlmpis_flags_join_the_launch_command_once(monkeypatch):
    monkeypatch.setitem(launchers._FLAVOURS, "mpirun", "openmpi")
    program = ["python", "-m", "drlmpi"]
    wide = len(os.sched_getaffinity(0)) + 1
    assert launch_command(wide, program, ["mpirun"], unbind=True) == [
        "mpirun", "-n", str(wide), "--bind-to", "none", "--oversubscribe", *program]
    mine = ["mpirun", "--oversubscribe", "--bind-to", "core"]  # the site's own choices stay as given
    assert launch_command(wide, program, mine, unbind=True) == [*mine, "-n", str(wide), *program]
    assert launch_command(2, program, ["srun"], "--ntasks", extra=["-x"]) == ["srun", "--ntasks", "2", "-x",
                                                                              *program]


def test_a_refused_size_names_world_size_in_a_sweep_and_the_launch_command_elsewhere(monkeypatch):
    monkeypatch.setenv("DRLMPI_MPIEXEC", "mpirun --bind-to none")
    monkeypatch.delenv("DRLMPI_PLAN_MPIEXEC", raising=False)
    needs = "topology=sequential needs exactly 1 rank"
    assert size_refusal(needs, 3, 1, "topology=sequential") == (
        "topology=sequential needs exactly 1 rank, but the job has 3: launch it with "
        "'mpirun --bind-to none -n 1 python -m mpi4py -m drlmpi topology=sequential'")
    with launchers.checking_sweep_jobs():
        assert size_refusal(needs, 3, 1, "topology=sequential") == (
            "topology=sequential needs exactly 1 rank (world_size=1), the job has world_size=3")
        assert size_refusal("topology=star needs at least 2 ranks", 1, 2, more=True).endswith(
            "(world_size=2 or more), the job has world_size=1")
    assert "launch it with" in size_refusal(needs, 3, 1)


def test_the_relaunch_runs_the_launch_command_or_refuses_a_retired_setting(fake_launcher, tmp_path):
    """``python -m drlmpi world_size=2`` re-executes itself under the setting's command; with the
    planner's former variable still set it refuses in one line, exit 2, before checking the run."""
    script, launches = fake_launcher
    args = [sys.executable, "-m", "drlmpi", "topology=p2p", "world_size=2", "run.max_env_steps=100",
            f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ((launched),) = launches()
    assert launched[:4] == ["--site-flag", "two words", "-n", "2"]
    assert launched[4:8] == [sys.executable, "-m", "mpi4py", "-m"]
    assert launched[-1] == f"hydra.run.dir={tmp_path / 'run'}"
    assert f"starting {script} --site-flag two words -n 2" in proc.stderr
    env = {**os.environ, "DRLMPI_PLAN_MPIEXEC": "mpirun"}
    retired = subprocess.run([*args[:-1], f"hydra.run.dir={tmp_path / 'again'}"], cwd=REPO, text=True,
                             capture_output=True, timeout=120, env=env)
    assert retired.returncode == 2 and len(launches()) == 1
    assert retired.stderr.strip().splitlines() == [
        "drlmpi: error: DRLMPI_PLAN_MPIEXEC is no longer read: set DRLMPI_MPIEXEC instead, the one launch "
        "command of runs, sweeps and the planner (DRLMPI_MPIEXEC=mpirun)"]


def test_a_presets_sweep_jobs_run_the_launch_command(fake_launcher, tmp_path):
    """Each job of a preset's sweep starts with the setting's command (the stand-in exits 0 without
    a run: the job counts as finished, not solved), and provenance.json records it.
    (``hydra.launcher.mpiexec``, one sweep's own: tests/test_sweep.py's dry run.)"""
    script, launches = fake_launcher
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "drlmpi", "+experiment=dqn_lunarlander_ttt", "seed=0", "device=cpu",
            "world_size_by_topology.star=3", "run.max_env_steps=200", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = json.loads((sweep / "jobs.json").read_text())
    assert [j["status"] for j in jobs] == ["ok", "ok"]
    assert sorted(launched[:4] for launched in launches()) == [["--site-flag", "two words", "-n", "1"],
                                                               ["--site-flag", "two words", "-n", "3"]]
    assert all(j["command"][:3] == [str(script), "--site-flag", "two words"] for j in jobs)
    record = json.loads((sweep / "provenance.json").read_text())
    assert record["launcher"] == [str(script), "--site-flag", "two words"]


def test_the_planners_probe_runs_the_launch_command(fake_launcher):
    from drlmpi.planner.probe import measure_messages

    script, launches = fake_launcher
    *_, how = measure_messages([64, 4096], 1024, ranks=3, timeout_s=30)
    assert how.startswith(f"assumed (could not run {script}")  # the stand-in measures nothing
    ((launched),) = launches()
    assert launched[:4] == ["--site-flag", "two words", "-n", "3"]
    assert launched[4:] == [sys.executable, "-m", "mpi4py", "-m", "drlmpi.planner.pingpong", "--sizes", "64",
                            "4096", "--allreduce", "1024"]


def test_a_single_run_preset_starts_the_ranks_it_names():
    """``python -m drlmpi +experiment=ppo_breakout_16`` relaunches on the preset's 16 ranks (it was
    refused: "world_size=16 was asked for but this job has 1 rank(s)"); world_size=N on the
    command line wins; a run that names neither is not relaunched."""
    from drlmpi.run.command_line import single_run_world_size

    assert single_run_world_size(["+experiment=ppo_breakout_16"]) == 16
    assert single_run_world_size(["+experiment=ppo_breakout_16", "world_size=3"]) == 3
    assert single_run_world_size(["topology=star", "world_size=2"]) == 2
    assert single_run_world_size(["topology=star"]) is None
