"""The device learner's code paths, run with storage on the CPU (what CI can run).

The same code runs on a GPU; tests/test_capture.py checks the CUDA-only parts there.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from drlmpi.algos.advantages import compute_gae, gae_tensor
from drlmpi.algos.dqn import DQN
from drlmpi.algos.exchange import LOCAL
from drlmpi.algos.ppo import PPO
from drlmpi.algos.td3 import TD3
from drlmpi.bench.learner import random_rows as bench_rows
from drlmpi.config.errors import ConfigError
from drlmpi.config.schema import group_config
from drlmpi.device.capture import CapturedUpdate, resolve_capture
from drlmpi.device.metrics import Metrics
from drlmpi.device.staging import Staging
from tests.exchanges import HostExchange


def cfg_for(name: str, **overrides):
    cfg = group_config("algo", name)
    cfg.hidden = [32, 32]
    if name != "ppo":
        cfg.batch_size = 16
        cfg.buffer_size = 500
        cfg.learning_starts = 0
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def random_rows(algo, n: int, seed: int = 0, identical: bool = False) -> np.ndarray:
    """Random transitions for ``algo`` (20% terminal, 4 streams, no behaviour log-probs)."""
    rows = bench_rows(algo.layout, algo.spec, n, seed, terminal_prob=0.2, streams=4, log_probs=False)
    if identical:  # every row the same: any sampled indices give the same minibatch
        rows[:] = rows[0]
    return rows


def test_dqn_update_equals_a_hand_computed_reference(cartpole):
    """``update()`` (sample on the storage device, learn, clip, Adam, target) against plain
    torch on the same minibatch from the same state."""
    algo = DQN(cartpole, cfg_for("dqn", max_grad_norm=0.5, target_update_every=2), seed=1)
    algo.observe(random_rows(algo, 300))
    q_ref = copy.deepcopy(algo.q)
    target_ref = copy.deepcopy(algo.q_target)
    opt = torch.optim.Adam(q_ref.parameters(), lr=float(algo.cfg.lr))
    for step in range(3):
        algo.prepare_capture()
        state = algo.replay.generator.get_state()
        batch = {k: v.clone() for k, v in algo.next_batch().items()}  # what update() will draw
        algo.replay.generator.set_state(state)
        metrics = algo.update()
        q_taken = q_ref(batch["obs"]).gather(1, batch["action"].long()).squeeze(1)
        with torch.no_grad():
            best = q_ref(batch["next_obs"]).argmax(1, keepdim=True)
            next_q = target_ref(batch["next_obs"]).gather(1, best).squeeze(1)
            y = batch["reward"] + algo.gamma * (1 - batch["terminated"]) * next_q
        loss = F.smooth_l1_loss(q_taken, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(q_ref.parameters(), 0.5, foreach=False)
        opt.step()
        if (step + 1) % 2 == 0:
            target_ref.load_state_dict(q_ref.state_dict())
        assert metrics["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
        for mine, ref in zip(algo.q.parameters(), q_ref.parameters()):
            assert torch.allclose(mine, ref, atol=1e-6)
        for mine, ref in zip(algo.q_target.parameters(), target_ref.parameters()):
            assert torch.allclose(mine, ref, atol=1e-6)


def twin(cls, spec, cfg, capture: str):
    algo = cls(spec, cfg, seed=0)
    algo.capture = capture  # forced: on the CPU a capture attempt falls back (tested below)
    algo.observe(random_rows(algo, 300))
    return algo


@pytest.mark.parametrize("name", ["dqn_polyak", "dqn_copy", "td3"])
def test_capture_path_falls_back_in_one_warning_and_learns_the_same(name, cartpole, pendulum):
    """The captured-update plumbing (a runner per sync schedule, device/host halves of the
    after-update hook, counters) run where capture must fail: one warning, then the same
    parameters as eager updates, online and target networks, update for update."""
    if name == "td3":
        cls, spec, cfg = TD3, pendulum, cfg_for("td3", policy_delay=2, tau=0.1)
    else:
        cls, spec = DQN, cartpole
        cfg = cfg_for("dqn", tau=0.2) if name == "dqn_polyak" else cfg_for("dqn", target_update_every=3)
    eager, captured = twin(cls, spec, cfg, "off"), twin(cls, spec, cfg, "graph")
    torch.manual_seed(5)  # TD3's smoothing noise comes from torch's global generator
    m_eager = [dict(eager.update()) for _ in range(9)]
    torch.manual_seed(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m_captured = [dict(captured.update()) for _ in range(9)]
    for a, b in zip(m_eager, m_captured):
        assert a == pytest.approx(b, nan_ok=True)
    messages = [str(w.message) for w in caught]
    groups = 2 if name == "td3" else 1  # one runner (and one warning) per distinct schedule
    assert len(messages) == groups and all("capture=graph failed" in m for m in messages)
    assert all("\n" not in m for m in messages)
    assert eager.updates == captured.updates == 9
    for key, value in eager.state_dict().items():
        assert torch.equal(value, captured.state_dict()[key]), key
    assert len(captured._captures) == groups and not eager._captures


def test_captured_update_counts_one_body_call_per_update():
    calls = []

    def body(sync):
        assert sync is LOCAL
        calls.append(1)
        return torch.tensor([float(len(calls))])

    runner = CapturedUpdate(body, "graph", torch.device("cpu"), "test", warmup=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [float(runner(LOCAL)[0]) for _ in range(5)]
    assert outs == [1, 2, 3, 4, 5] and len(caught) == 1 and not runner.captured
    assert "CUDA" in runner.failure


def test_capture_option(cartpole):
    assert resolve_capture("auto", torch.device("cpu")) == "off"
    assert resolve_capture("auto", torch.device("cuda")) == "graph"
    with pytest.warns(UserWarning, match="needs a CUDA device"):
        assert DQN(cartpole, cfg_for("dqn", capture="graph")).capture == "off"
    assert DQN(cartpole, cfg_for("dqn", capture="graph"), learner=False).capture == "off"  # silent
    # a value outside the choices is refused by the schema (tests/test_schema.py)


def test_metrics_are_a_lazy_snapshot(pendulum):
    algo = twin(TD3, pendulum, cfg_for("td3", policy_delay=2), "off")
    first, second = algo.update(), algo.update()  # critic only, then critic + actor
    assert isinstance(first, Metrics) and first._floats is None  # nothing converted yet
    assert np.isnan(first["actor_loss"]) and not np.isnan(second["actor_loss"])
    assert set(first) == {"critic_loss", "actor_loss", "q_mean"} and len(first) == 3
    assert isinstance(first["critic_loss"], float)


def test_storage_check_names_size_and_option(cartpole):
    cfg = cfg_for("dqn", buffer_size=1_000_000)
    assert DQN.storage_bytes(cartpole, cfg) == 1_000_000 * 15 * 4
    DQN.check_storage(cartpole, cfg, "cpu", free_bytes=10**9)  # the host's memory on the CPU
    with pytest.raises(ConfigError, match="in the host .*algo.buffer_size=1000000 rows x 60 bytes"):
        DQN.check_storage(cartpole, cfg, "cpu", free_bytes=50 * 10**6)
    DQN.check_storage(cartpole, cfg, "cpu")  # 60 MB fits this machine's available memory
    DQN.check_storage(cartpole, cfg, "cuda:0", free_bytes=10**9)
    with pytest.raises(ConfigError) as info:
        DQN.check_storage(cartpole, cfg, "cuda:0", free_bytes=50 * 10**6)
    message = str(info.value)
    assert "\n" not in message and "algo.buffer_size=1000000" in message and "0.06 GiB" in message
    ppo_cfg = cfg_for("ppo")
    # rows twice (16 columns) + the table: obs, action, log_prob, advantage, return, value, weight
    assert PPO.storage_bytes(cartpole, ppo_cfg) == int(ppo_cfg.rollout_steps) * (2 * 16 + 10) * 4
    with pytest.raises(ConfigError, match="algo.rollout_steps"):
        PPO.check_storage(cartpole, ppo_cfg, "cuda", free_bytes=1000)


def test_gae_scan_matches_the_reference():
    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 1000):
        args = (rng.normal(size=n), rng.normal(size=n), rng.normal(size=n),
                (rng.random(n) < 0.05).astype(float), (rng.random(n) < 0.03).astype(float),
                rng.integers(0, 5, n))
        expected = compute_gae(*args, 0.99, 0.95)
        got = gae_tensor(*[torch.as_tensor(a, dtype=torch.float32) for a in args], 0.99, 0.95)
        assert np.allclose(got.numpy(), expected, atol=1e-5), n


def test_ppo_rollout_lives_on_the_learner_device(cartpole):
    algo = PPO(cartpole, cfg_for("ppo", rollout_steps=64, batch_size=16, epochs=2), seed=0)
    rows = random_rows(algo, 40)
    rows[:, algo.layout.slices["log_prob"]] = np.log(0.5)
    algo.observe(rows)
    assert isinstance(algo.store.pending[0], torch.Tensor) and algo.store.staging.pinned is None
    algo.observe(rows)  # 80 rows >= 64: one rollout of 80 rows, 2 epochs of 5 minibatches
    assert algo.updates_due(80) == 10
    metrics = [algo.update() for _ in range(10)]
    assert all(np.isfinite(m["value_loss"]) for m in metrics) and not algo.ready_to_update()


def test_staging_copies_on_cpu_without_pinning():
    staging = Staging(3, torch.device("cpu"))
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = staging.to_device(rows)
    assert torch.equal(out, torch.from_numpy(rows)) and staging.pinned is None
    assert not np.shares_memory(out.numpy(), rows)


def assert_same_learners(a, b) -> None:
    assert a.updates == b.updates
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.allclose(sa[key], sb[key], atol=1e-6), key


@pytest.mark.parametrize("steps_locally", [True, False], ids=["allreduce_like", "server_like"])
def test_a_failed_segmented_capture_falls_back_with_each_exchange_once(steps_locally, pendulum):
    """A sync with a host exchange makes the capture cut into segments; when the capture fails
    (always, on the CPU) the eager fallback must run each scheduled exchange exactly once and
    learn what an eager learner with the same sync learns. (A capture failing between two
    segments is checked on CUDA: tests/test_capture.py.)"""
    cfg = cfg_for("td3", policy_delay=2, tau=0.1)
    eager, captured = twin(TD3, pendulum, cfg, "off"), twin(TD3, pendulum, cfg, "graph")
    sync_e, sync_c = HostExchange(steps_locally), HostExchange(steps_locally)
    torch.manual_seed(3)
    for _ in range(10):  # each of the two runners: 3 warm-up calls, then the capture attempt
        eager.update(sync_e)
    torch.manual_seed(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(10):
            captured.update(sync_c)
    expected = ["critic", "critic", "actor"] * 5
    assert sync_e.calls == sync_c.calls == expected
    assert len([w for w in caught if "capture=graph failed" in str(w.message)]) == 2
    assert set(captured._captures) == {((("critic",),), True, steps_locally),
                                       ((("critic", "actor"),), True, steps_locally)}
    assert_same_learners(eager, captured)


@pytest.mark.parametrize("name", ["dqn", "td3"])
def test_a_segmented_capture_body_runs_on_the_cut_exchange(name, cartpole, pendulum):
    """What a segmented CUDA capture hands the update body (``_Cut``: each exchange ends a
    segment) is run here on the CPU with a recording runner in place of the graphs: the body
    takes it, cuts at each scheduled network in order, steps locally at each cut, and learns
    what eager updates learn. (On CUDA the capture itself: tests/test_capture.py.)"""
    from drlmpi.device.capture import _Cut

    if name == "dqn":
        cls, spec, cfg = DQN, cartpole, cfg_for("dqn", target_update_every=2)
    else:
        cls, spec, cfg = TD3, pendulum, cfg_for("td3", policy_delay=2, tau=0.1)
    eager, cut = twin(cls, spec, cfg, "off"), twin(cls, spec, cfg, "graph")

    class Runner:  # stands in for CapturedUpdate: records where its segments would end
        cuts: list[str] = []

        def _cut(self, name, group, steps_locally):
            self.cuts.append(name)
            if steps_locally:
                group.apply_gradients()

    runner, expected = Runner(), []
    torch.manual_seed(5)
    for _ in range(4):
        eager.update()
    torch.manual_seed(5)
    for index in range(4):
        schedules = (tuple(cut.sync_schedule(index)),)
        expected += schedules[0]
        cut.update_number.fill_(index)
        cut._runner(schedules, HostExchange(True)).body(_Cut(runner, steps_locally=True))
        cut.updates += 1
    assert runner.cuts == expected and len(expected) >= 4
    assert_same_learners(eager, cut)


@pytest.mark.parametrize("name", ["dqn", "td3"])
def test_updates_per_graph_blocks_learn_what_single_updates_learn(name, cartpole, pendulum):
    """``run_updates(7)`` with ``updates_per_graph=3``: two 3-update bodies and one single
    update (the capture falls back on the CPU, so the same bodies run eagerly), with the hard
    target copy (every 2 updates) and TD3's delayed actor falling inside the blocks."""
    if name == "dqn":
        cls, spec, cfg = DQN, cartpole, cfg_for("dqn", target_update_every=2)
    else:
        cls, spec, cfg = TD3, pendulum, cfg_for("td3", policy_delay=2, tau=0.1)
    single = twin(cls, spec, cfg, "off")
    blocked = twin(cls, spec, cfg.copy(), "graph")
    blocked.updates_per_graph = 3
    torch.manual_seed(4)
    last = single.run_updates(7)
    torch.manual_seed(4)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        last_blocked = blocked.run_updates(7)
    assert_same_learners(single, blocked)
    assert dict(last) == pytest.approx(dict(last_blocked), nan_ok=True)
    assert {len(schedules) for schedules, *_ in blocked._captures} == {3, 1}
    if name == "dqn":  # the blocks' hard copies happened: the target is the update-6 network
        assert not torch.equal(blocked._target_flat, blocked.policy.flat.params)
        assert int(blocked.update_number) == 7


def test_dqn_hard_copy_follows_the_device_update_number(cartpole):
    algo = DQN(cartpole, cfg_for("dqn", target_update_every=3), seed=0)
    algo.observe(random_rows(algo, 300))
    start = algo._target_flat.clone()
    algo.update()
    algo.update()
    assert torch.equal(algo._target_flat, start)
    algo.update()
    assert torch.equal(algo._target_flat, algo.policy.flat.params)
    algo.update()
    assert not torch.equal(algo._target_flat, algo.policy.flat.params)
