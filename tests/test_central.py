"""topology=central's step messages: what a simulator sends after a step, and the experience rows
the learner rebuilds from it and from what it held (the observations it acted on, its own
log-probabilities), are exactly the rows an actor that acts for itself packs - bit for bit, image
bytes whose float32 slots are NaN or subnormal patterns included. The wire and learning through
real ranks: tests/test_topologies.py (the contract), tests/test_matrix.py, tests/test_images.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from drlmpi.algos.ppo import PPO
from drlmpi.config.schema import group_config
from drlmpi.envs.make import make_env
from drlmpi.envs.spec import env_spec
from drlmpi.mpi.wire import Tag
from drlmpi.roles.actor import Actor
from drlmpi.roles.learner import Learner
from drlmpi.roles.stopping import TrainingClock
from drlmpi.topologies.central import Central
from drlmpi.topologies.central.rows import RowBuilder
from drlmpi.topologies.central.simulator import step_groups
from drlmpi.topologies.central.wire import Group, StepWire, env_groups

IMAGE = "tests.image_env:ImageSide-v0"


class Taking:
    """The part of a Learner that :meth:`Central._ingest` and :meth:`Central._serve` use (the
    Learner's own methods over ``algo``), recording what it stores."""

    row_buffer = Learner.row_buffer
    extras_of = Learner.extras_of
    acting_for_simulators = Learner.acting_for_simulators

    def __init__(self, algo) -> None:
        self.algo, self.layout, self.updates = algo, algo.layout, 0
        self.clock = TrainingClock()
        self.ingested: list[tuple[np.ndarray, list]] = []

    def ingest_parts(self, rows, parts):
        self.ingested.append((rows.copy(), parts))


def test_env_groups_split_a_simulators_environments():
    assert env_groups(8, 2) == [(0, 4), (4, 4)]
    assert env_groups(3, 2) == [(0, 2), (2, 1)]
    assert env_groups(1, 2) == [(0, 1)]  # one environment: no double buffering
    assert env_groups(5, 3) == [(0, 2), (2, 2), (4, 1)]


@pytest.mark.parametrize("forced", [None, "output", "forward"],
                         ids=["as_sent", "forced_action_from_output", "forced_action_by_another_pass"])
def test_learner_rebuilds_the_actors_rows_bit_for_bit(forced):
    spec = env_spec(make_env(IMAGE, episode_steps=3, noise=255))
    cfg = group_config("algo", "ppo")
    cfg.hidden = [16]
    algo = PPO(spec, cfg, seed=0)
    envs = [make_env(IMAGE, episode_steps=3, noise=255) for _ in range(3)]
    actor = Actor(envs, algo, stream_base=6, seed=1)
    wire = StepWire(algo.layout)
    group = Group(source=2, index=1, n_envs=3, stream_base=6, wire=wire)
    learner = Taking(algo)
    layout = algo.layout

    class Posting:  # a communicator that only records where each receive was posted
        posted: list[np.ndarray] = []

        def Irecv(self, buf, source, tag, kind):  # noqa: N802 (MPI name)
            self.posted.append(buf)

    comm = Posting()
    group.post(comm)

    def arrive(msg):
        comm.posted[-1][: len(msg)] = msg  # the message lands where the receive was posted
        Central._ingest([group], learner, RowBuilder(wire))
        group.post(comm)  # the next receive, into the buffer not holding the kept observations
        rows, ((count, source, lag),) = learner.ingested[-1]
        assert count == len(rows)
        return rows, source, lag

    assert arrive(wire.first(actor.obs))[0].shape[0] == 0  # a first message: observations only
    ends = 0
    for step in range(7):  # episodes of 3 steps: two steps end every episode at once
        acted_on = actor.obs.copy()
        out = algo.act_tensor(algo.obs_tensor(acted_on), True).numpy()
        actions, extras = algo.finish_act(out, 0, True)
        group.extras, group.version = extras, 0
        group.out = out if forced == "output" else None  # None: the learner acted on the host
        learner.updates = step  # learner updates since it acted: the recorded policy lag
        taken, taken_extras = actions, extras
        if forced:  # the environment took another action than the learner sent (FIRE in Atari)
            taken = actions.copy()
            taken[1, 0] = 1 - actions[1, 0]
            taken_extras = algo.extras_for(acted_on, taken)
        rows, _ = actor.step(taken, taken_extras)  # what an actor acting for itself packs
        msg = wire.pack(rows, actor.obs, actions)
        assert msg.shape == (3 + 3 * int(wire.ended(rows, layout.slices).any()), wire.width)
        got, source, lag = arrive(msg)
        assert source == 2 and lag == step
        if forced:  # the learner recomputed the log-probability of the action taken
            assert msg[1, wire.slices["forced"]][0] == 1 and msg[[0, 2], wire.slices["forced"]].sum() == 0
            log_prob = layout.slices["log_prob"]
            assert extras[1, 0] != pytest.approx(taken_extras[1, 0])
            assert got[1, log_prob][0] == pytest.approx(taken_extras[1, 0], abs=1e-6)
            got[1, log_prob] = rows[1, log_prob]  # (one row's forward pass may round differently)
        assert np.array_equal(got.view(np.uint32), rows.view(np.uint32))  # every bit, NaN slots too
        ends += int(wire.ended(rows, layout.slices).sum())
    assert ends == 6 and np.isnan(got[:, layout.slices["obs"]]).any()


def test_groups_arriving_together_are_rebuilt_in_one_array_bit_for_bit():
    """Three groups of 3, 2 and 3 environments (episodes of 3, 2 and 4 steps: ends in different
    groups at different steps) arrive at every step together; one ingest builds all their rows in
    one array (:class:`RowBuilder`): exactly the rows their actors pack, group after group, the
    forced action of the middle group's second environment with its own log-probability."""
    spec = env_spec(make_env(IMAGE, episode_steps=3, noise=255))
    cfg = group_config("algo", "ppo")
    cfg.hidden = [16]
    algo = PPO(spec, cfg, seed=0)
    wire, layout, learner = StepWire(algo.layout), algo.layout, Taking(algo)
    sizes, lengths = (3, 2, 3), (3, 2, 4)
    actors = [Actor([make_env(IMAGE, episode_steps=k, noise=255) for _ in range(n)], algo,
                    stream_base=10 * i, seed=i) for i, (n, k) in enumerate(zip(sizes, lengths))]
    groups = [Group(source=i + 1, index=0, n_envs=n, stream_base=10 * i, wire=wire)
              for i, n in enumerate(sizes)]

    class Posting:
        def Irecv(self, buf, source, tag, kind):  # noqa: N802 (MPI name)
            self.buf = buf

    comm, builder, posted = Posting(), RowBuilder(wire), []
    for group in groups:
        group.post(comm)
        posted.append(comm.buf)

    def arrive(msgs):
        for buf, msg in zip(posted, msgs):
            buf[: len(msg)] = msg
        Central._ingest(groups, learner, builder)
        posted.clear()
        for group in groups:
            group.post(comm)
            posted.append(comm.buf)
        return learner.ingested[-1]

    rows, parts = arrive([wire.first(actor.obs) for actor in actors])
    assert rows.shape[0] == 0 and [count for count, _, _ in parts] == [0, 0, 0]
    ends = forced_seen = 0
    for step in range(6):
        expected, msgs = [], []
        for i, (group, actor) in enumerate(zip(groups, actors)):
            acted_on = actor.obs.copy()
            out = algo.act_tensor(algo.obs_tensor(acted_on), True).numpy()
            actions, extras = algo.finish_act(out, 0, True)
            group.extras, group.out, group.version = extras, None, 0
            taken, taken_extras = actions, extras
            if i == 1 and step % 2:  # the environment took another action than the one sent
                taken = actions.copy()
                taken[1, 0] = 1 - actions[1, 0]
                taken_extras = algo.extras_for(acted_on, taken)
                forced_seen += 1
            packed, _ = actor.step(taken, taken_extras)
            expected.append(packed)
            msgs.append(wire.pack(packed, actor.obs, actions))
            ends += int(wire.ended(packed, layout.slices).sum())
        got, parts = arrive(msgs)
        want = np.concatenate(expected)
        assert [(count, source) for count, source, _ in parts] == [(3, 1), (2, 2), (3, 3)]
        log_prob = layout.slices["log_prob"]
        assert np.allclose(got[:, log_prob], want[:, log_prob], atol=1e-6)
        got[:, log_prob] = want[:, log_prob]  # (one row's forward pass may round differently)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # every bit, NaN slots too
    assert ends == 3 * 2 + 2 * 3 + 3 * 1 and forced_seen == 3  # episodes ended in every group


def test_padded_buckets_and_the_eager_forward_on_the_cpu():
    """Batch sizes pad to 8, then to four sizes an octave (one CUDA graph each on a GPU learner):
    a serve of 33 rows computes 40, not 64; on the CPU the forward pass runs as it is, giving what
    the algorithm's own act gives."""
    import torch

    from drlmpi.algos.dqn import DQN
    from drlmpi.device.forward import CapturedForward

    sizes = (1, 8, 9, 16, 17, 32, 33, 41, 64, 65, 100, 128, 129, 240)
    assert [CapturedForward.bucket(n) for n in sizes] == [8, 8, 16, 16, 24, 32, 40, 48, 64, 80, 112, 128,
                                                          160, 256]
    assert all(n <= CapturedForward.bucket(n) < 1.25 * n for n in range(33, 2049))  # padding < 1/4
    assert len({CapturedForward.bucket(n) for n in range(1, 121)}) == 12  # central's 120 rows: 12 graphs
    spec = env_spec(make_env("CartPole-v1"))
    algo = DQN(spec, group_config("algo", "dqn"), seed=0)
    forward = CapturedForward(lambda x: algo.act_tensor(x, True), (4,), torch.float32, algo.device, 64,
                              "graph", "dqn act")
    assert forward.mode == "off"  # a CPU learner: nothing to capture
    assert forward.sizes() == sorted({CapturedForward.bucket(n) for n in range(1, 65)})
    assert forward.prepare() == 0 and not forward.slots  # nothing captured ahead either
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    assert np.array_equal(algo.finish_act(forward(obs), 10**9, False)[0], algo.act(obs, 10**9, False)[0])


class Replying:
    """A communicator that records each reply as it was sent (the buffer is reused)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, np.ndarray]] = []

    def Isend(self, buf, dest, tag, kind):  # noqa: N802 (MPI name)
        self.sent.append((dest, tag, buf.copy()))
        return len(self.sent)

    def wait(self, request) -> None:
        pass


def test_one_serve_answers_each_group_with_the_actions_of_its_own_observations():
    """Three groups of 2, 3 and 1 environments (two simulators) arrive together; ``Central._serve``
    acts on them in ONE batched forward pass and slices the actions back. Each group's reply must
    be ``algo.act`` of its own observations, and what it keeps (the forward output, the policy
    version) its own part. The observations are picked so each group's greedy actions differ from
    its neighbours' (0 1 | 1 1 0 | 1): swapped slices, or offsets off by one, give another group's
    actions."""
    import torch

    from drlmpi.algos.dqn import DQN

    cfg = group_config("algo", "dqn")
    cfg.eps_end, cfg.hidden = 0.0, [16]  # greedy after exploration: actions depend on observations only
    algo = DQN(env_spec(make_env("CartPole-v1")), cfg, seed=0)
    steps = 10**6
    candidates = np.random.default_rng(3).normal(scale=3.0, size=(64, 4)).astype(np.float32)
    greedy = algo.act(candidates, steps, explore=True)[0][:, 0]
    by_action = {a: list(candidates[greedy == a]) for a in (0, 1)}
    wanted = ([0, 1], [1, 1, 0], [1])
    wire = StepWire(algo.layout)
    groups = [Group(source, index, len(actions), 0, wire)
              for (source, index), actions in zip([(1, 0), (1, 1), (2, 0)], wanted)]
    for group, actions in zip(groups, wanted):
        group.obs = np.stack([by_action[a].pop() for a in actions])
    learner = Taking(algo)
    learner.env_steps, learner.updates = steps, 7
    comm, stats = Replying(), {"serves": 0, "rows_served": 0, "inference_s": 0.0}
    Central._serve(comm, groups, learner, learner.acting_for_simulators(8), stats)

    assert stats["serves"] == 1 and stats["rows_served"] == 6
    assert [(dest, tag) for dest, tag, _ in comm.sent] == [
        (g.source, int(Tag.ACTIONS) + g.index) for g in groups]
    for group, actions, (_, _, reply) in zip(groups, wanted, comm.sent):
        own = algo.act(group.obs, steps, explore=True)[0]
        assert reply[0] == 0.0  # not the stop flag
        assert np.array_equal(reply[1:], own.reshape(-1)) and own[:, 0].tolist() == actions
        assert torch.equal(torch.as_tensor(group.out), algo.act_tensor(torch.as_tensor(group.obs), True))
        assert group.version == 7 and group.extras is None


def test_a_launched_serve_answers_with_the_policy_it_was_launched_with():
    """Central's learner launches a serve's forward pass and takes in the next arrivals while the
    device runs it (``Central._launch``, later ``_answer``): nothing is sent at the launch, and
    the answer carries the actions of the policy at the launch and its version, though the
    learner's weights and update count moved on in between (updates queued meanwhile)."""
    import torch

    from drlmpi.algos.dqn import DQN

    cfg = group_config("algo", "dqn")
    cfg.eps_end, cfg.hidden = 0.0, [16]
    algo = DQN(env_spec(make_env("CartPole-v1")), cfg, seed=0)
    steps, wire = 10**6, StepWire(algo.layout)
    groups = [Group(1, index, 4, 0, wire) for index in range(2)]
    rng = np.random.default_rng(5)
    for group in groups:
        group.obs = rng.normal(scale=3.0, size=(4, 4)).astype(np.float32)
    learner, comm = Taking(algo), Replying()
    learner.env_steps, learner.updates = steps, 3
    stats = {"serves": 0, "rows_served": 0, "inference_s": 0.0}
    before = [algo.act(group.obs, steps, explore=True)[0] for group in groups]
    acting = learner.acting_for_simulators(8)
    serving = Central._launch(groups, [0, 1], learner, acting, stats)
    assert comm.sent == [] and stats["serves"] == 1 and stats["rows_served"] == 8
    with torch.no_grad():  # an update between the launch and the answer
        for p in algo.q.parameters():
            p.neg_()
    learner.updates = 8
    assert any(not np.array_equal(algo.act(g.obs, steps, explore=True)[0], b) for g, b in zip(groups, before))
    Central._answer(comm, serving, acting, stats)
    assert [(dest, tag) for dest, tag, _ in comm.sent] == [(1, int(Tag.ACTIONS) + g.index) for g in groups]
    for group, own, (_, _, reply) in zip(groups, before, comm.sent):
        assert np.array_equal(reply[1:], own.reshape(-1)) and group.version == 3


def test_a_learner_acting_for_simulators_trains_a_few_updates_between_serves():
    """Central's learner and each group's learner of groups[central] run at most
    ``updates_per_serve`` of the owed updates before serving again - so a PPO rollout's 60 updates
    do not stall the simulators for all of them - and every owed update once they pass the limit."""
    from drlmpi.topologies.central import updates_now

    assert [updates_now(owed, 8, 120) for owed in (0, 5, 8, 60, 120, 121, 500)] == [0, 5, 8, 8, 8, 121, 500]


class BusyLearner:
    """A learner as a simulator meets it, when step messages exceed MPI's eager limit: it takes a
    message (the send completes) only inside its own MPI calls, here while the simulator waits in
    ``Recv`` for some group's actions - between them it serves, stores rows and queues updates.
    A blocking ``Send`` would wait out that work (here: an error). Each group is answered
    once its latest message is taken; after ``rounds`` step messages of a group, with the stop."""

    def __init__(self, groups: int, rounds: int) -> None:
        self.rounds, self.pending, self.events = rounds, [], []
        self.taken = [0] * groups
        self.answered = [0] * groups

    def Isend(self, buf, dest, tag, kind):  # noqa: N802 (MPI name)
        request = {"group": tag - int(Tag.OBSERVATIONS), "taken": False}
        self.pending.append(request)
        self.events.append(("sent", request["group"]))
        return request

    def Send(self, buf, dest, tag, kind):  # noqa: N802
        raise AssertionError("a blocking Send: the simulator waits until the learner next calls MPI")

    def wait(self, request) -> None:
        assert request["taken"], "the simulator waited for a message the learner had not taken yet"

    def test(self, request) -> bool:
        return request["taken"]  # busy: it takes messages only in the simulator's Recv

    def Recv(self, buf, source, tag, kind):  # noqa: N802
        group = tag - int(Tag.ACTIONS)
        for request in self.pending:
            request["taken"] = True
            self.taken[request["group"]] += 1
        self.pending = []
        assert self.taken[group] > self.answered[group], "actions asked for before the group's message"
        self.answered[group] += 1
        buf[:] = 0.0
        buf[0] = float(self.answered[group] > self.rounds)  # the stop flag
        self.events.append(("answered", group))


class StepCounting:
    """A group's actor: CartPole-shaped observations, rows of zeros, its steps counted."""

    def __init__(self, layout, n_envs: int) -> None:
        self.layout, self.n_envs, self.steps = layout, n_envs, 0
        self.obs = np.zeros((n_envs, 4), dtype=np.float32)

    def step_served(self, actions):
        assert actions.shape == (self.n_envs, self.layout.action_dim)
        self.steps += self.n_envs
        return np.zeros((self.n_envs, self.layout.width), dtype=np.float32), None


def test_a_simulator_steps_its_next_group_while_the_learner_has_not_taken_the_last_message():
    """Two groups, 5 step messages each, against a learner that takes messages only while the
    simulator waits for actions: the simulator sends each message and goes on to its other
    group at once (never a blocking send, never a wait on a message not yet taken), every
    message reaches the learner once, and each group stepped its 5 times."""
    from drlmpi.algos.dqn import DQN

    layout = DQN(env_spec(make_env("CartPole-v1")), group_config("algo", "dqn"), seed=0).layout
    actors = [StepCounting(layout, 3), StepCounting(layout, 2)]
    learner = BusyLearner(groups=2, rounds=5)
    assert step_groups(learner, actors, StepWire(layout)) >= 0.0
    assert [a.steps for a in actors] == [15, 10]
    assert learner.taken == [6, 6] and learner.pending == []  # the first message and 5 step messages
    # after each step message of a group, the next thing is the OTHER group's actions
    events = learner.events
    step_messages = [i for i, (what, _) in enumerate(events) if what == "sent"][2:]
    assert len(step_messages) == 10
    assert all(events[i + 1] == ("answered", 1 - events[i][1]) for i in step_messages)


class WaitingLearner(BusyLearner):
    """A learner waiting for step messages: it takes a message as soon as the simulator's MPI
    calls move it (here: the simulator's first test of the send), as an MPI whose large
    transfers progress only inside the sender's calls would."""

    def test(self, request) -> bool:
        if not request["taken"]:
            request["taken"] = True
            self.taken[request["group"]] += 1
            self.pending.remove(request)
            self.events.append(("taken", request["group"]))
        return True


def test_a_simulator_moves_its_message_to_a_waiting_learner_before_stepping_on():
    """Against a learner that takes a message as soon as the simulator's MPI calls move it, each
    step message is taken before the simulator steps its other group (the bounded test after the
    ``Isend``), not held until its next MPI call; against a busy one (above) the test gives up."""
    from drlmpi.algos.dqn import DQN

    layout = DQN(env_spec(make_env("CartPole-v1")), group_config("algo", "dqn"), seed=0).layout
    actors = [StepCounting(layout, 3), StepCounting(layout, 2)]
    learner = WaitingLearner(groups=2, rounds=5)
    step_groups(learner, actors, StepWire(layout))
    assert [a.steps for a in actors] == [15, 10] and learner.taken == [6, 6]
    events = learner.events
    sent = [i for i, (what, _) in enumerate(events) if what == "sent"]
    assert len(sent) == 12 and all(events[i + 1] == ("taken", events[i][1]) for i in sent)


def test_a_simulator_on_a_host_with_more_ranks_than_cores_does_not_spin_on_its_send(monkeypatch):
    """More ranks than cores (the launcher's ``PMI_SIZE``): testing the send would spin on the
    core the learner needs, so the simulator leaves each message to its next MPI call, and every
    message still reaches the learner once."""
    from drlmpi.algos.dqn import DQN
    from drlmpi.job_control.process import oversubscribed, usable_cpus

    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PMI_SIZE", str(len(usable_cpus())))
    assert not oversubscribed()
    monkeypatch.setenv("PMI_SIZE", str(len(usable_cpus()) + 1))
    assert oversubscribed()
    layout = DQN(env_spec(make_env("CartPole-v1")), group_config("algo", "dqn"), seed=0).layout
    actors = [StepCounting(layout, 3), StepCounting(layout, 2)]
    learner = WaitingLearner(groups=2, rounds=5)
    step_groups(learner, actors, StepWire(layout))
    assert [a.steps for a in actors] == [15, 10] and learner.taken == [6, 6]
    assert not any(what == "taken" for what, _ in learner.events)  # never tested: taken in Recv


def test_a_learner_serves_from_captured_passes_whatever_captures_its_update(monkeypatch):
    """The serve's forward pass is replayed from CUDA graphs under every ``algo.capture`` but
    ``off``: with a compiled update (``compile``) an eager pass of a CNN would launch its kernels
    one by one at every serve."""
    from drlmpi.algos.dqn import DQN
    from drlmpi.roles import learner as learner_module

    algo = DQN(env_spec(make_env("CartPole-v1")), group_config("algo", "dqn"), seed=0)
    modes = []
    monkeypatch.setattr(learner_module, "Acting", lambda algo, rows, mode, **kw: modes.append(mode))
    for capture in ("graph", "fused", "compile", "off"):
        algo.capture = capture
        learner_module.simulator_acting(algo, 8)
    assert modes == ["graph", "graph", "graph", "off"]


def test_acting_beside_updates_acts_from_the_copy_last_refreshed():
    """``topology.overlap`` (drlmpi/device/acting.py): the learner acts from a copy of its
    policy, which follows the learning network only when refreshed (on the CPU, published by the
    next call); a serve records the copy's update count as the version that acted, and the
    algorithm's own network is in place again after each pass."""
    import torch

    from drlmpi.device.acting import Acting

    spec = env_spec(make_env(IMAGE, episode_steps=3, noise=255))
    cfg = group_config("algo", "ppo")
    cfg.hidden = [16]
    algo = PPO(spec, cfg, seed=0)
    obs = np.stack([make_env(IMAGE, episode_steps=3, noise=255).reset(seed=s)[0] for s in range(5)])
    net = algo.net

    def logits() -> np.ndarray:  # the log-probabilities of every action: no sampling in them
        return algo.act_tensor(algo.obs_tensor(obs), True).numpy()[:, 2:]

    acting = Acting(algo, 8, "off", beside_updates=True)
    before = logits()
    assert np.array_equal(acting(obs, 0)[2][:, 2:], before) and acting.published_at == 0
    with torch.no_grad():  # an update: the learning network moves, the acting copy does not
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    algo.updates = 5
    after = logits()
    assert not np.allclose(after, before)
    assert np.array_equal(acting(obs, 0)[2][:, 2:], before) and acting.published_at == 0
    acting.refresh()
    assert np.allclose(acting(obs, 0)[2][:, 2:], after) and acting.published_at == 5
    assert algo.net is net and np.array_equal(logits(), after)

    groups = [Group(1, 0, 5, 0, StepWire(algo.layout))]
    groups[0].obs = obs
    learner = Taking(algo)
    learner.updates, learner.env_steps = 9, 0  # the learner's latest: the copy that acted has seen 5
    stats = {"serves": 0, "rows_served": 0, "inference_s": 0.0}
    Central._serve(Replying(), groups, learner, acting, stats)
    assert groups[0].version == 5 and np.allclose(groups[0].out[:, 2:], after)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_on_a_device_acting_beside_queued_updates_sees_only_refreshed_copies(monkeypatch):
    """On CUDA: updates queued on the default stream do not hold up a pass on the acting stream,
    a refresh is published once its copy is done, and rows copied to the device on the copy
    stream are what a kernel queued behind the updates reads."""
    import torch

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # eager and captured passes alike

    from drlmpi.device.acting import Acting
    from drlmpi.device.staging import Staging

    spec = env_spec(make_env(IMAGE, episode_steps=3, noise=255))
    cfg = group_config("algo", "ppo")
    cfg.hidden = [16]
    algo = PPO(spec, cfg, device="cuda", seed=0)
    obs = np.stack([make_env(IMAGE, episode_steps=3, noise=255).reset(seed=s)[0] for s in range(5)])
    acting = Acting(algo, 8, "graph", beside_updates=True)
    acting.refresh()  # a kernel's first launch may wait for the device (lazy loading): launch each once
    with torch.no_grad():
        for p in algo.net.parameters():
            p.mul_(1.0).add_(0.0)
    torch.cuda.synchronize()
    before = acting(obs, 0)[2][:, 2:]
    torch.cuda._sleep(2_000_000_000)  # about a second of work on the default stream, as queued updates are
    with torch.no_grad():  # an update queued behind it (no random draw: one may wait for the device)
        for p in algo.net.parameters():
            p.mul_(-1.5).add_(0.01)
    algo.updates = 3
    acting.refresh()  # queued behind the long work
    assert np.array_equal(acting(obs, 0)[2][:, 2:], before) and acting.published_at == 0
    rows = np.random.default_rng(0).normal(size=(7, 11)).astype(np.float32)
    staging = Staging(11, torch.device("cuda"))
    on_device = staging.to_device(rows)
    total = (on_device * 1).sum()  # queued behind the long work and the copy
    torch.cuda.synchronize()
    assert total.item() == pytest.approx(float(rows.sum()), rel=1e-5)
    after = algo.act_tensor(algo.obs_tensor(obs), True).cpu().numpy()[:, 2:]
    assert np.abs(after - before).max() > 1e-2
    assert np.allclose(acting(obs, 0)[2][:, 2:], after, rtol=1e-4, atol=1e-4) and acting.published_at == 3


def test_a_queued_refresh_is_not_replaced_by_a_later_one():
    """While a refresh's copy is still queued behind updates, a later refresh leaves it standing
    (a later copy would finish later still: with updates queued without pause the acting copy
    was never published); once it is done the next poll publishes it, and the next refresh
    queues the latest parameters."""
    from drlmpi.device.acting import Acting

    class Event:
        def __init__(self) -> None:
            self.done = False

        def query(self) -> bool:
            return self.done

    spec = env_spec(make_env(IMAGE, episode_steps=3, noise=255))
    cfg = group_config("algo", "ppo")
    cfg.hidden = [16]
    algo = PPO(spec, cfg, seed=0)
    obs = np.stack([make_env(IMAGE, episode_steps=3, noise=255).reset(seed=s)[0] for s in range(2)])
    acting = Acting(algo, 8, "off", beside_updates=True)
    queued = Event()
    acting._pending = (1, queued, 3)  # a refresh after 3 updates, its copy not done
    algo.updates = 7
    acting.refresh()
    assert acting._pending == (1, queued, 3)
    acting(obs, 0)
    assert acting.published_at == 0  # still the first copy
    queued.done = True
    acting(obs, 0)
    assert acting.published_at == 3
    acting.refresh()  # nothing pending: the latest parameters into the other copy
    acting(obs, 0)
    assert acting.published_at == 7


def test_acting_passes_are_captured_before_the_training_clock_starts(monkeypatch):
    """A central learner's acting passes are captured at every serve size before training starts:
    the seconds that takes are start-up, off the training clock (a GPU learner captures a dozen
    graphs there; here a prepare that takes 0.3 s stands for them)."""
    import time

    import drlmpi.roles.learner as learner_module

    class Slow:
        prepared = 0

        def prepare(self):
            time.sleep(0.3)
            Slow.prepared += 1
            return 12

    monkeypatch.setattr(learner_module, "simulator_acting", lambda algo, rows, beside=False: Slow())
    from drlmpi.algos.dqn import DQN

    taking = Taking(DQN(env_spec(make_env("CartPole-v1")), group_config("algo", "dqn"), seed=0))
    assert isinstance(taking.acting_for_simulators(64), Slow) and Slow.prepared == 1
    assert taking.clock.startup_s >= 0.3 and taking.clock.elapsed() < 0.3  # (on the clock: >= 0.3)
