"""``topology.ramp_from``: p2p's and star's first rounds are short (``ramp_from`` steps, doubled
each round up to the round's size), so the learner trains after a few steps instead of idling
through a whole first round (drlmpi/topologies/core/base.py ``round_sizes``, rounds.py).

In-process: the sizes and a simulator's rounds against a fake link. In the pool: a real star job
sends the ramped rounds (the learner's Gatherv count and the job's steps say what crossed the
wire). And rounds that count episodes refuse a ramp before any rank starts.
"""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from drlmpi.mpi.wire import Control
from drlmpi.topologies.core.base import round_sizes
from drlmpi.topologies.core.rounds import simulate_in_rounds
from tests.conftest import RunResult, run_in_pool
from tests.test_refusals import refusal


def test_round_sizes_double_from_the_ramp_up_to_the_round():
    assert list(islice(round_sizes(64, 16), 5)) == [16, 32, 64, 64, 64]
    assert list(islice(round_sizes(100, 12), 5)) == [12, 24, 48, 96, 100]
    assert list(islice(round_sizes(64, None), 3)) == [64, 64, 64]
    assert list(islice(round_sizes(64, 500), 2)) == [64, 64]  # at or above the round: no ramp


class _Actor:
    def __init__(self) -> None:
        self.weights = np.zeros(3, np.float32)
        self.collected: list[tuple[int, str]] = []

    def collect(self, every: int, unit: str) -> np.ndarray:
        self.collected.append((every, unit))
        return np.zeros((every, 2), np.float32)

    def set_global_steps(self, steps: int, simulators: int) -> None:
        pass


class _Link:
    """Stops the simulator after ``rounds`` rounds; keeps the rows it was sent."""

    def __init__(self, rounds: int) -> None:
        self.rounds, self.sent = rounds, []

    def receive_weights(self, weights) -> None:
        pass

    def send_rows(self, rows) -> None:
        self.sent.append(len(rows))

    def receive_control(self, control) -> None:
        control[:] = 0
        control[Control.STOP] = len(self.sent) >= self.rounds


@pytest.mark.parametrize(("ramp", "expected"), [(3, [3, 6, 12, 12, 12]), (None, [12] * 5)])
def test_a_simulator_sends_the_ramped_rounds_then_full_ones(ramp, expected):
    actor, link = _Actor(), _Link(rounds=5)
    simulate_in_rounds(actor, link, every=12, unit="steps", simulators=1, ramp_from=ramp)
    assert link.sent == expected and actor.collected == [(n, "steps") for n in expected]


def test_a_real_star_job_sends_its_ramped_rounds(pool, tmp_path):
    """Star on 2 ranks, rounds of 32 steps from 4: rounds of 4, 8, 16, then 32 until the
    budget (316 steps in 12 rounds, against 10 rounds of 32 without the ramp)."""
    argv = ["algo=dqn", "env=cartpole", "topology=star", "topology.sync_every=32", "topology.ramp_from=4",
            "run.max_env_steps=300", "run.progress_every_s=0", "run.tensorboard=false",
            "algo.learning_starts=100", "algo.hidden=[16,16]"]
    run = RunResult(tmp_path / run_in_pool(pool, 2, argv, tmp_path / "ramp").result())
    summary = run.summary()
    assert summary["env_steps"] == 4 + 8 + 16 + 32 * 9
    assert summary["per_rank"][0]["mpi_calls"]["Gatherv"][0] == 12
    assert summary["updates"] > 0 and summary["topology_label"] == "star[sync_every=32,ramp_from=4]"


@pytest.mark.parametrize(("topology", "ranks"), [("star", 3), ("p2p", 2)])
def test_a_ramp_of_episodes_is_refused_before_any_rank_starts(topology, ranks):
    message = refusal(f"topology={topology}", "topology.sync_unit=episodes", "topology.sync_every=2",
                      "topology.ramp_from=1", world_size=ranks)
    assert message.startswith("topology.ramp_from counts steps: use topology.sync_unit=steps with it")
