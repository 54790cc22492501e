"""Tuning through Hydra's Optuna sweeper: ``run.objective`` makes every job return one float."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from drlmpi.config.schema import SCHEMA
from drlmpi.run.objective import OBJECTIVES, objective_value, worst_value
from tests.mpirun import REPO
from tests.shared_runs import TINY_DQN

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="pip install -e '.[tune]'")


def test_the_objectives_are_the_schema_choices():
    assert set(OBJECTIVES) == set(SCHEMA["run"]["objective"].choices)


def test_objective_value_of_solved_and_unsolved_runs():
    solved = {"train_seconds_to_threshold": 3.5, "train_seconds": 9.0, "best_eval_return": 200.0}
    unsolved = {"train_seconds_to_threshold": None, "train_seconds": 9.0, "env_steps_to_threshold": None,
                "env_steps": 4096, "best_eval_return": None}
    assert objective_value(solved, "train_seconds_to_threshold") == 3.5
    assert objective_value(unsolved, "train_seconds_to_threshold") == 9.0   # at least its own total
    assert objective_value(unsolved, "env_steps_to_threshold") == 4096.0
    assert objective_value(unsolved, "train_seconds_to_threshold", unsolved=1e6) == 1e6
    assert objective_value(unsolved, "best_eval_return") == -math.inf        # never evaluated
    assert objective_value(solved, "best_eval_return") == 200.0
    with pytest.raises(ValueError, match="unknown objective"):
        objective_value(solved, "loss")
    assert worst_value("minimize") == math.inf
    assert worst_value("MAXIMIZE") == -math.inf


def test_a_failed_or_skipped_job_counts_as_the_worst_value(tmp_path):
    from hydra.core.utils import JobStatus

    from drlmpi.sweep.scheduler import JobFailedError, SweepJob
    from hydra_plugins.drlmpi_launcher.mpi_launcher import MPILauncher

    launcher = MPILauncher()
    launcher.config = OmegaConf.create({"hydra": {"sweeper": {"direction": "maximize"}}})
    cfg = OmegaConf.create({"run": {"objective": "best_eval_return", "objective_unsolved": None}})
    failed = SweepJob(0, ["seed=1"], "seed=1", tmp_path, {}, cfg=cfg, status=JobStatus.FAILED,
                      value=JobFailedError("exit 1"))
    done = SweepJob(1, ["seed=2"], "seed=2", tmp_path, {}, cfg=cfg, value={"best_eval_return": 12.5})
    for job in (failed, done):
        launcher._objective(job)
    assert (failed.status, failed.value) == (JobStatus.COMPLETED, -math.inf)
    assert failed.record["objective"] == {"name": "best_eval_return", "value": -math.inf}
    assert done.value == 12.5
    plain = SweepJob(2, [], "", tmp_path, {}, cfg=OmegaConf.create({"run": {"objective": None}}),
                     value={"solved": True})
    launcher._objective(plain)
    assert plain.value == {"solved": True}  # no objective: the summary, as before


def test_the_task_returns_the_objective_on_rank_0(monkeypatch, tmp_path):
    """Launchers that run the task in the job (Hydra's basic and Submitit launchers) hand the
    task function's return value to the sweeper."""
    import drlmpi.run.experiment as experiment
    from drlmpi.run import command_line

    monkeypatch.setattr(experiment, "run_experiment",
                        lambda *a, **k: {"env_steps_to_threshold": None, "env_steps": 777})
    env = {"name": "cartpole", "id": "CartPole-v1", "reward_threshold": 475}
    cfg = OmegaConf.create({"threads_per_rank": 1, "bind_ranks": "none", "env": env,
                            "run": {"objective": "env_steps_to_threshold", "objective_unsolved": None}})
    assert command_line._task(cfg) == 777.0
    cfg.run.objective = None
    assert command_line._task(cfg) == 0


def test_an_optuna_sweep_of_two_trials_ends_with_a_best_value(tmp_path):
    """Two trials of the tuning preset, packed side by side on the cores by the MPI launcher
    (about 8 s: two tiny runs at once on 2 cores and the sweeper's start)."""
    budget = [o for o in TINY_DQN if not o.startswith(("run.max_env_steps", "algo.exploration_steps"))]
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "drlmpi", "+experiment=tune_dqn_cartpole", "hydra.sweeper.n_trials=2",
           *budget, "run.max_env_steps=600", "run.eval_every=300", f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    jobs = json.loads((sweep_dir / "jobs.json").read_text())
    assert [j["status"] for j in jobs] == ["ok", "ok"]
    assert len({j["cpus"] for j in jobs}) == 2  # side by side, one core each
    values = []
    for job in jobs:
        summary = json.loads((Path(job["run_dir"]) / "summary.json").read_text())
        value = objective_value(summary, "env_steps_to_threshold")
        assert job["objective"] == {"name": "env_steps_to_threshold", "value": value}
        values.append(value)
    assert results["best_value"] == min(values)
    assert set(results["best_params"]) == {"algo.lr", "algo.batch_size", "algo.target_update_every",
                                           "algo.exploration_steps"}
    assert "Best value" in proc.stdout + proc.stderr
    from drlmpi.report.discovery import discover
    from drlmpi.report.trials import trials_section

    section = "\n".join(trials_section(discover([sweep_dir]).runs, [sweep_dir]))  # the report's section
    assert "**env_steps_to_threshold**, 2 trial(s):" in section
    assert f"best value {min(values):,.0f}" in section


OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def _sweep_config(objective, direction="minimize", target=OPTUNA):
    config = OmegaConf.create({"hydra": {"sweeper": {"_target_": target, "direction": direction}},
                               "run": {"objective": objective}})
    OmegaConf.set_readonly(config.hydra, True)  # as Hydra hands it over
    return config


def test_a_tuning_sweep_needs_an_objective_and_takes_its_direction():
    """Catches: an Optuna sweep let through without run.objective (the sweeper's ValueError
    traceback after the first batch of jobs), and a return or throughput minimised - the sweeper's
    default - which tunes toward the worst run."""
    from drlmpi.run.objective import check_tuning, direction_of

    with pytest.raises(ValueError, match=r"^hydra/sweeper=optuna tunes by one number from each run: set "
                                         r"run.objective to a summary field, smaller is better: "
                                         r"train_seconds_to_threshold, .*; larger is better: "
                                         r"best_eval_return"):
        check_tuning(_sweep_config(None))
    assert {name: direction_of(name) for name in OBJECTIVES} == {
        "train_seconds_to_threshold": "minimize", "env_steps_to_threshold": "minimize",
        "updates_to_threshold": "minimize", "best_eval_return": "maximize", "last_eval_return": "maximize",
        "env_steps_per_s": "maximize", "updates_per_s": "maximize"}
    wrong = _sweep_config("best_eval_return")
    assert check_tuning(wrong) == ("drlmpi: note: run.objective=best_eval_return is better larger: the sweep "
                                   "will maximize it (hydra.sweeper.direction=maximize, was minimize)")
    assert wrong.hydra.sweeper.direction == "maximize"
    assert check_tuning(_sweep_config("env_steps_to_threshold")) is None
    slow = _sweep_config("updates_to_threshold", direction="maximize")
    assert "will minimize it" in check_tuning(slow) and slow.hydra.sweeper.direction == "minimize"
    assert check_tuning(_sweep_config("best_eval_return", direction=["maximize", "minimize"])) is None
    assert check_tuning(_sweep_config(None, target="hydra._internal.core_plugins.basic_sweeper."
                                                   "BasicSweeper")) is None


def test_an_optuna_sweep_without_an_objective_is_refused_before_any_job(tmp_path):
    """The form a user sees (exit code 2, one line, no sweep directory), and a return objective
    reaching the sweeper as maximised (a dry run: no job runs). Catches the check not wired into
    the sweep (the callback missing from conf/config.yaml), and the direction changed too late for
    the sweeper to see it. ~6 s: the second command starts the Optuna sweeper and plans its one
    job (imports torch); only a real sweep shows what direction the sweeper was built with."""
    base = [sys.executable, "-m", "drlmpi", "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=1"]
    proc = subprocess.run([*base, f"hydra.sweep.dir={tmp_path / 'a'}"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("drlmpi: error: hydra/sweeper=optuna tunes by one number from each "
                                          "run: set run.objective") and "\n" not in proc.stderr.strip()
    assert not (tmp_path / "a").exists()
    proc = subprocess.run([*base, f"hydra.sweep.dir={tmp_path / 'b'}", "run.objective=best_eval_return",
                           "hydra.launcher.dry_run=true"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = proc.stdout + proc.stderr
    assert "the sweep will maximize it" in said and "Directions: ['maximize']" in said
