"""TensorBoard event files (written through tensorboardX's SummaryWriter): what our writer and
reader add to it (a file per writer, the flush interval, damaged records detected), TensorBoard's
own reader on them, the learner rank's ``tb/`` output in real runs, its config options and the
report's plots."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensorboardX.proto.event_pb2 import Event

from drlmpi.algos.dqn import DQN
from drlmpi.algos.ppo import PPO
from drlmpi.algos.td3 import TD3
from drlmpi.config.errors import ConfigError
from drlmpi.config.schema import defaults, group_config
from drlmpi.envs.make import make_env
from drlmpi.outputs.event_file import (
    FILE_PREFIX,
    EventFileError,
    EventWriter,
    iter_records,
    read_scalars,
)
from drlmpi.outputs.run_log import RunLog
from drlmpi.report import build_report
from drlmpi.report.curves import TRAINING_METRICS
from drlmpi.roles.actor import Actor
from drlmpi.roles.learner import Learner
from drlmpi.run.preflight import make_plan
from drlmpi.topologies.core.context import RunContext
from tests.test_config import _compose
from tests.test_report import PNG_SIGNATURE, make_run


# -- the files -------------------------------------------------------------------------------
def _files(folder):
    return sorted(folder.glob(f"{FILE_PREFIX}*"))


def test_writer_reader_round_trip(tmp_path):
    writer = EventWriter(tmp_path / "tb")
    (path,) = _files(tmp_path / "tb")
    steps = [0, 1, 1000, 2**40]
    for i, step in enumerate(steps):
        writer.add_scalars({"train/loss": 0.5 * i, "episode/return/rank3": -200.25 + i}, step,
                           wall_time=1000.0 + i)
    writer.add_scalar("eval/return", float("nan"), 7)
    writer.close()
    writer.close()  # harmless
    with pytest.raises(ValueError, match="closed"):
        writer.add_scalar("x", 1.0, 0)
    assert _files(tmp_path / "tb") == [path]  # nothing reopened a file
    scalars = read_scalars(tmp_path / "tb")
    assert set(scalars) == {"train/loss", "episode/return/rank3", "eval/return"}
    assert scalars["train/loss"] == [(s, 1000.0 + i, 0.5 * i) for i, s in enumerate(steps)]
    assert [v for _, _, v in scalars["episode/return/rank3"]] == [-200.25, -199.25, -198.25, -197.25]
    assert np.isnan(scalars["eval/return"][0][2])
    # the first record is the file version, alone
    first = Event.FromString(next(iter_records(path.read_bytes())))
    assert first.file_version == "brain.Event:2" and not first.HasField("summary")


def test_each_writer_gets_a_file_of_its_own(tmp_path):
    """tensorboardX names a file by second and host and truncates one of that name: without
    ``own_suffix`` the second and third writers here (same folder, same second) would write over
    the first's file and the first's points would be lost."""
    writers = [EventWriter(tmp_path) for _ in range(3)]
    for i, writer in enumerate(writers):
        writer.add_scalar("train/loss", float(i), i)
    for writer in writers:
        writer.close()
    assert len(_files(tmp_path)) == 3
    assert sorted(v for _, _, v in read_scalars(tmp_path)["train/loss"]) == [0.0, 1.0, 2.0]


def _size_after(path, seconds):
    """The file's size once it has stopped changing, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    size = path.stat().st_size
    while time.monotonic() < deadline:
        time.sleep(0.05)
        size, last = path.stat().st_size, size
        if size != last:
            deadline = min(deadline, time.monotonic() + 0.2)
    return size


def test_writes_reach_the_file_at_the_flush_interval_and_at_close(tmp_path):
    """``flush_every_s`` reaches tensorboardX's writer thread: with an hour the points wait in
    memory until :meth:`close` (the version record is on disk at once); with 0.1 s they reach
    the file without a flush or a close. Passing the default flush interval instead fails the
    second half; not flushing at creation fails ``header > 0``."""
    slow = EventWriter(tmp_path / "slow", flush_every_s=3600)
    (path,) = _files(tmp_path / "slow")
    header = path.stat().st_size
    assert header > 0
    time.sleep(0.1)  # the writer thread has started and set its next flush an hour on
    slow.add_scalar("a", 1.0, 1)
    assert _size_after(path, 0.5) == header
    slow.close()
    assert [v for _, _, v in read_scalars(path)["a"]] == [1.0]
    fast = EventWriter(tmp_path / "fast", flush_every_s=0.1)
    (path,) = _files(tmp_path / "fast")
    time.sleep(0.2)
    fast.add_scalars({"a": 1.0, "b": 2.0}, 1)
    _size_after(path, 3.0)
    assert {tag: [v for _, _, v in points] for tag, points in read_scalars(path).items()} == {
        "a": [1.0], "b": [2.0]}
    fast.close()


