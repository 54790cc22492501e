"""Actor packing, the simulated-cost wrapper, and learner bookkeeping (no MPI)."""

from __future__ import annotations

import csv
import time

import gymnasium as gym
import numpy as np

from drlmpi.algos.dqn import DQN
from drlmpi.config.schema import defaults, group_config
from drlmpi.envs.make import make_env
from drlmpi.envs.spec import env_spec
from drlmpi.outputs.run_log import RunLog
from drlmpi.roles.actor import Actor
from drlmpi.roles.learner import Learner


def _algo(learner: bool = True) -> DQN:
    cfg = group_config("algo", "dqn")
    return DQN(env_spec(make_env("CartPole-v1")), cfg, seed=0, learner=learner)


def test_actor_packs_consistent_rows():
    envs = [make_env("CartPole-v1") for _ in range(3)]
    actor = Actor(envs, _algo(learner=False), stream_base=6, seed=0)
    rows = actor.collect(40, "steps")
    layout = actor.layout
    assert rows.shape == (120, layout.width)
    streams = layout.column(rows, "stream")[:, 0]
    assert set(streams.tolist()) == {6.0, 7.0, 8.0}
    # Within a stream, next_obs of a step is obs of the following step unless the episode ended.
    for s in (6.0, 7.0, 8.0):
        sub = rows[streams == s]
        ended = (layout.column(sub, "terminated")[:, 0] + layout.column(sub, "truncated")[:, 0]) > 0
        for t in range(len(sub) - 1):
            if not ended[t]:
                assert np.allclose(layout.column(sub, "next_obs")[t], layout.column(sub, "obs")[t + 1])
            else:
                assert layout.column(sub, "episode_length")[t, 0] > 0
    assert actor.steps == 120


def test_actor_collects_whole_episodes():
    actor = Actor([make_env("CartPole-v1")], _algo(learner=False), stream_base=0, seed=1)
    rows = actor.collect(3, "episodes")
    lengths = actor.layout.column(rows, "episode_length")[:, 0]
    assert np.count_nonzero(lengths) == 3
    assert lengths.sum() == len(rows)  # the chunk ends exactly at the third episode's end


def test_sim_cost_burns_cpu_time():
    env = make_env("CartPole-v1", sim_cost_ms=5)
    env.reset(seed=0)
    cpu0 = time.process_time()
    for _ in range(10):
        env.step(0)
    assert time.process_time() - cpu0 >= 0.049  # CPU work, not sleep


def test_learner_counts_logs_and_excludes_eval_time():
    logged = []
    algo = _algo()
    run = {**defaults("run"),
           "max_env_steps": 500, "eval_every": 200, "eval_episodes": 2, "stop_on_solve": True}
    learner = Learner(algo, lambda: [make_env("CartPole-v1")], run, reward_threshold=475,
                      log=lambda kind, **kw: logged.append(kind))
    actor = Actor([make_env("CartPole-v1")], _algo(learner=False), stream_base=0, seed=0)
    while learner.stop_reason() is None:
        learner.ingest(actor.collect(100, "steps"), source_rank=0)
        learner.maybe_evaluate()
    assert learner.env_steps == 500 and learner.stop_reason() == "max_env_steps"
    assert logged.count("eval") == 2 and "episode" in logged
    assert learner.clock.paused_s > 0
    assert learner.clock.elapsed() < learner.clock.wall()


class _TickingClock:
    """A training clock that moves 10 ms at every read (a host busy between two reads)."""

    def __init__(self) -> None:
        self.t = 0.0

    def elapsed(self) -> float:
        self.t += 0.01
        return self.t

    def wall(self) -> float:
        return self.t


