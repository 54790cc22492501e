"""``run.eval_on=simulators``: p2p's and star's simulators play the learner's evaluations, each its
share of the episodes seeded as the learner seeds them, and the learner records them stamped with
the moment it asked (drlmpi/topologies/core/rounds.py, drlmpi/roles/evaluate.py).

In-process: the split and the seeds against the learner's own evaluation, the control message,
the recording's stamp and the final evaluation on the learner (a fake link). In the pool: DQN
CartPole on star (3 ranks) and p2p evaluated both ways from one seed play the same episodes at
the same steps. And every other topology refuses the option before any rank starts.
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest

from drlmpi.config.schema import defaults
from drlmpi.envs.make import make_env
from drlmpi.mpi.wire import Control
from drlmpi.roles.evaluate import EvaluationShare, evaluate, merge_shares, share_width
from drlmpi.roles.stopping import Moment, Stopping, TrainingClock
from drlmpi.topologies.core.rounds import learn_in_rounds
from tests.conftest import RunResult, run_in_pool
from tests.test_refusals import refusal
from tests.test_roles import _algo

EPISODES, SIMULATORS = 7, 3


def _shares(algo, first_seed: int) -> list[EvaluationShare]:
    return [EvaluationShare(algo, lambda n: [make_env("CartPole-v1") for _ in range(n)], first_seed,
                            EPISODES, envs=2, index=k, shares=SIMULATORS) for k in range(SIMULATORS)]


def test_the_shares_play_the_learners_episodes_with_its_seeds():
    """Three simulators splitting 7 episodes play 0,3,6 / 1,4,7... seeded ``first + e * 7 + j``:
    merged, their returns are the learner's own evaluation of the same weights, episode by
    episode (a greedy CartPole policy whose episode lengths differ seed by seed). Catches a
    share seeded from its own position instead of the episode's, or a wrong evaluation stride."""
    algo = _algo()
    algo.reseed(3)
    shares = _shares(algo, first_seed=1_000_000)
    assert [s.mine for s in shares] == [[0, 3, 6], [1, 4], [2, 5]]
    assert shares[1].seeds(2) == [1_000_015, 1_000_018]
    assert shares[2].n_envs == 2 and shares[0].width == share_width(EPISODES, SIMULATORS) + 1 == 4
    for evaluation in (0, 2):
        table = np.stack([s.play(evaluation) for s in shares])
        assert np.isnan(table[1:, 2]).all() and (table[:, -1] > 0).all()  # padding, then seconds
        returns, seconds = merge_shares(table, EPISODES)
        own = evaluate(algo, [make_env("CartPole-v1") for _ in range(3)], EPISODES,
                       seed=1_000_000 + evaluation * EPISODES)
        assert returns.tolist() == own.tolist() and len(set(own.tolist())) > 1
        assert seconds.tolist() == table[:, -1].tolist()


class _EvalLearner(Stopping):
    """A learner's evaluation bookkeeping (the real :class:`Stopping`) over rounds of 100 rows
    per simulator; each ``train`` runs 5 updates. It evaluates every 250 steps and stops at
    1,000, when an evaluation is due: the learner plays that one."""

    layout = None

    def __init__(self) -> None:
        run = {**defaults("run"), "max_env_steps": 1000, "eval_every": 250, "eval_episodes": EPISODES}
        self.max_env_steps, self.max_train_seconds, self.max_episodes = 1000, None, None
        self.eval_every, self.eval_episodes = run["eval_every"], run["eval_episodes"]
        self.eval_seed_offset, self.seed = run["eval_seed_offset"], 0
        self.stop_on_solve, self.reward_threshold, self.stop_request = True, 50.0, None
        self.next_eval, self.evaluations, self.last_eval, self.best_eval = 250, 0, None, None
        self.solved_at, self._stopped_by, self._time_schedules = None, None, True
        self._make_eval_envs, self._eval_envs = (lambda: []), None
        self.algo, self.clock = None, TrainingClock()
        self.env_steps, self.episodes, self.updates = 0, 0, 0
        self.rows: list[tuple] = []
        self.log = lambda kind, at=None, **fields: self.rows.append((fields["return_"], at or self.moment()))

    def policy_weights(self):
        return np.zeros(1, dtype=np.float32)

    def ingest(self, rows, source_rank, policy_lag=None) -> int:
        self.env_steps += rows.shape[0]
        return rows.shape[0]

    def train(self, settle: bool = True) -> None:
        self.updates += 5

    def settle(self) -> float:
        return 0.0

    def finish(self) -> None:
        pass


