"""What a run prints for people: the end-of-run summary, the evaluation and progress lines -
figures with thousands separators and one decimal, words where a figure is not known yet."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from drlmpi.outputs.run_log import RunLog
from drlmpi.outputs.summary import format_summary


def summary(**changes) -> dict:
    """A finished run's summary.json fields that the printed summary reads."""
    fields = dict(algo="dqn", env_id="LunarLander-v3", topology="star", world_size=3, solved=False,
                  reward_threshold=200.0, best_eval_return=-1467.2650060681087, env_steps=1_234_567,
                  updates=617_283, train_seconds=12_345.678, wall_seconds=12_400.0,
                  stop_reason="max_env_steps",
                  env_steps_per_s=1_000.04, updates_per_s=50.0, mpi_wait_share=0.123, topology_stats={},
                  run_dir="outputs/x", idle_ranks=[])
    return {**fields, **changes}


def test_the_summary_formats_its_figures_and_says_none_yet_for_a_missing_one():
    lines = format_summary(summary()).splitlines()
    assert lines[1] == "NOT SOLVED (threshold 200, best eval -1,467.3)"
    assert lines[2] == ("  total: 1,234,567 env steps, 617,283 updates, 12,345.7 s training "
                        "(12,400.0 s wall), "
                        "stopped by max_env_steps")
    assert format_summary(summary(best_eval_return=None)).splitlines()[1] == (
        "NOT SOLVED (threshold 200, no evaluation yet)")
    assert format_summary(summary(reward_threshold=None, best_eval_return=None)).splitlines()[1] == (
        "no reward threshold (no evaluation yet)")
    solved = format_summary(summary(solved=True, reward_threshold=475, best_eval_return=500.0,
                                    train_seconds_to_threshold=1_500.04, env_steps_to_threshold=20_480,
                                    updates_to_threshold=10_240)).splitlines()
    assert solved[1:3] == ["SOLVED (threshold 475, best eval 500.0)",
                           "  to threshold: 1,500.0 s training, 20,480 env steps, 10,240 updates"]
    idle = format_summary(summary(idle_ranks=[1, 2], idle_busy_share=0.2))
    assert "warning: rank(s) 1, 2 were busy less than 20% of the time" in idle
    assert "None" not in "\n".join(format_summary(summary(best_eval_return=None)).splitlines())


def test_the_evaluation_and_progress_lines_format_their_figures(tmp_path, caplog):
    log = RunLog(tmp_path, progress_every_s=0)
    clock = SimpleNamespace(elapsed=lambda: 2.0)
    learner = SimpleNamespace(reward_threshold=200.0, recent_returns=[], clock=clock, budget_used=lambda: 0.5,
                              env_steps=12_345, updates=6_000, episodes=0)
    log.attach(learner)
    with caplog.at_level(logging.INFO, logger="drlmpi"):
        log("eval", -1467.2650060681087, 0, -1, return_std=3.0,
            at=SimpleNamespace(train_seconds=2.0, wall_seconds=2.1, env_steps=12_345, updates=6_000))
        log.progress(force=True)
        learner.recent_returns = [1_000.0, 3_000.5]
        log.progress(force=True)
    log.close()
    said = [r.getMessage().split("] ", 1)[1] for r in caplog.records]
    assert said[0] == "eval: mean return -1,467.3 (threshold 200)"
    assert "| recent return none yet |" in said[1]
    assert "| recent return  2,000.2 |" in said[2] and said[2].startswith("steps    12,345")
