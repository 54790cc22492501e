"""PPO: GAE per stream (terminations, truncations, rollout cuts), the clipped surrogate, rollout
accounting, acting, and a short learning run on CartPole-v1 driven through drlmpi.roles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from drlmpi.algos.actor_critic import clipped_surrogate_loss
from drlmpi.algos.advantages import compute_gae
from drlmpi.algos.ppo import PPO
from drlmpi.config.schema import defaults, group_config
from drlmpi.envs.make import make_env, probe_spec
from drlmpi.roles.actor import Actor
from drlmpi.roles.evaluate import evaluate
from drlmpi.roles.learner import Learner
from tests.conftest import CONF
from tests.exchanges import Recording


def ppo_cfg(**overrides):
    cfg = group_config("algo", "ppo")
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def test_gae_hand_computed_with_termination_truncation_and_cut():
    gamma, lam = 0.9, 0.5  # gamma * lambda = 0.45
    # Two streams (ids 7 and 3) interleaved; rows of each stream are in time order.
    #   stream 7: t0 -> t1 (terminated) -> t2 (new episode, last row of stream: cut)
    #   stream 3: t0 (truncated: bootstraps through V(next_obs)) -> t1 (last row: cut)
    streams = np.array([7, 3, 7, 3, 7])
    rewards = np.array([1.0, 0.5, 2.0, 1.0, 0.0])
    values = np.array([0.5, 0.0, 1.0, 2.0, 0.2])
    next_values = np.array([1.0, 1.0, 2.0, 3.0, 0.4])
    terminated = np.array([0, 0, 1, 0, 0])
    truncated = np.array([0, 1, 0, 0, 0])
    # deltas: r + gamma V' (1 - terminated) - V
    d7 = [1.0 + 0.9 * 1.0 - 0.5, 2.0 - 1.0, 0.0 + 0.9 * 0.4 - 0.2]  # 1.4, 1.0, 0.16
    d3 = [0.5 + 0.9 * 1.0 - 0.0, 1.0 + 0.9 * 3.0 - 2.0]             # 1.4, 1.7
    a7_2 = d7[2]                  # cut: last row of the stream in the rollout
    a7_1 = d7[1]                  # terminated: does not see t2
    a7_0 = d7[0] + 0.45 * a7_1    # 1.85
    a3_1 = d3[1]
    a3_0 = d3[0]                  # truncated: recursion cut, bootstrap kept in delta
    expected = np.array([a7_0, a3_0, a7_1, a3_1, a7_2])
    got = compute_gae(rewards, values, next_values, terminated, truncated, streams, gamma, lam)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(expected, [1.85, 1.4, 1.0, 1.7, 0.16], rtol=1e-6)


def reference_gae(rewards, values, next_values, terminated, truncated, streams, gamma, lam):
    out = np.zeros(len(rewards))
    for s in np.unique(streams):
        idx = np.nonzero(streams == s)[0]
        running = 0.0
        for j, i in enumerate(idx[::-1]):
            delta = rewards[i] + gamma * next_values[i] * (1 - terminated[i]) - values[i]
            last = j == 0
            done = terminated[i] or truncated[i]
            running = delta + (0.0 if (last or done) else gamma * lam * running)
            out[i] = running
    return out


def test_gae_matches_reference_on_random_interleavings():
    rng = np.random.default_rng(0)
    n = 400
    streams = rng.integers(0, 6, n)
    args = (rng.normal(size=n), rng.normal(size=n), rng.normal(size=n),
            (rng.random(n) < 0.05).astype(float), (rng.random(n) < 0.03).astype(float), streams)
    got = compute_gae(*args, 0.99, 0.95)
    np.testing.assert_allclose(got, reference_gae(*args, 0.99, 0.95), rtol=1e-5, atol=1e-5)


def test_clipped_surrogate():
    ratio = torch.tensor([0.5, 1.0, 1.5, 0.5, 1.5, 1.1])
    adv = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, 2.0])
    # A > 0: min(r A, clip(r) A) -> 0.5, 1.0, 1.2 ; A < 0: -> -0.8, -1.5 ; inside the clip: 2.2
    expected = -torch.tensor([0.5, 1.0, 1.2, -0.8, -1.5, 2.2]).mean()
    assert torch.allclose(clipped_surrogate_loss(ratio, adv, 0.2), expected)
    # No gradient flows through a clipped term that is the minimum.
    r = torch.tensor([1.5], requires_grad=True)
    clipped_surrogate_loss(r, torch.tensor([1.0]), 0.2).backward()
    assert float(r.grad) == 0.0
    r = torch.tensor([1.5], requires_grad=True)
    clipped_surrogate_loss(r, torch.tensor([-1.0]), 0.2).backward()
    assert float(r.grad) == 1.0


def test_check_spec_accepts_discrete_and_box(cartpole, pendulum):
    PPO.check_spec(cartpole)
    PPO.check_spec(pendulum)
    PPO(cartpole, ppo_cfg())
    PPO(pendulum, ppo_cfg())


def collect_rows(algo: PPO, env_id: str, steps: int, n_envs: int = 2, stream_base: int = 0) -> np.ndarray:
    acting = PPO(algo.spec, algo.cfg, seed=5, learner=False)
    acting.policy.flat.load_params(algo.policy.flat.params_numpy())
    actor = Actor([make_env(env_id) for _ in range(n_envs)], acting, stream_base=stream_base, seed=3)
    return actor.collect(steps, "steps")


def test_rollout_accounting(cartpole):
    algo = PPO(cartpole, ppo_cfg(rollout_steps=100, batch_size=32, epochs=3))
    rows = collect_rows(algo, "CartPole-v1", 30)  # 60 rows per chunk
    algo.observe(rows)
    assert algo.updates_due(60) == 0 and algo.pending_rows == 60 and not algo.ready_to_update()
    assert algo.sync_schedule(0) == ("policy",)
    with pytest.raises(RuntimeError):
        algo.update()
    algo.observe(rows)  # 120 rows >= 100: all 120 join the rollout (nothing carried over)
    assert algo.pending_rows == 0
    due = algo.updates_due(60)
    assert due == 3 * (120 // 32) and algo.ready_to_update()
    algo.observe(rows[:10])  # arrives while the rollout waits: starts the next one
    assert algo.updates_due(10) == 0 and algo.pending_rows == 10
    exchange = Recording()
    rollout = algo.store.current
    for _ in range(due):
        metrics = algo.update(exchange)
        assert set(metrics) >= {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"}
    assert len(rollout.schedule) == due
    assert {len(part) for part in rollout.schedule} == {32}  # one shape: what a capture replays
    per_epoch = due // 3
    for epoch in range(3):  # 3 x 32 distinct rows an epoch, a different random 24 left over
        seen = np.concatenate(rollout.schedule[epoch * per_epoch:(epoch + 1) * per_epoch])
        assert len(np.unique(seen)) == 96 and seen.max() < 120
    used = np.bincount(np.concatenate(rollout.schedule), minlength=120)
    assert used.max() <= 3 and (used > 0).sum() > 96  # the left-over rows differ between epochs
    assert exchange.calls == ["policy"] * due and algo.updates == due
    assert algo.store.current is None and not algo.ready_to_update()  # cleared after the last minibatch
    with pytest.raises(RuntimeError):
        algo.update()


def test_staged_minibatch_is_the_schedules_rows(cartpole):
    """Each update reads the rows its schedule names, gathered into one reused buffer (the
    buffer a captured update replays on): two learners from one state, one updating through
    the staging, the other on minibatches gathered here from the same table and schedule."""
    cfg = ppo_cfg(rollout_steps=100, batch_size=32, epochs=2, lr_schedule="linear")
    staged, by_hand = PPO(cartpole, cfg, seed=3), PPO(cartpole, cfg, seed=3)
    rows = collect_rows(staged, "CartPole-v1", 50)
    for algo in (staged, by_hand):
        algo.observe(rows)
    due = staged.updates_due(100)
    assert due == by_hand.updates_due(100) == 2 * 3
    rollout = by_hand.store.current
    by_hand._start(rollout)
    buffers = set()
    for step in range(due):
        for algo in (staged, by_hand):
            algo.set_progress(step / due)
        got = staged.update()
        buffers.add(staged._staged.data_ptr())
        table = rollout.table[rollout.schedule[step]]
        batch = {name: table[:, cols] if name in ("obs", "action") else table[:, cols.start]
                 for name, cols in rollout.views.items()}
        want = by_hand.update_on(batch)
        assert got["policy_loss"] == pytest.approx(want["policy_loss"], rel=1e-6)
    assert len(buffers) == 1 and staged.store.current is None
    assert staged.policy.lr_value == pytest.approx(cfg.lr * (1 - (due - 1) / due))
    assert staged.policy.optimizer.param_groups[0]["lr"] == pytest.approx(staged.policy.lr_value)
    for a, b in zip(staged.net.parameters(), by_hand.net.parameters()):
        assert torch.equal(a, b)


def test_first_minibatch_ratio_is_one_with_fresh_log_probs(cartpole):
    algo = PPO(cartpole, ppo_cfg(rollout_steps=64, batch_size=64, epochs=1))
    algo.observe(collect_rows(algo, "CartPole-v1", 32))
    assert algo.updates_due(64) == 1
    metrics = algo.update()
    assert abs(metrics["approx_kl"]) < 1e-6 and metrics["clip_fraction"] == 0.0


def test_stale_behaviour_log_prob_is_used(cartpole):
    """Without a correction the ratio uses the stored behaviour log-probability, not the
    learner's current one (test_vtrace.py covers the decoupled objective)."""
    algo = PPO(cartpole, ppo_cfg(rollout_steps=64, batch_size=64, epochs=1, vtrace=False))
    rows = collect_rows(algo, "CartPole-v1", 32)
    rows[:, algo.layout.slices["log_prob"]] -= 1.0  # pretend the behaviour policy was different
    algo.observe(rows)
    algo.updates_due(64)
    metrics = algo.update()
    assert metrics["clip_fraction"] == 1.0  # ratio = e for every row