class _SharingLink:
    """Two simulators' rows every round; the control messages are kept, and each evaluation's
    shares hold returns ``10 * evaluation + j`` for episode ``j`` (0.25 s each)."""

    def __init__(self) -> None:
        self.controls: list[np.ndarray] = []
        self.gathered_returns = 0

    def gather(self, layout):
        return [(1, np.zeros((100, 2), np.float32)), (2, np.zeros((100, 2), np.float32))]

    def gather_returns(self, width: int) -> np.ndarray:
        assert width == share_width(EPISODES, 2) + 1
        evaluation = int(self.controls[-1][Control.EVALUATE]) - 1  # asked in the previous round
        table = np.full((2, width), np.nan)
        for j in range(EPISODES):
            table[j % 2, j // 2] = 10 * evaluation + j
        table[:, -1] = 0.25
        self.gathered_returns += 1
        return table

    def send_weights(self, weights) -> None:
        pass

    def send_control(self, control) -> None:
        self.controls.append(control.copy())


def test_the_learner_asks_records_at_the_moment_it_asked_and_plays_the_last_itself():
    """Rounds of 200 steps, an evaluation every 250: the control messages ask for evaluations
    0, 1, 2 at 400, 600, 800 steps (and none between), their returns come back in the next round
    only, each recorded stamped with the steps and updates of the round that asked, not those
    of the round that received it; the run stops at 1,000 steps with an evaluation due, which
    the learner plays itself (never asked of simulators); the solve is dated at the moment its
    weights were sent. Catches a recording stamped at receipt, a request sent at the stop, or a
    returns message expected in a round that asked for none."""
    learner, link = _EvalLearner(), _SharingLink()
    with patch("drlmpi.roles.stopping.evaluate", lambda *a, **k: np.full(EPISODES, 99.0)):
        stats = learn_in_rounds(learner, link, after_round=lambda: None, simulators=2)
    asked = [int(c[Control.EVALUATE]) for c in link.controls]
    steps = [int(c[Control.ENV_STEPS]) for c in link.controls]
    assert steps == [200, 400, 600, 800, 1000]
    assert asked == [0, 1, 2, 3, 0] and link.controls[-1][Control.STOP] == 1
    assert link.gathered_returns == 3 and stats["simulator_eval_s"] == 0.75
    assert stats["rounds"] == 5 and {"first_gather_s", "gather_s_median", "train_s_median"} <= stats.keys()
    means = [10 * e + 3.0 for e in range(3)]  # the mean of 10e + 0..6
    assert [r for r, _ in learner.rows] == [*means, 99.0]
    assert [(at.env_steps, at.updates) for _, at in learner.rows] == [(400, 5), (600, 10), (800, 15),
                                                                       (1000, 20)]
    assert learner.evaluations == 4 and learner.best_eval == 99.0 and learner.next_eval == 1250
    assert learner.solved_at is not None and learner.solved_at["env_steps"] == 1000


def test_a_solve_is_dated_by_the_weights_that_solved():
    """An evaluation the simulators played that reaches the threshold dates the solve (steps,
    updates, training seconds) at the moment it was asked for, and stops the run the round it
    arrives."""
    learner = _EvalLearner()
    at = Moment(1.5, 2.0, 400, 5)
    learner.env_steps, learner.updates = 600, 10
    learner.record_evaluation(np.full(EPISODES, 60.0), at=at)
    assert learner.solved_at == {"train_seconds": 1.5, "env_steps": 400, "updates": 5}
    assert learner.rows == [(60.0, at)] and learner.stop_reason() == "solved"


# -- real runs ------------------------------------------------------------------------------------
CARTPOLE = ["algo=dqn", "env=cartpole", "seed=3", "run.max_env_steps=2048", "run.eval_every=512",
            "run.eval_episodes=5", "run.eval_envs=2", "algo.learning_starts=256", "algo.hidden=[32,32]",
            "topology.sync_every=128", "run.progress_every_s=0", "run.stop_on_solve=false",
            "run.tensorboard=false"]


@pytest.mark.parametrize(("topology", "ranks"), [("star", 3), ("p2p", 2)])
def test_simulators_evaluate_what_the_learner_would_have(pool, tmp_path, topology, ranks):
    """DQN CartPole from one seed, evaluated by the learner and by the simulators: the same
    evaluations (steps, updates, greedy mean and spread), the last one played by the learner
    in both; the simulators' time is in topology_stats and their per-rank ``eval_s``."""
    both = {}
    jobs = {where: run_in_pool(pool, ranks, [*CARTPOLE, f"topology={topology}", f"run.eval_on={where}"],
                               tmp_path / where) for where in ("learner", "simulators")}
    for where, job in jobs.items():
        run = RunResult(tmp_path / job.result())
        both[where] = (run.summary(), [(r["env_steps"], r["updates"], r["return"], r["return_std"])
                                       for r in run.rows("eval")])
    (by_learner, learner_rows), (by_simulators, simulator_rows) = both["learner"], both["simulators"]
    assert len(learner_rows) == 4 and len({r[2] for r in learner_rows}) > 1
    assert simulator_rows == learner_rows
    assert by_simulators["evaluations"] == by_learner["evaluations"] == 4
    assert by_simulators["updates"] == by_learner["updates"]
    assert by_simulators["topology_stats"]["simulator_eval_s"] > 0
    assert "simulator_eval_s" not in by_learner["topology_stats"]
    assert all(r["eval_s"] > 0 for r in by_simulators["per_rank"][1:])
    # the learner played the last evaluation itself (its time is in eval_seconds); which of the
    # two learners spent longer is not asserted: CartPole's short greedy episodes make four
    # evaluations and one comparable with the environments' creation, and a loaded machine
    # swaps them (the fake-link test checks that only the stopping round evaluates on the learner)
    assert by_simulators["eval_seconds"] > 0 and by_learner["eval_seconds"] > 0


# -- refusals -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("topology", "ranks"), [
    ("sequential", 1), ("async", 2), ("allgather", 2), ("parameter_server", 3), ("central", 2),
    ("groups", 4)])
def test_other_topologies_refuse_evaluating_on_simulators(topology, ranks):
    """One line at plan time, before any rank starts (groups too, although its star wiring
    shares star's simulator loop)."""
    message = refusal(f"topology={topology}", "run.eval_on=simulators", world_size=ranks)
    assert message == (f"run.eval_on=simulators needs the rounds of topology=p2p or topology=star; "
                       f"topology={topology} evaluates on its learner: use run.eval_on=learner")
