"""experiments/bench_sb3_breakout.py: the split of the host's cores, SB3's whole games as drlmpi's
metrics rows, a failed side ending the other (never a wait of minutes), the refusals before
anything starts, and the real SB3 worker (Stable-Baselines3 from the ``bench`` extra, which the
test extra installs) writing a run directory the report reads."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import bench_sb3_breakout as bench  # noqa: E402

from drlmpi.envs.spec import RAW_EPISODE_KEY  # noqa: E402
from drlmpi.report.runs import Run, load_run, read_returns  # noqa: E402


def test_the_cores_are_split_between_the_two_sides():
    assert bench.split_cores(list(range(16)), None) == ({14, 15}, set(range(14)))
    assert bench.split_cores(list(range(16)), "0,3-4") == ({0, 3, 4}, set(range(16)) - {0, 3, 4})
    assert bench.split_cores([2, 3], "3") == ({3}, {2})
    with pytest.raises(ValueError, match=r"CPUs \[16\] are not usable here"):
        bench.split_cores(list(range(16)), "15-16")
    with pytest.raises(ValueError, match="leaves drlmpi none"):
        bench.split_cores([0, 1], "0-1")
    with pytest.raises(ValueError, match="give CPUs as"):
        bench.split_cores(list(range(16)), "last")


def test_whole_games_become_metrics_rows_the_report_reads(tmp_path):
    games: list[float] = []
    with open(tmp_path / "metrics.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(bench.EPISODE_COLUMNS)
        bench.record_games([{"lives": 3}, {RAW_EPISODE_KEY: (11.0, 812)}], 4.5, 1600, 16, writer, games)
        bench.record_games([{RAW_EPISODE_KEY: (2.0, 190)}, {RAW_EPISODE_KEY: (0.0, 120)}], 9.0, 3200, 32,
                           writer, games)
    assert games == [11.0, 2.0, 0.0]
    rows = read_returns(tmp_path / "metrics.csv")["episode"]
    assert rows.tolist() == [[4.5, 1600, 11.0], [9.0, 3200, 2.0], [9.0, 3200, 0.0]]


def test_a_failed_side_ends_the_other(tmp_path, capsys):
    """drlmpi refusing its command line must not leave SB3 training for 8 minutes."""
    procs = {"drlmpi": subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(2)"]),
             "sb3": subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])}
    t0 = time.perf_counter()
    codes = bench.wait_for(procs, {"drlmpi": tmp_path / "a", "sb3": tmp_path / "b"}, tmp_path)
    assert time.perf_counter() - t0 < 10
    assert codes["drlmpi"] == 2 and codes["sb3"] != 0
    assert "drlmpi: exited 2 after" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--sb3-cores", "4096"], "are not usable here"),
    (["--seconds", "0"], "--seconds must be > 0"),
])
def test_bad_input_is_refused_before_anything_starts(tmp_path, capsys, args, message):
    out = tmp_path / "cmp"
    with pytest.raises(SystemExit) as exc:
        bench.main([str(out), *args])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_the_sb3_worker_writes_a_run_the_report_reads(tmp_path):
    """6-9 s: SB3's PPO and eight ALE games started in a fresh process (its torch threads
    must not change this worker's), stopped by the clock 0.5 s into its first 1,024-step rollout."""
    pytest.importorskip("stable_baselines3", reason="the bench extra (stable-baselines3) is not installed")
    run_dir = tmp_path / "sb3_seed0"
    subprocess.run([sys.executable, str(EXPERIMENTS / "bench_sb3_breakout.py"), str(run_dir), "--sb3-worker",
                    "--seconds", "0.5", "--device", "cpu"], check=True, timeout=120)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert 0.5 <= summary["train_seconds"] < 30
    assert 0 < summary["env_steps"] < 1024 and summary["env_steps"] % 8 == 0  # stopped before updating
    assert summary["updates"] == 0 and summary["reward_threshold"] == 30
    run = load_run(run_dir)
    assert isinstance(run, Run)
    assert (run.env, run.algo, run.world_size) == ("breakout", "sb3-ppo", 1)
    assert run.topology == "sb3 DummyVecEnv(8)"