def test_a_corrupted_or_truncated_record_is_detected(tmp_path):
    with EventWriter(tmp_path) as writer:
        writer.add_scalars({"train/loss": 1.0, "train/q_mean": 2.0}, 10)
    (path,) = _files(tmp_path)
    data = path.read_bytes()
    assert read_scalars(path)["train/loss"] == [(10, pytest.approx(time.time(), abs=60), 1.0)]
    for position, what in ((len(data) - 10, "data CRC"), (len(data) - 1, "data CRC"), (0, "length CRC")):
        broken = bytearray(data)
        broken[position] ^= 0x01
        path.write_bytes(bytes(broken))
        with pytest.raises(EventFileError, match=what):
            read_scalars(path)
    path.write_bytes(data[:-3])
    with pytest.raises(EventFileError, match="truncated"):
        read_scalars(path)


def tensorboard_reads(folder) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in ``folder``'s event files as TensorBoard's own reader sees them (the
    ``tensorboard`` package: the test extra installs it)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_the_real_tensorboard_reads_our_files(tmp_path):
    with EventWriter(tmp_path) as writer:
        for step in range(1, 6):
            writer.add_scalars({"train/loss": 1.0 / step, "episode/return/rank1": 10.0 * step}, step * 100)
    seen = tensorboard_reads(tmp_path)
    assert set(seen) == {"train/loss", "episode/return/rank1"}
    assert [s for s, _ in seen["train/loss"]] == [100, 200, 300, 400, 500]
    assert [v for _, v in seen["train/loss"]] == pytest.approx([1.0 / s for s in range(1, 6)])


# -- real runs --------------------------------------------------------------------------------
def _tb(run_dir):
    """The run's scalars as our reader sees them - checked against TensorBoard's own reader."""
    files = list((run_dir / "tb").glob(f"{FILE_PREFIX}*"))
    assert len(files) == 1, files
    ours = read_scalars(files[0])
    theirs = tensorboard_reads(run_dir / "tb")
    assert set(theirs) == set(ours)
    for tag, points in ours.items():
        assert [s for s, _ in theirs[tag]] == [s for s, _, _ in points], tag
        values = [v for _, _, v in points]
        assert [v for _, v in theirs[tag]] == pytest.approx(values, rel=1e-6, nan_ok=True), tag
    return ours


def _steps(scalars, tag):
    return [s for s, _, _ in scalars[tag]]


def _assert_increasing(scalars, tag):
    steps = _steps(scalars, tag)
    assert len(steps) >= 2 and steps == sorted(steps) and steps[-1] > steps[0], (tag, steps)


def test_sequential_dqn_run_writes_its_curves(runs):
    job = runs.get("sequential-n1")
    scalars = _tb(job.run_dir)
    for tag in ("train/loss", "train/q_mean", "train/epsilon", "train/lr", "train/grad_norm",
                "eval/return", "episode/return/rank0", "episode/return", "perf/env_steps_per_s",
                "perf/updates_per_s"):
        assert tag in scalars, sorted(scalars)
        _assert_increasing(scalars, tag)
    summary = job.summary()
    assert _steps(scalars, "summary/mpi_wait_share") == [summary["env_steps"]]
    assert _steps(scalars, "train/loss")[-1] <= summary["env_steps"]
    epsilon = [v for _, _, v in scalars["train/epsilon"]]
    assert epsilon == sorted(epsilon, reverse=True) and epsilon[0] < 1.0  # decays with the steps
    evals = [v for _, _, v in scalars["eval/return"]]
    assert len(evals) == summary["evaluations"]
    assert max(evals) == pytest.approx(summary["best_eval_return"])
    assert "summary/policy_lag_mean" not in scalars  # sequential measures no lag