def test_value_clipping(cartpole):
    """With clip_range_vf the value loss is max(unclipped, clipped around the rollout's V)."""
    n = 8
    batch = {
        "obs": torch.randn(n, cartpole.obs_dim), "action": torch.zeros(n, 1),
        "advantage": torch.randn(n), "return": torch.full((n,), 5.0), "value": torch.full((n,), -5.0),
    }
    losses = {}
    for clip in (None, 0.0):
        algo = PPO(cartpole, ppo_cfg(clip_range_vf=clip))
        with torch.no_grad():
            batch["log_prob"] = algo.net.distribution(batch["obs"]).log_prob(torch.zeros(n))
            current = algo.net.value(batch["obs"])
        losses[clip] = algo.update_on(dict(batch))["value_loss"]
        unclipped = float(((current - 5.0) ** 2).mean())
        expected = unclipped if clip is None else float(
            torch.maximum((current - 5.0) ** 2, torch.full((n,), 100.0)).mean())
        assert losses[clip] == pytest.approx(expected, rel=1e-5)
    assert losses[0.0] > losses[None]


@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_the_clip_follows_its_schedule_into_the_loss(cartpole, schedule):
    """clip_range 0.2, every row's ratio e^0.15 (1.16): inside the clip at the start; halfway
    through a linear schedule the clip is 0.1 and every row is clipped; at the end of the budget
    it is 1% of 0.2. A constant schedule keeps 0.2 throughout."""
    n = 8
    batch = {"obs": torch.randn(n, cartpole.obs_dim), "action": torch.zeros(n, 1),
             "advantage": torch.randn(n), "return": torch.zeros(n), "value": torch.zeros(n)}
    fractions = {}
    for progress in (0.0, 0.5):
        algo = PPO(cartpole, ppo_cfg(clip_range=0.2, clip_schedule=schedule), seed=1)
        algo.set_progress(progress)
        with torch.no_grad():
            batch["log_prob"] = algo.net.distribution(batch["obs"]).log_prob(torch.zeros(n)) - 0.15
        fractions[progress] = algo.update_on(dict(batch))["clip_fraction"]
    assert fractions[0.0] == 0.0
    assert fractions[0.5] == (1.0 if schedule == "linear" else 0.0)
    algo.set_progress(1.0)
    assert float(algo.clip) == pytest.approx(0.002 if schedule == "linear" else 0.2)


