"""TD3: the target (twin minimum, clipped smoothing noise), the delayed actor, exploration, and a
short learning run on Pendulum-v1 driven through drlmpi.roles without MPI."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from drlmpi.algos.td3 import TD3
from drlmpi.config.errors import ConfigError
from drlmpi.config.schema import defaults, group_config
from drlmpi.envs.make import make_env, probe_spec
from drlmpi.roles.actor import Actor
from drlmpi.roles.evaluate import evaluate
from drlmpi.roles.learner import Learner
from tests.exchanges import Recording


def td3_cfg(**overrides):
    cfg = group_config("algo", "td3")
    cfg.hidden = [32, 32]
    cfg.batch_size = 16
    cfg.buffer_size = 1000
    cfg.learning_starts = 0
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def random_rows(algo: TD3, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = algo.layout.empty(n)
    layout = algo.layout
    layout.column(rows, "obs")[:] = rng.normal(size=(n, algo.spec.obs_dim))
    layout.column(rows, "next_obs")[:] = rng.normal(size=(n, algo.spec.obs_dim))
    layout.column(rows, "action")[:] = rng.uniform(algo.low, algo.high, size=(n, algo.spec.action_dim))
    layout.column(rows, "reward")[:] = rng.normal(size=(n, 1))
    layout.column(rows, "terminated")[:] = (rng.random((n, 1)) < 0.1)
    return rows


class ConstantTwin(nn.Module):
    """A stand-in target critic returning fixed Q-values and recording the actions it saw."""

    def __init__(self, q1: float, q2: float):
        super().__init__()
        self.q1, self.q2 = q1, q2
        self.seen: list[torch.Tensor] = []

    def forward(self, obs, action):
        self.seen.append(action.clone())
        n = obs.shape[0]
        return torch.full((n,), self.q1), torch.full((n,), self.q2)


def test_check_spec_refuses_discrete_in_one_line():
    with pytest.raises(ConfigError) as info:
        TD3.check_spec(probe_spec("CartPole-v1"))
    message = str(info.value)
    assert "\n" not in message
    assert "algo=td3" in message and "CartPole-v1" in message
    assert "algo=ppo" in message and "env=pendulum" in message


def test_target_uses_minimum_of_twin_critics(pendulum):
    algo = TD3(pendulum, td3_cfg(gamma=0.9))
    algo.critic_target = ConstantTwin(5.0, 2.0)
    reward = torch.tensor([1.0, 1.0, -1.0])
    terminated = torch.tensor([0.0, 1.0, 0.0])
    next_obs = torch.zeros(3, pendulum.obs_dim)
    target = algo.target_q(reward, next_obs, terminated, eps=torch.zeros(3, 1))
    assert torch.allclose(target, torch.tensor([1.0 + 0.9 * 2.0, 1.0, -1.0 + 0.9 * 2.0]))
    algo.critic_target = ConstantTwin(-3.0, 4.0)
    target = algo.target_q(reward, next_obs, terminated, eps=torch.zeros(3, 1))
    assert torch.allclose(target, torch.tensor([1.0 - 0.9 * 3.0, 1.0, -1.0 - 0.9 * 3.0]))


def test_smoothing_noise_is_clipped_and_target_action_stays_in_bounds(pendulum):
    algo = TD3(pendulum, td3_cfg(policy_noise=10.0, noise_clip=0.5))
    half = float(algo.half_range[0])  # Pendulum: torque in [-2, 2]
    noise = algo.smoothing_noise(torch.randn(5000, 1))
    assert noise.abs().max() <= 0.5 * half + 1e-6
    assert (noise.abs() > 0.5 * half - 1e-6).float().mean() > 0.9  # std 10 >> clip: mostly at the clip
    small = TD3(pendulum, td3_cfg(policy_noise=0.2, noise_clip=0.5)).smoothing_noise(torch.randn(20000, 1))
    assert abs(float(small.std()) - 0.2 * half) < 0.02  # scaled by the half action range
    stub = ConstantTwin(0.0, 0.0)
    algo.critic_target = stub
    with torch.no_grad():  # push the target actor to the upper bound so noise would leave it
        algo.actor_target.net[-2].bias.fill_(10.0)
    algo.target_q(torch.zeros(500), torch.zeros(500, pendulum.obs_dim), torch.zeros(500), torch.randn(500, 1))
    seen = stub.seen[-1]
    assert float(seen.max()) <= 2.0 and float(seen.min()) >= -2.0
    assert float(seen.min()) >= 2.0 - 0.5 * half - 1e-5


def test_actor_and_targets_update_only_every_policy_delay(pendulum):
    algo = TD3(pendulum, td3_cfg(policy_delay=3))
    assert not algo.ready_to_update()
    algo.observe(random_rows(algo, 200))
    assert algo.ready_to_update()
    exchange = Recording()
    actor_changed, target_changed, critic_changed = [], [], []
    for _ in range(7):
        actor_before = algo.actor.net[0].weight.detach().clone()
        target_before = algo.actor_target.net[0].weight.detach().clone()
        critic_before = algo.groups["critic"].flat.params.clone()
        algo.update(exchange)
        actor_changed.append(not torch.equal(actor_before, algo.actor.net[0].weight))
        target_changed.append(not torch.equal(target_before, algo.actor_target.net[0].weight))
        critic_changed.append(not torch.equal(critic_before, algo.groups["critic"].flat.params))
    assert algo.updates == 7
    assert actor_changed == [False, False, True, False, False, True, False]
    assert target_changed == actor_changed
    assert all(critic_changed)
    assert exchange.calls == ["critic", "critic", "critic", "actor", "critic", "critic", "critic", "actor",
                              "critic"]
    # A parameter server follows sync_schedule to join the same collectives without gradients.
    assert [n for i in range(7) for n in algo.sync_schedule(i)] == exchange.calls


def test_actor_step_leaves_critic_gradients_alone(pendulum):
    algo = TD3(pendulum, td3_cfg(policy_delay=1))
    algo.observe(random_rows(algo, 100))
    critic_grads: dict[str, torch.Tensor] = {}

    def hook(name, group):
        critic_grads[name] = algo.groups["critic"].flat.grads.clone()

    algo.update(Recording(hook))
    assert critic_grads["critic"].abs().sum() > 0
    assert torch.equal(critic_grads["critic"], critic_grads["actor"])


def test_exploration(pendulum):
    algo = TD3(pendulum, td3_cfg(learning_starts=100, exploration_noise=0.1), learner=False)
    assert algo.replay is None and algo.policy.optimizer is None and algo.critic is None
    obs = np.zeros((2000, pendulum.obs_dim), dtype=np.float32)
    random_actions, extras = algo.act(obs, env_steps=50, explore=True)
    assert extras is None and random_actions.shape == (2000, 1) and random_actions.dtype == np.float32
    assert random_actions.min() >= -2.0 and random_actions.max() <= 2.0
    assert random_actions.std() > 1.0  # uniform on [-2, 2]: std 1.15
    greedy, _ = algo.act(obs, env_steps=50, explore=False)
    assert np.allclose(greedy, greedy[0])
    noisy, _ = algo.act(obs, env_steps=500, explore=True)
    assert abs(float((noisy - greedy).std()) - 0.1 * 2.0) < 0.03
    assert np.array_equal(algo.env_action(np.array([3.5], np.float32)), np.array([2.0], np.float32))


def test_state_dict_round_trip_includes_targets(pendulum):
    algo = TD3(pendulum, td3_cfg())
    state = algo.state_dict()
    assert any(k.startswith("actor_target.") for k in state)
    assert any(k.startswith("critic_target.") for k in state)
    assert any(k.startswith("critic.") for k in state)
    other = TD3(pendulum, td3_cfg(), seed=1)
    other.load_state_dict(state)
    assert torch.equal(other.policy.flat.params, algo.policy.flat.params)
    assert torch.equal(other.groups["critic"].flat.params, algo.groups["critic"].flat.params)
    for a, b in zip(other.critic_target.parameters(), algo.critic_target.parameters()):
        assert torch.equal(a, b)
    acting = TD3(pendulum, td3_cfg(), seed=2, learner=False)
    acting.load_state_dict(state)
    assert torch.equal(acting.policy.flat.params, algo.policy.flat.params)


def critics_out(algo, obs, action):
    with torch.no_grad():
        return [torch.stack(algo.critic(obs, action)), torch.stack(algo.critic_target(obs, action)),
                algo.critic(obs, action, q1_only=True)]


def test_stacked_twin_critics_learn_what_separate_critics_learn(pendulum):
    """``algo.twin_critics=stacked`` is the same function from the same start: both critics, their
    targets and the actor agree with the separate critics' update for update (the actor's loss
    reads the first critic, so a swapped or mixed stack shows in the actor too)."""
    runs = [TD3(pendulum, td3_cfg(twin_critics=layout, policy_delay=2, tau=0.1), seed=5)
            for layout in ("separate", "stacked")]
    rows = random_rows(runs[0], 300)
    obs, action = torch.randn(32, pendulum.obs_dim), torch.rand(32, 1) * 4 - 2
    for algo in runs:
        algo.observe(rows)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*(critics_out(a, obs, action) for a in runs)))
    sizes = [sum(p.numel() for p in algo.critic.parameters()) for algo in runs]
    assert sizes[0] == sizes[1]
    for step in range(6):
        metrics = []
        for algo in runs:
            torch.manual_seed(step)  # the smoothing noise
            metrics.append(dict(algo.update()))
        assert metrics[0] == pytest.approx(metrics[1], rel=1e-4, abs=1e-6, nan_ok=True)
    outs = [critics_out(algo, obs, action) for algo in runs]
    assert not torch.allclose(outs[0][0], critics_out(TD3(pendulum, td3_cfg(), seed=5), obs, action)[0])
    for a, b in zip(*outs):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    assert torch.allclose(runs[0].policy.flat.params, runs[1].policy.flat.params, atol=1e-6)
    other = TD3(pendulum, td3_cfg(twin_critics="stacked"), seed=9)
    other.load_state_dict(runs[1].state_dict())
    loaded, saved = critics_out(other, obs, action), critics_out(runs[1], obs, action)
    assert all(torch.equal(a, b) for a, b in zip(loaded, saved))
    with pytest.raises(ConfigError, match="twin_critics"):
        TD3(pendulum, td3_cfg(twin_critics="shared"))


def test_td3_learns_pendulum():
    """A few thousand steps lift the greedy return well above the untrained policy's."""
    torch.set_num_threads(1)
    cfg = td3_cfg(hidden=[64, 64], batch_size=128, buffer_size=20000, learning_starts=1000, tau=0.01)
    spec = probe_spec("Pendulum-v1")
    learner_algo = TD3(spec, cfg, seed=0)
    acting = TD3(spec, cfg, seed=1, learner=False)
    eval_envs = [make_env("Pendulum-v1") for _ in range(5)]
    before = evaluate(learner_algo, eval_envs, 10, seed=123).mean()
    actor = Actor([make_env("Pendulum-v1")], acting, stream_base=0, seed=0)
    run = {**defaults("run"),
           "max_env_steps": 4000, "eval_every": 10**9, "eval_episodes": 10, "stop_on_solve": False}
    learner = Learner(learner_algo, lambda: eval_envs, run, reward_threshold=None)
    acting.policy.flat.load_params(learner_algo.policy.flat.params_numpy())
    while learner.stop_reason() is None:
        actor.set_global_steps(learner.env_steps)
        learner.ingest(actor.collect(200, "steps"), 0)
        learner.train()
        acting.policy.flat.load_params(learner_algo.policy.flat.params_numpy())
    after = evaluate(learner_algo, eval_envs, 10, seed=123).mean()
    assert learner.updates == 3200  # credit starts with the chunk that fills learning_starts
    assert before < -900
    print(f"greedy return before {before:.1f}, after {after:.1f}")
    assert after > -600 and after > before + 500, (before, after)