def test_star_run_writes_each_simulator_rank_and_the_mpi_wait(runs):
    job = runs.get("star-n3")
    scalars = _tb(job.run_dir)
    for tag in ("episode/return/rank1", "episode/return/rank2", "episode/length/rank2",
                "train/loss", "train/q_mean", "eval/return", "perf/env_steps_per_s"):
        _assert_increasing(scalars, tag)
    assert not any(tag.endswith("/rank0") for tag in scalars if tag.startswith("episode/"))
    summary = job.summary()
    for rank in range(3):
        (point,) = scalars[f"summary/mpi_wait_share/rank{rank}"]
        assert point[2] == pytest.approx(summary["per_rank"][rank]["mpi_wait_share"], rel=1e-5)
    assert scalars["summary/mpi_wait_share"][0][2] == pytest.approx(summary["mpi_wait_share"], rel=1e-5)


@pytest.mark.parametrize("enabled", [True, False])
def test_run_tensorboard_switches_the_event_file(tmp_path, cartpole, enabled):
    """``run.tensorboard=false``: the learner's log writes no ``tb/`` folder at all."""
    cfg = _compose(f"run.tensorboard={str(enabled).lower()}", "run.tensorboard_every_s=7")
    ctx = RunContext(make_plan(cfg, world_size=1), SimpleNamespace(rank=0, size=1, wait_s=0.0), tmp_path)
    ctx.make_learner()
    ctx.log.close()
    ctx.log.finish({"env_steps": 0, "mpi_wait_share": 0.0, "per_rank": []})
    if enabled:
        assert ctx.log.tensorboard.every_s == 7
        assert len(list((tmp_path / "tb").glob(f"{FILE_PREFIX}*"))) == 1
    else:
        assert ctx.log.tensorboard is None and not (tmp_path / "tb").exists()
    assert (tmp_path / "metrics.csv").is_file()


