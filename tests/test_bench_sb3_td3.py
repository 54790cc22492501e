"""The SB3 comparisons' logic (experiments/sb3_common.py, bench_sb3_td3.py, bench_sb3_dqn.py)
without Stable-Baselines3 or MuJoCo: the ratio and its censoring, the median, reading a drlmpi
run, the table, the drlmpi command lines each script builds, and the record of an SB3 worker cut
by the timeout (or failed), read from its progress file (a fake worker writes it; one test with
the real worker runs only where Stable-Baselines3 is installed)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import bench_sb3_dqn  # noqa: E402
import bench_sb3_td3  # noqa: E402
import sb3_common  # noqa: E402


def side(solved: bool, seconds: float, steps: int, budget: int = 300_000) -> dict:
    """One framework's result as the scripts record it: ``train_seconds`` is the time to the
    threshold when solved, else the whole budget's."""
    return {"solved": solved, "train_seconds": seconds, "env_steps_to_threshold": steps if solved else None,
            "env_steps": steps if solved else budget, "updates": 1000, "learn_seconds": 2.0}


def write_run(run_dir: Path, solved: bool) -> None:
    """A finished drlmpi run directory: summary.json and metrics.csv."""
    run_dir.mkdir()
    summary = {"solved": solved, "train_seconds_to_threshold": 42.0 if solved else None,
               "env_steps_to_threshold": 120_000 if solved else None,
               "updates_to_threshold": 119_000 if solved else None, "env_steps": 300_000,
               "updates": 299_000, "eval_seconds": 9.0, "evaluations": 30, "best_eval_return": 4900.0,
               "stop_reason": "solved" if solved else "max_env_steps", "train_seconds": 310.0,
               "per_rank": [{"learn_s": 250.0}], "versions": {"torch": "2"}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "metrics.csv").write_text("kind,env_steps,train_seconds,return\ntrain,1000,1.0,-300\n"
                                         "eval,10240,5.5,-120.5\neval,20480,11.0,4900\n")


def test_ratio_of_two_solved_runs_is_exact():
    row = sb3_common.pair(0, ["drlmpi", "sb3"], side(True, 40.0, 100_000), side(True, 100.0, 90_000))
    assert row["ratio_sb3_over_drlmpi"] == pytest.approx(2.5)
    assert not row["censored"] and sb3_common.ratio_kind(row) == "exact"


def test_a_run_that_never_solves_counts_its_budget_and_makes_the_ratio_a_bound(tmp_path):
    write_run(tmp_path / "unsolved", solved=False)
    drlmpi = sb3_common.read_drlmpi_run(tmp_path / "unsolved")
    assert drlmpi["train_seconds"] == 310.0  # the whole budget's training seconds, not None
    row = sb3_common.pair(1, ["sb3", "drlmpi"], drlmpi, side(True, 62.0, 90_000))
    assert row["ratio_sb3_over_drlmpi"] == pytest.approx(0.2)
    assert row["censored"] and sb3_common.ratio_kind(row) == "upper bound"
    row = sb3_common.pair(2, ["drlmpi", "sb3"], side(True, 40.0, 100_000), side(False, 600.0, 0))
    assert row["censored"] and sb3_common.ratio_kind(row) == "lower bound"
    assert row["ratio_sb3_over_drlmpi"] == pytest.approx(15.0)
    row = sb3_common.pair(3, ["sb3", "drlmpi"], side(False, 310.0, 0), side(False, 600.0, 0))
    assert row["censored"] and sb3_common.ratio_kind(row) == "unknown"
    lines = sb3_common.table([row])
    assert "310.0*" in lines[2] and "300,000*" in lines[2] and "1.94*" in lines[2]


def test_a_failed_side_has_no_ratio_and_is_left_out_of_the_median():
    rows = [sb3_common.pair(0, ["drlmpi", "sb3"], side(True, 10.0, 1), side(True, 20.0, 1)),
            sb3_common.pair(1, ["sb3", "drlmpi"], side(True, 10.0, 1), side(True, 5.0, 1)),
            sb3_common.pair(2, ["drlmpi", "sb3"], side(True, 10.0, 1), side(False, 90.0, 0)),
            sb3_common.pair(3, ["sb3", "drlmpi"], {"error": "exit code 1"}, side(True, 5.0, 1))]
    assert rows[3]["ratio_sb3_over_drlmpi"] is None and rows[3]["censored"]
    assert sb3_common.ratio_kind(rows[3]) == "none"
    agg = sb3_common.aggregate(rows)
    assert agg["median_ratio"] == pytest.approx(2.0)  # of 2.0, 0.5 and 9.0
    assert agg["mean_ratio"] == pytest.approx(11.5 / 3)
    assert (agg["drlmpi_solved"], agg["sb3_solved"], agg["seeds"]) == (3, 3, 4)
    assert sb3_common.aggregate([rows[3]])["median_ratio"] is None