def test_an_episode_s_row_and_its_pace_note_share_one_moment(tmp_path):
    """The summary's second half names rows of metrics.csv by their (seconds, steps): the note
    and the row must be stamped from one read of the clock, however busy the host."""
    log = RunLog(tmp_path, progress_every_s=0)
    learner = Learner(_algo(), lambda: [make_env("CartPole-v1")], defaults("run"),
                      reward_threshold=None, log=log)
    log.attach(learner)
    learner.clock = _TickingClock()
    learner.env_steps = 40
    learner.record_episode(10.0, 10, source_rank=1)
    log.close()
    (seconds, steps), = learner.pace.points
    (row,) = csv.DictReader(open(tmp_path / "metrics.csv"))
    assert (float(row["train_seconds"]), int(row["env_steps"])) == (seconds, steps) == (0.01, 40)


class _SlowStep(gym.Wrapper):
    """An evaluation environment whose steps take wall time (a slow greedy evaluation)."""

    def step(self, action):
        time.sleep(0.002)
        return self.env.step(action)


def test_time_to_threshold_excludes_the_evaluation_that_reached_it():
    algo = _algo()
    run = {**defaults("run"),
           "max_env_steps": 10_000, "eval_every": 100, "eval_episodes": 2, "stop_on_solve": True}
    learner = Learner(algo, lambda: [_SlowStep(make_env("CartPole-v1")) for _ in range(2)], run,
                      reward_threshold=0.0)  # any return solves: the first evaluation does
    actor = Actor([make_env("CartPole-v1")], _algo(learner=False), stream_base=0, seed=0)
    learner.ingest(actor.collect(100, "steps"), source_rank=0)
    t0 = time.perf_counter()
    assert learner.maybe_evaluate()
    eval_wall = time.perf_counter() - t0
    assert learner.stop_reason() == "solved"
    assert eval_wall > 0.015  # at least 8 slow steps of each of 2 episodes
    # The solving evaluation's time is off the clock, and so is every earlier second of it.
    assert learner.solved_at["train_seconds"] < learner.clock.wall() - 0.9 * eval_wall
    assert learner.clock.paused_s >= 0.9 * eval_wall


def test_the_first_stop_reason_is_the_run_s():
    """A signal stops the run; the time budget running out during the last updates and the
    checkpoint that follow does not change why it stopped (the summary and the decision to
    write the signal's checkpoint read it afterwards)."""
    asked: list[str | None] = [None]
    run = {**defaults("run"),
           "max_env_steps": None, "max_train_seconds": 30.0, "eval_every": 1000, "eval_episodes": 1,
           "stop_on_solve": True}
    learner = Learner(_algo(), lambda: [], run, reward_threshold=None, stop_request=lambda: asked[0])
    assert learner.stop_reason() is None
    asked[0] = "SIGTERM"
    assert learner.stop_reason() == "signal"
    learner.clock.start -= 60.0  # the time budget is now spent as well
    asked[0] = None
    assert learner.stop_reason() == "signal"
    fresh = Learner(_algo(), lambda: [], run, reward_threshold=None)
    fresh.clock.start -= 60.0
    assert fresh.stop_reason() == "max_train_seconds"


def test_a_rank_with_a_learner_acts_with_its_network_where_act_device_says(tmp_path):
    """``act_device=learner``: the actor acts with the learner's own network (on a GPU learner,
    on the device), so following it copies nothing; ``cpu`` (and ``auto`` for vector
    observations): a CPU copy that follows the learner's weights."""
    from hydra import compose, initialize_config_dir
    from mpi4py import MPI

    from drlmpi.mpi.timed import TimedComm
    from drlmpi.run.preflight import make_plan
    from drlmpi.topologies.core.context import RunContext
    from tests.conftest import CONF

    for act_device, shared in (("learner", True), ("cpu", False), ("auto", False)):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[f"act_device={act_device}"])
        ctx = RunContext(make_plan(cfg, 1), TimedComm(MPI.COMM_SELF), tmp_path)
        learner = ctx.make_learner(log=False)
        actor = ctx.make_local_actor(learner)
        assert (actor.algo is learner.algo) == shared, act_device
        learner.algo.policy.flat.params.data.add_(0.5)  # what a learner step does to the weights
        assert np.array_equal(actor.weights, learner.policy_weights()) == shared
        actor.follow(learner.algo)
        assert np.array_equal(actor.weights, learner.policy_weights())
        actor.close()
        learner.close()