def _in_process_run(tmp_path, algo_cls, env_id, algo_cfg, steps, chunk):
    """Drive a Learner and its RunLog the way the sequential topology does, without MPI (on
    one torch thread, as a run's ranks are: threads_per_rank=1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _drive(tmp_path, algo_cls, env_id, algo_cfg, steps, chunk)
    finally:
        torch.set_num_threads(threads)


def _drive(tmp_path, algo_cls, env_id, algo_cfg, steps, chunk):
    run = {**defaults("run"), "max_env_steps": steps, "eval_every": steps, "eval_episodes": 2, "eval_envs": 2,
           "stop_on_solve": False}
    log = RunLog(tmp_path, progress_every_s=0, tensorboard_every_s=0.01)
    learner = Learner(algo_cls(*algo_cfg, seed=0), lambda: [make_env(env_id) for _ in range(2)], run,
                      reward_threshold=None, log=log)
    log.attach(learner)
    actor = Actor([make_env(env_id) for _ in range(2)], algo_cls(*algo_cfg, seed=1, learner=False),
                  stream_base=0, seed=0)
    actor.load_weights(learner.policy_weights())
    while learner.stop_reason() is None:
        actor.set_global_steps(learner.env_steps)
        learner.ingest(actor.collect(chunk), source_rank=0)
        if learner.train():
            actor.load_weights(learner.policy_weights())
        learner.maybe_evaluate()
        log.progress()
        time.sleep(0.011)  # let an interval pass
    log.close()
    log.finish({"env_steps": learner.env_steps, "mpi_wait_share": 0.0, "per_rank": []})
    return _tb(tmp_path)


def _algo_cfg(name, spec, **overrides):
    cfg = group_config("algo", name)
    for key, value in overrides.items():
        cfg[key] = value
    return spec, cfg


def test_ppo_writes_its_own_metrics(tmp_path, cartpole):
    cfg = _algo_cfg("ppo", cartpole, hidden=[16, 16], rollout_steps=128, batch_size=64, epochs=2)
    scalars = _in_process_run(tmp_path, PPO, "CartPole-v1", cfg, steps=1024, chunk=32)
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm", "lr"):
        _assert_increasing(scalars, f"train/{name}")
    assert "train/loss" not in scalars and "train/epsilon" not in scalars
    assert all(v > 0 for _, _, v in scalars["train/entropy"])
    _assert_increasing(scalars, "episode/return/rank0")


def test_td3_writes_its_own_metrics(tmp_path, pendulum):
    cfg = _algo_cfg("td3", pendulum, hidden=[16, 16], learning_starts=100, batch_size=32,
                    buffer_size=2000, max_grad_norm=10.0, updates_per_step=0.5)
    scalars = _in_process_run(tmp_path, TD3, "Pendulum-v1", cfg, steps=400, chunk=25)
    for name in ("critic_loss", "actor_loss", "q_mean", "critic_grad_norm", "actor_grad_norm",
                 "critic_lr", "actor_lr"):
        _assert_increasing(scalars, f"train/{name}")
    # the actor loss is NaN until the first actor step: left out of the means, never written
    assert all(np.isfinite(v) for _, _, v in scalars["train/actor_loss"])
    assert "train/grad_norm" not in scalars and "train/epsilon" not in scalars


def test_dqn_without_clipping_has_no_grad_norm(cartpole):
    spec, cfg = _algo_cfg("dqn", cartpole, hidden=[8], max_grad_norm=None)
    assert DQN(spec, cfg).metric_names == ("loss", "q_mean")
    assert DQN(*_algo_cfg("dqn", cartpole, hidden=[8])).metric_names == ("loss", "q_mean", "grad_norm")


# -- configuration ----------------------------------------------------------------------------
def test_tensorboard_options_are_validated():
    cfg = _compose()
    assert cfg.run.tensorboard is True and cfg.run.tensorboard_every_s > 0
    make_plan(_compose("run.tensorboard=false", "run.tensorboard_every_s=0.5"), world_size=1)
    with pytest.raises(ConfigError, match=r"^run.tensorboard_every_s must be > 0, got 0$"):
        make_plan(_compose("run.tensorboard_every_s=0"), world_size=1)
    with pytest.raises(ConfigError, match=r"^run.tensorboard_every_s must be > 0, got -1.5$"):
        make_plan(_compose("run.tensorboard_every_s=-1.5"), world_size=1)
    with pytest.raises(ConfigError, match=r"^run.tensorboard_every_s must be a number, got 'x'$"):
        make_plan(_compose("run.tensorboard_every_s=x"), world_size=1)
    with pytest.raises(ConfigError, match=r"^run.tensorboard must be true or false, got 'yes'$"):
        make_plan(_compose("run.tensorboard=yes"), world_size=1)


# -- the report -------------------------------------------------------------------------------
def _write_training(run, loss, q_mean=None):
    with EventWriter(run / "tb") as writer:
        for i, value in enumerate(loss):
            values = {"train/loss": value, "episode/return/rank0": 10.0 * i}
            if q_mean is not None:
                values["train/q_mean"] = q_mean[i]
            writer.add_scalars(values, 1000 * (i + 1))


def test_report_plots_training_metrics_and_skips_runs_without_event_files(tmp_path):
    root = tmp_path / "runs"
    _write_training(make_run(root, "seq0", "sequential", 1, 0, 10.0), [1.0, 0.5, 0.25], [1, 2, 3])
    _write_training(make_run(root, "seq1", "sequential", 1, 1, 12.0), [0.8, 0.4, 0.2], [1, 2, 4])
    _write_training(make_run(root, "star", "star", 3, 0, 6.0), [0.9, 0.3])
    make_run(root, "plain", "p2p", 2, 0, 8.0)  # no tb/: silently without curves
    report = build_report([root], tmp_path / "out")
    written = {p.name for p in report.files if p.name.startswith("metrics_")}
    assert written == {"metrics_loss.png", "metrics_q_mean.png"}  # only the metrics some run has
    assert {"loss", "q_mean"} <= set(TRAINING_METRICS)
    for name in ("metrics_loss.png", "metrics_q_mean.png"):
        assert (report.out / name).read_bytes()[:8] == PNG_SIGNATURE
    text = (report.out / "report.md").read_text()
    assert "](metrics_loss.png)" in text and "](metrics_q_mean.png)" in text
    assert not report.runset.warnings
    runs = {r.path.name: r for r in report.runset.runs}
    assert runs["plain"].training == {}
    assert runs["seq0"].training["loss"].tolist() == [[1000, 1.0], [2000, 0.5], [3000, 0.25]]
    assert "return/rank0" not in runs["seq0"].training  # only train/ tags are kept


def test_report_warns_about_a_corrupted_event_file_and_goes_on(tmp_path):
    root = tmp_path / "runs"
    run = make_run(root, "seq0", "sequential", 1, 0, 10.0)
    _write_training(run, [1.0, 0.5])
    (event_file,) = (run / "tb").iterdir()
    data = bytearray(event_file.read_bytes())
    data[-2] ^= 0xFF
    event_file.write_bytes(bytes(data))
    report = build_report([root], tmp_path / "out")
    assert len(report.runset.runs) == 1 and report.runset.runs[0].training == {}
    (warning,) = report.runset.warnings
    assert "event files unreadable" in warning and "CRC" in warning
    assert "metrics_loss.png" not in {p.name for p in report.files}