def test_a_solved_drlmpi_run_reads_its_time_to_threshold(tmp_path):
    write_run(tmp_path / "solved", solved=True)
    result = sb3_common.read_drlmpi_run(tmp_path / "solved")
    assert (result["train_seconds"], result["env_steps_to_threshold"], result["learn_seconds"]) == (
        42.0, 120_000, 250.0)
    assert result["eval_history"] == [[10240, 5.5, -120.5], [20480, 11.0, 4900.0]]


def test_the_table_keeps_the_dqn_benchmarks_format():
    drlmpi = side(True, 10.0, 4096) | {"updates": 2000, "learn_seconds": 5.0}
    sb3 = side(True, 25.0, 6144) | {"updates": 3000, "learn_seconds": 20.0}
    rows = [sb3_common.pair(0, ["drlmpi", "sb3"], drlmpi, sb3),
            sb3_common.pair(2, ["drlmpi", "sb3"], {"error": "exit code 1"}, side(True, 30.0, 8192))]
    assert sb3_common.table(rows) == [
        "seed |  drlmpi s    steps |     SB3 s    steps | SB3/drlmpi | upd/s dl    sb3",
        "-" * 77,
        "   0 |      10.0    4,096 |      25.0    6,144 |       2.50 |      400    150",
        "   2 |     ERROR        - |      30.0    8,192 |          - |        -    500"]


def test_star_on_8_ranks_runs_under_mpiexec_with_the_shared_threshold_and_evaluations():
    args = bench_sb3_td3.parse_args([])
    assert (args.topology, args.ranks, args.budget, args.eval_every, args.eval_episodes, args.threshold,
            args.env_id) == ("star", 8, 300_000, 10_000, 5, 5000.0, "HalfCheetah-v5")
    cmd = bench_sb3_td3.drlmpi_command(0, args, Path("/tmp/run"), ["mpiexec"])
    assert cmd[:3] == ["mpiexec", "-n", "8"]
    assert cmd[4:8] == ["-m", "mpi4py", "-m", "drlmpi"]
    for override in ("algo=td3", "env=halfcheetah", "topology=star", "seed=0", "env.reward_threshold=5000.0",
                     "run.eval_every=10000", "run.eval_episodes=5", "run.max_env_steps=300000"):
        assert override in cmd


def test_the_launch_command_is_drlmpis_one_setting(monkeypatch, tmp_path):
    seen = []
    monkeypatch.delenv("DRLMPI_PLAN_MPIEXEC", raising=False)
    monkeypatch.setenv("DRLMPI_MPIEXEC", "mpirun --oversubscribe --bind-to none")
    monkeypatch.setattr(sb3_common, "run_drlmpi", lambda cmd, run_dir, timeout: seen.append(cmd) or {})
    bench_sb3_td3.run_drlmpi(1, bench_sb3_td3.parse_args(["--ranks", "4"]), tmp_path)
    assert seen[0][:6] == ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", "4"]


def test_sequential_runs_one_process_without_mpiexec():
    args = bench_sb3_td3.parse_args(["--topology", "sequential", "--drlmpi-env", "pendulum",
                                     "--threshold", "-1500", "--learning-starts", "500",
                                     "--drlmpi-extra", "algo.tau=0.01"])
    assert args.env_id == "Pendulum-v1"
    cmd = bench_sb3_td3.drlmpi_command(0, args, Path("/tmp/run"), ["mpiexec"])
    assert cmd[:3] == [sys.executable, "-m", "drlmpi"]
    assert "mpiexec" not in cmd and "-n" not in cmd and "mpi4py" not in cmd
    assert {"topology=sequential", "env=pendulum", "env.reward_threshold=-1500.0",
            "algo.learning_starts=500"} <= set(cmd)
    assert cmd[-1] == "algo.tau=0.01"
    assert bench_sb3_td3.sb3_hyperparameters(500)["learning_starts"] == 500
    assert bench_sb3_td3.sb3_hyperparameters(None)["learning_starts"] == 10_000


