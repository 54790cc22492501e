"""A device learner's queued updates (``Learner.train(settle=False)``, drlmpi/roles/training.py):
their device time reaches ``learn_s`` once settled, and nothing that takes time off the training
clock (an evaluation, a checkpoint) or starts more updates runs before they are settled. On the
CPU the seam is the device span: the algorithm is told it queues updates and the span is a stub
that says when it was waited for."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
import torch

from drlmpi.algos.dqn import DQN
from drlmpi.algos.exchange import GradientExchange
from drlmpi.config.schema import defaults, group_config
from drlmpi.envs.make import make_env
from drlmpi.envs.spec import env_spec
from drlmpi.roles.learner import Learner
from drlmpi.topologies.core.rounds import RoundClock

RUN = {**defaults("run"), "max_env_steps": 100_000, "eval_every": 100_000, "eval_episodes": 1}
SPAN_S = 0.25


class StubSpan:
    """Stands in for :class:`~drlmpi.device.staging.DeviceSpan`: logs when it is waited for."""

    def __init__(self, device, events: list[str]) -> None:
        self.events = events
        self.finished = False  # what a query of its end event says (done())

    def end(self):
        self.events.append("queued")
        return self

    def done(self) -> bool:
        return self.finished

    def seconds(self) -> float:
        self.events.append("settled")
        return SPAN_S


@pytest.fixture
def queued(monkeypatch):
    """A DQN learner on the CPU whose updates count as queued on a device; ``events`` logs the
    spans' queueing and settling and what else happened between."""
    events: list[str] = []
    monkeypatch.setattr(DQN, "queues_updates", property(lambda self: True))
    monkeypatch.setattr("drlmpi.roles.training.DeviceSpan", lambda device: StubSpan(device, events))
    cfg = {**group_config("algo", "dqn"), "learning_starts": 0, "batch_size": 8}
    algo = DQN(env_spec(make_env("CartPole-v1")), cfg, seed=0)
    learner = Learner(algo, lambda: [], RUN, reward_threshold=None, rank=0)
    rows = np.random.default_rng(0).uniform(-1, 1, (64, algo.layout.width)).astype(np.float32)
    algo.layout.column(rows, "episode_return")[:] = 0.0
    algo.layout.column(rows, "episode_length")[:] = 0.0
    learner.ingest(rows, source_rank=1)
    return learner, events


def test_queued_updates_count_their_device_time_when_settled(queued):
    learner, events = queued
    owed = learner.pending_updates
    assert learner.train(settle=False) == owed > 0 and learner.updates == owed
    assert events == ["queued"] and learner.learn_s == 0.0
    assert learner.settle() == SPAN_S and learner.learn_s == SPAN_S
    assert learner.settle() == 0.0 and learner.learn_s == SPAN_S, "a span is counted once"
    assert events == ["queued", "settled"]


def test_an_evaluation_a_checkpoint_and_more_updates_settle_first(queued):
    learner, events = queued
    learner.train(settle=False)
    with patch("drlmpi.roles.stopping.evaluate", lambda *a, **k: events.append("evaluate") or np.zeros(1)):
        learner.maybe_evaluate(force=True)
    assert events == ["queued", "settled", "evaluate"]
    learner.pending_updates = 4
    learner.train(settle=False)
    state = learner.checkpoint_state(with_storage=False)
    assert state["learner"]["learn_s"] == 2 * SPAN_S
    learner.pending_updates = 4
    learner.train(settle=False)
    learner.train_free()  # a settled update: the queued ones are settled before it runs
    assert events[3:] == ["queued", "settled", "queued", "settled"]
    assert learner.learn_s >= 3 * SPAN_S


def test_batches_queued_ahead_wait_only_for_the_oldest_beyond_the_allowance(queued):
    """``train(settle=False, ahead=2)`` (central acting beside its updates): a second batch is
    queued behind the first without waiting; a third waits for the oldest only; a batch whose
    end a query finds done is counted without waiting (``queued_batches``)."""
    learner, events = queued
    spans = []
    for _ in range(3):
        learner.pending_updates = 4
        learner.train(4, settle=False, ahead=2)
        spans.append(learner._unsettled[-1])
    assert events == ["queued", "queued", "settled", "queued"] and learner.learn_s == SPAN_S
    assert learner.queued_batches() == 2 and events[-1] == "queued", "a query never waits"
    spans[1].finished = True
    assert learner.queued_batches() == 1 and learner.learn_s == 2 * SPAN_S
    assert learner.settle() == SPAN_S and learner.queued_batches() == 0


def test_a_learner_exchanging_gradients_never_defers(queued):
    learner, events = queued

    class Crossing(GradientExchange):
        crosses_ranks = True

        def exchange(self, name, group):  # a stand-in: the gradients stay as they are
            pass

    learner.exchange = Crossing()
    learner.train(settle=False)
    assert events == [] and learner.settle() == 0.0


def test_a_rounds_training_time_is_its_device_time_or_its_queueing_if_longer():
    clock = RoundClock()
    clock.settled(1.0)  # nothing trained yet: nothing to settle
    clock.gathered(0.5)
    clock.trained(0.01)
    clock.settled(0.08)
    clock.gathered(0.002)
    clock.trained(0.05)
    clock.settled(0.03)
    assert clock.trains == [0.08, 0.05]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_device_queued_updates_learn_what_settled_ones_learn():
    """Two DQN learners on the GPU, same seed and rows: one settles each batch, one queues and
    settles later; the same weights, and both count device time."""
    cfg = {**group_config("algo", "dqn"), "learning_starts": 0, "batch_size": 32, "capture": "graph"}
    rows = np.random.default_rng(0).uniform(-1, 1, (256, 1)).astype(np.float32)
    learners = []
    for _ in range(2):
        algo = DQN(env_spec(make_env("CartPole-v1")), cfg, device="cuda", seed=0)
        data = np.resize(rows, (256, algo.layout.width)).astype(np.float32)
        algo.layout.column(data, "episode_return")[:] = 0.0
        algo.layout.column(data, "episode_length")[:] = 0.0
        learner = Learner(algo, lambda: [], RUN, reward_threshold=None, rank=0)
        learner.ingest(data, source_rank=1)
        learners.append(learner)
    settled, queued = learners
    settled.train()
    queued.train(settle=False)
    assert queued._unsettled is not None
    queued.settle()
    assert torch.equal(settled.algo.policy.flat.params, queued.algo.policy.flat.params)
    assert settled.learn_s > 0 and queued.learn_s > 0