def test_act_and_env_action(cartpole, pendulum):
    algo = PPO(cartpole, ppo_cfg(), learner=False)
    obs = np.zeros((500, cartpole.obs_dim), dtype=np.float32)
    actions, log_prob = algo.act(obs, 0, explore=True)
    assert actions.shape == (500, 1) and log_prob.shape == (500, 1) and actions.dtype == np.float32
    assert set(np.unique(actions)) <= {0.0, 1.0}
    with torch.no_grad():
        probs = algo.net.distribution(torch.from_numpy(obs[:1])).probs[0].numpy()
    np.testing.assert_allclose(log_prob[:, 0], np.log(probs[actions[:, 0].astype(int)]), rtol=1e-5)
    assert isinstance(algo.env_action(actions[0]), int)
    greedy, _ = algo.act(obs, 0, explore=False)
    assert (greedy == greedy[0]).all()

    cont = PPO(pendulum, ppo_cfg(log_std_init=1.0), learner=False)
    obs = np.zeros((2000, pendulum.obs_dim), dtype=np.float32)
    raw, log_prob = cont.act(obs, 0, explore=True)
    assert np.abs(raw).max() > 2.0  # raw samples are stored unclipped ...
    assert np.abs(np.stack([cont.env_action(r) for r in raw])).max() <= 2.0  # ... env gets clipped
    assert abs(float(raw.std()) - np.e) < 0.2
    with torch.no_grad():
        mean = float(cont.net.pi(torch.from_numpy(obs[:1]))[0, 0])
    expected = -((raw - mean) ** 2) / (2 * np.e**2) - 1.0 - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(log_prob, expected, rtol=1e-5, atol=1e-5)