def test_the_dqn_benchmarks_drlmpi_command_is_unchanged(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(sb3_common, "run_drlmpi", lambda cmd, run_dir, timeout: seen.append(cmd) or {})
    args = type("Args", (), {"budget": 100_000, "eval_every": 2000, "eval_episodes": 10, "threshold": 475.0,
                             "device": "cpu", "drlmpi_extra": ["algo.double_q=false"], "timeout": 5.0})()
    bench_sb3_dqn.run_drlmpi(3, args, tmp_path)
    assert seen[0] == [sys.executable, "-m", "drlmpi", "seed=3", f"hydra.run.dir={tmp_path / 'drlmpi_3'}",
                       "run.progress_every_s=0", "run.max_env_steps=100000", "run.eval_every=2000",
                       "run.eval_episodes=10", "env.reward_threshold=475.0", "threads_per_rank=1",
                       "device=cpu", "algo.double_q=false"]


def test_a_run_past_its_timeout_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = (f"import subprocess, pathlib; c = subprocess.Popen(['sleep', '60']); "
              f"pathlib.Path({str(pid_file)!r}).write_text(str(c.pid)); c.wait()")
    started = time.perf_counter()
    error, seconds = sb3_common.run_command([sys.executable, "-c", script], timeout=1.0)
    assert error is not None and error["error"] == "timed out after 1.0 s" and seconds == 1.0
    assert time.perf_counter() - started < 20  # not held until the orphaned child's sleep ends
    stat = Path(f"/proc/{int(pid_file.read_text())}/stat")
    for _ in range(50):  # gone with its group, as an mpiexec job's ranks would be
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":  # or a zombie
            break
        time.sleep(0.02)
    else:
        pytest.fail("the timed-out command's child outlived it")
    error, _ = sb3_common.run_command([sys.executable, "-c", "import sys; sys.exit('no')"], timeout=30)
    assert error is not None and error["error"] == "exit code 1" and "no" in error["stderr_tail"]


def fake_worker(tmp_path: Path, body: str) -> Path:
    """A stand-in for ``bench_sb3_*.py --sb3-worker``: run with the worker's command line, it
    runs ``body`` with ``progress`` (the progress file of its ``--out``) and sb3_common's
    ``append_evaluation`` at hand."""
    script = tmp_path / "fake_worker.py"
    script.write_text(f"import sys, time\nsys.path.insert(0, {str(EXPERIMENTS)!r})\nimport sb3_common\n"
                      "progress = sb3_common.progress_path(sys.argv[sys.argv.index('--out') + 1])\n"
                      "append = sb3_common.append_evaluation\n" + body)
    return script


#: Two evaluations as the worker's clock writes them: the best return first, the last lower.
TWO_EVALUATIONS = """
append(progress, {"evaluation": 1, "env_steps": 10000, "train_seconds": 12.5, "updates": 9000,
                  "learn_seconds": 9.0, "eval_seconds": 1.5, "return": 1450.5, "solved": False})
append(progress, {"evaluation": 2, "env_steps": 20000, "train_seconds": 26.0, "updates": 19000,
                  "learn_seconds": 20.0, "eval_seconds": 3.0, "return": 900.0, "solved": False})
with open(progress, "a") as fh:
    fh.write('{"evaluation": 3, "env_st')  # a line the kill cut short
"""


def worker_args(timeout: float) -> SimpleNamespace:
    return SimpleNamespace(budget=300_000, eval_every=10_000, eval_episodes=5, threshold=5000.0,
                           device="cpu", timeout=timeout)


def test_a_worker_cut_by_the_timeout_leaves_its_last_evaluation_and_a_lower_bound(tmp_path, capsys):
    script = fake_worker(tmp_path, TWO_EVALUATIONS + "time.sleep(60)\n")
    sb3 = sb3_common.run_sb3(str(script), 0, worker_args(timeout=2.0), tmp_path)
    assert "error" not in sb3 and sb3["partial"]
    assert (sb3["solved"], sb3["timed_out"], sb3["cut_by"]) == (False, True, "timed out after 2.0 s")
    assert (sb3["train_seconds"], sb3["env_steps"], sb3["updates"], sb3["learn_seconds"]) == (
        26.0, 20_000, 19_000, 20.0)  # at the last evaluation: not the timeout's 2 s, nor the budget's
    assert (sb3["best_eval_return"], sb3["last_eval_return"], sb3["evaluations"]) == (1450.5, 900.0, 2)
    assert sb3["eval_history"] == [[10_000, 12.5, 1450.5], [20_000, 26.0, 900.0]]
    assert sb3["train_seconds_to_threshold"] is None and sb3["process_seconds"] == 2.0
    assert sb3["command"][2:4] == ["--sb3-worker", "--seed"]

    row = sb3_common.pair(0, ["drlmpi", "sb3"], side(True, 13.0, 100_000), sb3)
    assert row["ratio_sb3_over_drlmpi"] == pytest.approx(2.0)  # SB3 needed more than 26 s: >= 2
    assert row["censored"] and row["ratio_is"] == "lower bound" == sb3_common.ratio_kind(row)
    line = sb3_common.table([row])[2]
    assert "ERROR" not in line
    assert line == "   0 |      13.0  100,000 |     26.0+  20,000+ |    >=2.00* |      500    950"
    agg = sb3_common.report([row])
    assert (agg["median_ratio"], agg["sb3_solved"]) == (pytest.approx(2.0), 0)
    printed = capsys.readouterr().out
    assert "+ = cut by --timeout" in printed and "the ratio a bound (>= lower" in printed
    assert ("seed 0: the ratio is lower bound (SB3 timed out after 2.0 s at 26.0 training s, "
            "20,000 steps)") in printed


def test_a_crashed_worker_keeps_its_evaluations_and_one_cut_before_any_keeps_the_error(tmp_path):
    script = fake_worker(tmp_path, TWO_EVALUATIONS + "sys.exit('mujoco blew up')\n")
    sb3 = sb3_common.run_sb3(str(script), 1, worker_args(timeout=30.0), tmp_path)
    assert (sb3["solved"], sb3["timed_out"], sb3["cut_by"], sb3["train_seconds"]) == (
        False, False, "exit code 1", 26.0)
    assert "mujoco blew up" in sb3["stderr_tail"]

    script = fake_worker(tmp_path, "time.sleep(60)\n")  # killed before its first evaluation
    sb3 = sb3_common.run_sb3(str(script), 2, worker_args(timeout=1.0), tmp_path)
    assert sb3["error"] == "timed out after 1.0 s" and sb3["timed_out"] and "partial" not in sb3
    row = sb3_common.pair(2, ["drlmpi", "sb3"], side(True, 13.0, 100_000), sb3)
    assert row["ratio_sb3_over_drlmpi"] is None and row["ratio_is"] == "none"
    assert "ERROR" in sb3_common.table([row])[2]


def test_a_run_cut_after_its_solving_evaluation_counts_as_solved(tmp_path):
    progress = tmp_path / "sb3_0.json.progress.jsonl"
    sb3_common.append_evaluation(progress, {"evaluation": 1, "env_steps": 10000, "train_seconds": 12.5,
                                           "updates": 9000, "learn_seconds": 9.0, "eval_seconds": 1.5,
                                           "return": 5100.0, "solved": True})
    sb3 = sb3_common.cut_result(progress, {"error": "exit code 1", "command": ["w"]}, 30.0)
    assert (sb3["solved"], sb3["train_seconds"], sb3["train_seconds_to_threshold"],
            sb3["env_steps_to_threshold"]) == (True, 12.5, 12.5, 10_000)
    assert sb3_common.ratio_kind(sb3_common.pair(0, [], side(True, 5.0, 1), sb3)) == "exact"
    assert sb3_common.cut_result(tmp_path / "missing.jsonl", {"error": "exit code 1"}, 1.0) is None


def test_the_real_worker_writes_each_evaluation_before_it_is_cut(tmp_path):
    """12 s: the timeout that cuts the worker (its imports take ~3 s on an idle machine; then
    evaluations every 500 steps). On a loaded machine the imports alone can outlast 12 s: a cut
    before the first evaluation shows nothing, so that one case runs once more with 30 s."""
    pytest.importorskip("stable_baselines3", reason="the real SB3 worker needs stable-baselines3")
    for timeout in (12.0, 30.0):
        args = SimpleNamespace(budget=100_000, eval_every=500, eval_episodes=1, threshold=1e9, device="cpu",
                               timeout=timeout)  # never solves: cut by the timeout after some evaluations
        sb3 = sb3_common.run_sb3(bench_sb3_dqn.__file__, 0, args, tmp_path)
        if sb3.get("error") != f"timed out after {timeout} s" or sb3_common.read_progress(
                sb3_common.progress_path(tmp_path / "sb3_0.json")):
            break  # (anything but a cut with no evaluation written is judged below)
    assert "error" not in sb3, sb3.get("stderr_tail")
    assert (sb3["solved"], sb3["timed_out"]) == (False, True) and sb3["evaluations"] >= 1
    lines = sb3_common.read_progress(sb3_common.progress_path(tmp_path / "sb3_0.json"))
    assert [e["evaluation"] for e in lines] == list(range(1, len(lines) + 1))
    assert all(e["env_steps"] >= 500 * e["evaluation"] for e in lines)
    assert sb3["env_steps"] == lines[-1]["env_steps"] and sb3["updates"] == lines[-1]["updates"]
    assert 0 < sb3["train_seconds"] < args.timeout
