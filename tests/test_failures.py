"""Failures a user meets, each told in one line without a traceback: a damaged checkpoint
(refused before any rank starts, or when a rank loads it), a damaged policy file in play, and a
run directory whose disk is full."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from drlmpi.outputs.checkpoint import DamagedFileError, load_rank_state, rank_file, read_meta
from drlmpi.play import main as play
from tests.conftest import REPO
from tests.test_refusals import CHECKPOINTED, refusal


@pytest.fixture
def checkpointed_copy(runs, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(runs.get(CHECKPOINTED).run_dir, copy)
    return copy


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_checkpoint_is_refused_in_one_line(checkpointed_copy):
    meta = read_meta(checkpointed_copy)
    path = rank_file(checkpointed_copy, 0, meta["generation"])
    _truncate(path)
    message = refusal(f"resume={checkpointed_copy}")
    assert message.startswith(f"resume: checkpoint generation {meta['generation']}: {path} cannot be "
                              f"read: it is damaged or incomplete")
    path.unlink()
    assert refusal(f"resume={checkpointed_copy}").endswith(f"{path} is missing")


def test_a_damaged_archive_is_named_when_a_rank_loads_it(checkpointed_copy):
    meta = read_meta(checkpointed_copy)
    path = rank_file(checkpointed_copy, 0, meta["generation"])
    with zipfile.ZipFile(path, "w") as archive:  # a complete archive holding no torch data
        archive.writestr("data.pkl", b"not a pickle")
    with pytest.raises(DamagedFileError, match=f"^{path} cannot be read: it is damaged or incomplete"):
        load_rank_state(checkpointed_copy, 0, meta)


def test_play_refuses_a_damaged_policy_in_one_line(checkpointed_copy, capsys):
    _truncate(checkpointed_copy / "policy.pt")
    assert play([str(checkpointed_copy), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"drlmpi.play: error: {checkpointed_copy / 'policy.pt'} cannot be read: it is "
                          f"damaged or incomplete") and "\n" not in err
    assert "weights_only" not in err


@pytest.mark.parametrize("episodes", ["0", "-3"])
def test_play_refuses_no_episodes_in_one_line(tmp_path, capsys, episodes):
    """Catches play exiting 0 with a mean return of nan over no episode."""
    assert play([str(tmp_path), "--episodes", episodes]) == 2
    assert capsys.readouterr().err == f"drlmpi.play: error: --episodes must be at least 1, got {episodes}\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_ends_the_run_in_one_line(tmp_path):
    """metrics.csv on a device that is always full (/dev/full): the first flush fails."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.csv").symlink_to("/dev/full")
    proc = subprocess.run([sys.executable, "-m", "drlmpi", f"hydra.run.dir={run_dir}",
                           "run.max_env_steps=3000", "run.progress_every_s=0.2", "algo.hidden=[16]"],
                          cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == \
        f"drlmpi: rank 0 failed: cannot write {run_dir / 'metrics.csv'}: No space left on device"
    assert "Traceback" not in proc.stderr and proc.stderr.count("drlmpi: rank 0 failed") == 1


# -- what a run says at its start ---------------------------------------------------------------
def test_the_budget_warnings_name_what_it_cannot_reach():
    from drlmpi.run.preflight import make_plan
    from tests.pool_worker import compose

    short = ["run.max_env_steps=2000", "algo.learning_starts=5000", "run.eval_every=4000"]
    warned = make_plan(compose(short), 1)
    assert warned.warnings == (
        "run.max_env_steps=2,000 ends before algo.learning_starts=5,000 (steps before the first update): "
        "no update will run; raise the budget or lower algo.learning_starts",
        "run.max_env_steps=2,000 ends before the first evaluation (run.eval_every=4,000): the run will not "
        "be evaluated")
    ppo = make_plan(compose(["algo=ppo", "run.max_env_steps=1000", "algo.rollout_steps=1024"]), 1)
    assert [w.split(" (")[0] for w in ppo.warnings] == [
        "run.max_env_steps=1,000 ends before algo.rollout_steps=1,024", "run.max_env_steps=1,000 ends before "
        "the first evaluation"]
    # evaluation turned off on purpose, or a time budget only: nothing to say
    assert make_plan(compose(["run.max_env_steps=20000", "run.eval_every=1000000000"]), 1).warnings == ()
    assert make_plan(compose(["run.max_env_steps=null", "run.max_train_seconds=5"]), 1).warnings == ()


@pytest.mark.parametrize(("argv", "ranks", "rows"), [
    (["topology=star"], 16, "3,840 rows (15 simulator(s) x 1 environment(s) x 256 steps)"),
    (["topology=star", "env.num_envs=4", "topology.sync_every=64"], 5, None),  # 1,024 rows: the bound
    (["topology=star"], 4, None),  # 768 rows
    (["topology=star", "topology.round_rows=960"], 16, None),
    (["topology=star", "algo=ppo"], 16, None),  # on-policy: star's rounds are its rollouts
    (["topology=star", "algo=random"], 16, None),  # learns nothing
    (["topology=async"], 16, None),
])
def test_star_hints_a_smaller_round_to_an_off_policy_learner(argv, ranks, rows, tmp_path):
    from drlmpi.run.experiment import start_lines
    from drlmpi.run.preflight import make_plan
    from tests.pool_worker import compose

    plan = make_plan(compose(argv), ranks)
    hints = [line for line in start_lines(plan, tmp_path) if line.startswith("drlmpi: hint: ")]
    if rows is None:
        assert hints == []
        return
    assert hints == [f"drlmpi: hint: topology=star: a round is {rows}, and an off-policy learner's data "
                     f"lags by a round; with rounds of 64 steps a simulator (960 rows on 16 ranks, 448 on "
                     f"8) DQN LunarLander and TD3 HalfCheetah needed 1.05x and 0.95x the sequential run's "
                     f"env steps to the threshold, against 1.70x and 1.2-1.4x with 256 (docs/results.md): "
                     f"topology.sync_every=64, or topology.round_rows=960 for one size at every world size"]


def test_a_resumed_run_says_where_it_continues(tmp_path):
    from dataclasses import replace

    from drlmpi.run.experiment import start_lines
    from drlmpi.run.preflight import make_plan
    from tests.pool_worker import compose

    plan = make_plan(compose(["run.max_env_steps=20000", "run.max_train_seconds=90"]), 1)
    meta = {"generation": 3, "env_steps": 12288, "updates": 5000, "train_seconds": 41.6,
            "saved_at": "2026-11-27 03:50:00"}
    lines = start_lines(replace(plan, resume_meta=meta), tmp_path)
    assert lines[0] == (f"drlmpi: dqn on CartPole-v1 | topology sequential, 1 rank(s) | device cpu | budget "
                        f"20,000 env steps or 90 s of training | run directory {tmp_path}")
    assert lines[1] == ("drlmpi: resumed from checkpoint generation 3 at 12,288 env steps, 5,000 updates, "
                        "42 s of training (saved 2026-11-27 03:50:00)")


def test_durations_read_as_people_write_them():
    from drlmpi.outputs.run_log import duration

    assert [duration(s) for s in (0.4, 45, 60, 725, 3600, 12_000)] == ["0s", "45s", "1m00s", "12m05s",
                                                                      "1h00m", "3h20m"]