def test_state_dict_round_trip(pendulum):
    algo = PPO(pendulum, ppo_cfg(log_std_init=-0.5))
    other = PPO(pendulum, ppo_cfg(), seed=1, learner=False)
    other.load_state_dict(algo.state_dict())
    assert torch.equal(other.policy.flat.params, algo.policy.flat.params)
    assert float(other.net.log_std.detach()[0]) == pytest.approx(-0.5)


def test_ppo_learns_cartpole():
    """The tuned CartPole settings lift the greedy return above 150 (and the untrained one) in 15k steps."""
    torch.set_num_threads(1)
    tuned = OmegaConf.load(CONF / "tuned" / "ppo_cartpole.yaml")
    cfg = OmegaConf.merge(group_config("algo", "ppo"), tuned.algo)
    n_envs, chunk = int(tuned.env.num_envs), int(tuned.topology.sync_every)
    spec = probe_spec("CartPole-v1")
    learner_algo = PPO(spec, cfg, seed=0)
    acting = PPO(spec, cfg, seed=1, learner=False)
    eval_envs = [make_env("CartPole-v1") for _ in range(10)]
    before = evaluate(learner_algo, eval_envs, 10, seed=123).mean()
    actor = Actor([make_env("CartPole-v1") for _ in range(n_envs)], acting, stream_base=0, seed=0)
    run = {**defaults("run"),
           "max_env_steps": 15000, "eval_every": 10**9, "eval_episodes": 10, "stop_on_solve": False}
    learner = Learner(learner_algo, lambda: eval_envs, run, reward_threshold=None)
    acting.policy.flat.load_params(learner_algo.policy.flat.params_numpy())
    while learner.stop_reason() is None:
        actor.set_global_steps(learner.env_steps)
        learner.ingest(actor.collect(chunk, "steps"), 0)
        learner.train()
        acting.policy.flat.load_params(learner_algo.policy.flat.params_numpy())
    after = evaluate(learner_algo, eval_envs, 10, seed=123).mean()
    assert learner.updates == (15000 // 256 + 1) * 20  # one 256-row rollout per chunk, 20 epochs
    print(f"greedy return before {before:.1f}, after {after:.1f}")
    assert after > 150 and after > before + 100, (before, after)


def test_rows_that_follow_their_streams_take_v_next_from_the_next_row(cartpole):
    """Central builds every row itself, each game's in step order (``successive_rows``): a
    rollout then evaluates ``V(next_obs)`` only at the last row of each stream and at truncated
    rows, and its advantages and value targets are those of evaluating every row. Games of 12
    steps at most, so truncations and terminations both occur; checked to fail when truncated
    rows take the next row's value (the reset observation's) instead of their own."""
    cfg = ppo_cfg(rollout_steps=150, batch_size=50, epochs=1)
    full, follow = PPO(cartpole, cfg, seed=0), PPO(cartpole, cfg, seed=0)
    follow.policy.flat.load_params(full.policy.flat.params_numpy())
    follow.successive_rows()
    acting = PPO(cartpole, cfg, seed=5, learner=False)
    envs = [make_env("CartPole-v1", max_episode_steps=12) for _ in range(3)]
    rows = Actor(envs, acting, stream_base=0, seed=3).collect(60, "steps")  # 180 rows
    col = full.layout.slices
    truncated, terminated = rows[:, col["truncated"]][:, 0] > 0, rows[:, col["terminated"]][:, 0] > 0
    assert truncated.any() and terminated.any()
    for algo in (full, follow):
        algo.observe(rows.copy())
        assert algo.updates_due(180) > 0
        algo._start(algo.store.current)
    a, b = full.store.current, follow.store.current
    assert a.boundary_rows is None
    streams = rows[:, col["stream"]][:, 0]
    own = set(np.flatnonzero(truncated)) | {np.flatnonzero(streams == s).max() for s in np.unique(streams)}
    assert b.boundary_rows == len(own) < 180 // 4
    for name in ("advantage", "return", "value"):
        torch.testing.assert_close(b.table[:, b.views[name]], a.table[:, a.views[name]])
    follow.store.load_state({"pending": torch.from_numpy(rows[:10]), "rollouts": [], "ungranted": 0})
    assert follow.store.pending_marks is None  # restored rows end their streams: all are evaluated
