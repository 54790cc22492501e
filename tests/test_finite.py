"""A simulator whose observations or rewards turn NaN stops the run in one line, naming the rank,
the env step and what was not finite, and never leaves a NaN ``policy.pt`` (docs/failures.md,
"Failing clearly, never hanging"). The check itself, where every topology's experience is stored
(``Learner.store``), the loss where update metrics are read, the weights before a checkpoint, and
one real job (tests/nan_env.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drlmpi.algos.dqn import DQN
from drlmpi.algos.ppo import PPO
from drlmpi.config.errors import NonFiniteError
from drlmpi.config.schema import defaults, group_config
from drlmpi.data.finite import first_non_finite
from drlmpi.data.layout import ExperienceLayout
from drlmpi.device.metrics import Metrics, non_finite_metrics, read_metrics
from drlmpi.envs.make import make_env
from drlmpi.envs.spec import env_spec
from drlmpi.job_control.abort import NON_FINITE_EXIT
from drlmpi.outputs.tensorboard_log import TensorBoardLog
from drlmpi.roles.actor import Actor
from drlmpi.roles.learner import Learner
from tests.mpirun import run_job

NAN_ENV = "env.id=tests.nan_env:NaNCartPole-v0"
RUN = {**defaults("run"),
       "max_env_steps": 100_000, "eval_every": 100_000, "eval_episodes": 1, "stop_on_solve": True}


def _learner(algo_cls=DQN, rank: int = 0) -> Learner:
    cfg = group_config("algo", algo_cls.__name__.lower())
    algo = algo_cls(env_spec(make_env("CartPole-v1")), cfg, seed=0)
    return Learner(algo, lambda: [], RUN, reward_threshold=None, rank=rank)


def _rows(layout: ExperienceLayout, n: int = 8) -> np.ndarray:
    rows = np.random.default_rng(0).uniform(-1, 1, (n, layout.width)).astype(np.float32)
    layout.column(rows, "episode_return")[:] = 0.0
    layout.column(rows, "episode_length")[:] = 0.0
    return rows


def test_the_check_finds_the_first_row_and_names_its_column():
    """Catches a check that looks at no column, at the wrong one, or reports a later row."""
    layout = ExperienceLayout(4, 1, (("log_prob", 1),))
    rows = _rows(layout)
    assert first_non_finite(rows, layout) is None
    assert first_non_finite(rows[:0], layout) is None
    rows[5, layout.slices["obs"].start + 2] = np.nan
    rows[3, layout.slices["next_obs"].start] = np.inf  # the step whose observation broke
    assert first_non_finite(rows, layout) == (3, "observation")
    rows[1, layout.slices["reward"]] = -np.inf
    assert first_non_finite(rows, layout) == (1, "reward")
    rows[0, layout.slices["log_prob"]] = np.nan
    assert first_non_finite(rows, layout) == (0, "log_prob")


def test_image_bytes_may_hold_any_pattern_but_rewards_may_not():
    """Packed uint8 pixels are stored in float32 slots whose patterns may read as NaN: they are
    not checked (a check that looked at them would stop every image run); the rest is."""
    layout = ExperienceLayout(64, 1, obs_shape=(8, 8), obs_dtype="uint8")
    rows = _rows(layout, 4)
    layout.column(rows, "obs").view(np.uint32)[:] = 0x7FC00000  # NaN bit patterns: pixel bytes
    layout.column(rows, "next_obs").view(np.uint32)[:] = 0x7F800000  # infinity
    assert first_non_finite(rows, layout) is None
    rows[2, layout.slices["reward"]] = np.nan
    assert first_non_finite(rows, layout) == (2, "reward")


@pytest.mark.parametrize("algo_cls", [DQN, PPO], ids=["replay", "rollout"])
def test_a_learner_stores_nothing_from_a_chunk_that_is_not_finite(algo_cls):
    """Every topology's rows reach the algorithm through ``Learner.store`` (``ingest_parts``
    included): the finite check there stops before the replay or the rollout takes a row.
    Fails with the check removed from ``store`` (the rows are stored, nothing raises)."""
    learner = _learner(algo_cls, rank=0)
    layout = learner.layout
    good = _rows(layout, 16)
    learner.ingest(good, source_rank=1)
    stored = learner.algo.training_state(with_storage=True)
    bad = np.concatenate([_rows(layout, 4), _rows(layout, 4)])
    bad[6, layout.slices["next_obs"]] = np.nan
    with pytest.raises(NonFiniteError) as caught:
        learner.ingest_parts(bad, [(4, 2, None), (4, 3, None)])
    assert str(caught.value) == "non-finite observation in the experience of rank 3 at env step 23"
    assert learner.env_steps == 16  # nothing of the chunk counted or stored
    after = learner.algo.training_state(with_storage=True)
    assert repr(stored) == repr(after)
    policy = caught.value.policy  # the finite policy, for policy.pt
    assert policy is not None and all(torch.isfinite(v).all() for v in policy.values())
    bad[:, layout.slices["next_obs"]] = 0.0
    bad[0, layout.slices["reward"]] = np.inf
    with pytest.raises(NonFiniteError,
                       match="^non-finite reward in the experience of rank 0 at env step 17$"):
        learner.store(bad)  # a data-parallel rank's own rows: its own rank


def test_nan_weights_are_never_checkpointed_or_handed_on():
    """Catches a checkpoint or a policy.pt written from a network trained into NaN."""
    learner = _learner()
    learner.check_weights()
    learner.algo.groups["q"].flat.params[3] = float("nan")
    with pytest.raises(NonFiniteError, match="^non-finite policy weights after 0 updates") as caught:
        learner.check_weights()
    assert caught.value.policy is None


def test_a_loss_that_is_not_finite_is_found_where_metrics_are_read():
    """TD3's actor loss is NaN by design before its first actor step; a critic loss that is NaN
    in any one sample of the interval (the interval's mean leaves NaNs out) is found. Fails if the
    check reads the means, or checks every metric."""
    names = ("critic_loss", "actor_loss", "q_mean")
    samples = [Metrics(names, torch.tensor([1.0, float("nan"), 2.0])),
               Metrics(names, torch.tensor([0.5, 0.3, 2.0]))]
    assert non_finite_metrics(read_metrics(samples), ("critic_loss",)) == {}
    samples.append(Metrics(names, torch.tensor([float("inf"), 0.3, float("nan")])))
    samples.append(Metrics(names, torch.tensor([0.4, 0.3, 2.0])))
    assert non_finite_metrics(read_metrics(samples), ("critic_loss",)) == {"critic_loss": float("inf")}


def test_the_tensorboard_log_stops_on_a_nan_loss(tmp_path):
    """The one place update metrics are read (every ``run.tensorboard_every_s``): a DQN loss
    gone NaN stops the run there. Fails without the check in ``TensorBoardLog.write_interval``."""
    learner = _learner()
    log = TensorBoardLog(tmp_path, every_s=0.0)
    log.attach(learner)
    learner.last_metrics = Metrics(("loss", "q_mean"), torch.tensor([0.5, 1.0]))
    log.poll()
    learner.last_metrics = Metrics(("loss", "q_mean"), torch.tensor([float("nan"), 1.0]))
    with pytest.raises(NonFiniteError,
                       match=r"^non-finite loss \(loss = nan\) after 0 updates at env step 0$"):
        log.poll()


def test_a_sampling_policy_that_meets_a_nan_observation_says_so():
    """PPO samples its actions and raises on NaN logits before any learner sees the rows: the
    actor turns that into the same stop (and leaves any other acting failure alone)."""
    env = make_env("tests.nan_env:NaNCartPole-v0", nan_after=5)
    algo = PPO(env_spec(env), group_config("algo", "ppo"), seed=0, learner=False)
    actor = Actor([env], algo, stream_base=0, seed=0)
    with pytest.raises(NonFiniteError, match=r"^non-finite observation in its own environments at their "
                                             r"env step 5 \(acting on it raised "):
        actor.collect(20)


def test_a_nan_simulator_ends_the_job_in_one_line(tmp_path):
    """A real 2-rank job (p2p: the simulator is rank 1, the learner rank 0 blocks it in a
    receive): observations turn NaN at the simulator's step 700. One line names the ranks, the
    step and what; the exit code is NON_FINITE_EXIT; the simulator is not left waiting; policy.pt
    holds finite weights. Fails with the check removed (exit 0, NaN weights). ~5 s: a job of
    two ranks."""
    run_dir = tmp_path / "run"
    job = run_job(2, ["topology=p2p", NAN_ENV, "+env.kwargs.nan_after=700", "run.max_env_steps=3000",
                      "algo.learning_starts=300", "algo.hidden=[16]", "run.progress_every_s=0",
                      "run.eval_every=100000"], run_dir, timeout=90)
    assert job.returncode == NON_FINITE_EXIT, job.stderr[-2000:]
    lines = [line for line in job.stderr.splitlines() if line.startswith("drlmpi:")]
    assert lines == [f"drlmpi: error: rank 0 stopped the run: non-finite observation in the experience of "
                     f"rank 1 at env step 700; the last finite policy is in {run_dir / 'policy.pt'}"]
    assert "Traceback" not in job.stderr
    policy = torch.load(run_dir / "policy.pt", weights_only=True)
    assert policy and all(torch.isfinite(v).all() for v in policy.values())
