"""Atari preprocessing (drlmpi/atari.py): the wrappers on a scripted ALE-like environment, the
resize against references computed another way, the options check, and a smoke test on real ALE."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from drlmpi.envs.atari import (
    ATARI_DEFAULTS,
    EpisodicLife,
    FireReset,
    check_atari_options,
    make_atari,
    preprocess,
)
from drlmpi.envs.frames import FrameStack, MaxAndSkip, NoopReset, ResizeFrame, area_weights
from drlmpi.envs.spec import RAW_EPISODE_KEY


class FakeAle(gym.Env):
    """Frame-level stand-in for an ALE game: frame t (frames since reset) is filled with
    ``value(t)``, except pixel (0, 1) = 255 - value(t) (so a max-pool of two frames differs from
    both); ``rewards[t]`` on frame t; one life lost on each frame of ``life_losses``; game over at
    frame ``game_len``. Records every action and counts real resets."""

    metadata: dict = {}

    def __init__(self, rewards=None, life_losses=(), game_len=1000, lives=3, shape=(210, 160)):
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self.rewards = dict(rewards or {})
        self.life_losses = set(life_losses)
        self.game_len = game_len
        self.start_lives = lives
        self.resets = 0
        self.t = 0
        self.lives = lives
        self.actions: list[int] = []

    @staticmethod
    def value(t: int) -> int:
        return (7 * t) % 200

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def _frame(self) -> np.ndarray:
        frame = np.full(self.observation_space.shape, self.value(self.t), np.uint8)
        frame[0, 1] = 255 - self.value(self.t)
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        self.t = 0
        self.lives = self.start_lives
        return self._frame(), {"lives": self.lives}

    def step(self, action):
        self.t += 1
        self.actions.append(int(action))
        if self.t in self.life_losses:
            self.lives -= 1
        terminated = self.t >= self.game_len
        return self._frame(), float(self.rewards.get(self.t, 0.0)), terminated, False, {"lives": self.lives}


def options(**overrides):
    return {**ATARI_DEFAULTS, **overrides}


# --------------------------------------------------------------------------------------------------
# options


def test_options_defaults_and_fill():
    assert check_atari_options(None) == ATARI_DEFAULTS
    got = check_atari_options({"frame_skip": 2, "grayscale": False})
    assert got == {**ATARI_DEFAULTS, "frame_skip": 2, "grayscale": False}
    assert check_atari_options({"repeat_action_probability": 1})["repeat_action_probability"] == 1.0


@pytest.mark.parametrize("bad, words", [
    ({"frame_skip": 0}, "env.atari.frame_skip must be an integer >= 1, got 0"),
    ({"foo": 1}, "env.atari has no option 'foo' (options: noop_max, frame_skip"),
    ({"noop_max": -1}, "env.atari.noop_max must be an integer >= 0"),
    ({"screen_size": 2.5}, "env.atari.screen_size must be an integer >= 1, got 2.5"),
    ({"frame_stack": True}, "env.atari.frame_stack must be an integer"),
    ({"grayscale": "yes"}, "env.atari.grayscale must be true or false"),
    ({"repeat_action_probability": 1.5}, "env.atari.repeat_action_probability must be a number in [0, 1]"),
    ([1, 2], "env.atari must be a mapping or null"),
])
def test_options_refused_in_one_line(bad, words):
    with pytest.raises(ValueError) as err:
        check_atari_options(bad)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------------------------------
# resize


def test_area_weights_rows_sum_to_one_and_are_block_diagonal():
    for n_in, n_out in ((210, 84), (160, 84), (168, 84), (84, 210), (7, 3)):
        w = area_weights(n_in, n_out)
        assert w.shape == (n_out, n_in) and w.dtype == np.float32
        np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-6)
        assert (w >= 0).all()
    w = area_weights(210, 84)
    np.testing.assert_array_equal(w, np.kron(np.eye(42, dtype=np.float32), w[:2, :5]))


def _resize(frame: np.ndarray, size: int = 84) -> np.ndarray:
    env = FakeAle(shape=frame.shape)
    return ResizeFrame(env, size).observation(frame)


def _area_mean_1d(v: np.ndarray, n_out: int) -> np.ndarray:
    """Area averaging by brute force: repeat each input sample n_out times, average groups of n_in."""
    return np.repeat(v.astype(np.float64), n_out).reshape(n_out, len(v)).mean(1)


def test_resize_constant_frame_stays_constant():
    out = _resize(np.full((210, 160), 137, np.uint8))
    assert out.shape == (1, 84, 84) and out.dtype == np.uint8
    assert (out == 137).all()
    rgb = np.empty((210, 160, 3), np.uint8)
    rgb[...] = (10, 200, 255)
    out = _resize(rgb)
    assert out.shape == (3, 84, 84)
    assert (out[0] == 10).all() and (out[1] == 200).all() and (out[2] == 255).all()


def test_resize_matches_brute_force_area_means():
    rows = (np.arange(210) * 37) % 151  # not monotone, so a wrong row mapping shows
    cols = (np.arange(160) * 11) % 101
    frame = (rows[:, None] + cols[None, :]).astype(np.uint8)
    # the area mean of a[r] + b[c] is (area mean of a)[i] + (area mean of b)[j]
    ref = _area_mean_1d(rows, 84)[:, None] + _area_mean_1d(cols, 84)[None, :]
    out = _resize(frame)[0].astype(np.float64)
    assert np.abs(out - ref).max() <= 0.5 + 1e-3
    # the blockwise products give the dense Wr @ frame @ Wc.T
    dense = area_weights(210, 84) @ frame.astype(np.float32) @ area_weights(160, 84).T
    assert np.abs(out - dense).max() <= 0.5 + 1e-3
    # an integer ratio is a plain 2x2 block mean
    square = np.random.default_rng(0).integers(0, 256, (168, 168)).astype(np.uint8)
    blocks = square.reshape(84, 2, 84, 2).astype(np.float64).mean((1, 3))
    assert np.abs(_resize(square)[0] - blocks).max() <= 0.5 + 1e-3


def test_resize_rgb_is_per_channel():
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 256, (210, 160, 3)).astype(np.uint8)
    out = _resize(rgb).astype(np.float64)
    wr, wc = area_weights(210, 84).astype(np.float64), area_weights(160, 84).astype(np.float64)
    for c in range(3):
        assert np.abs(out[c] - wr @ rgb[..., c] @ wc.T).max() <= 0.5 + 1e-3


# --------------------------------------------------------------------------------------------------
# wrappers on the scripted environment


def test_frame_skip_sums_rewards_and_max_pools_last_two_frames():
    fake = FakeAle(rewards={1: 1, 2: 2, 4: 4, 5: 8, 6: 16}, game_len=6)
    env = MaxAndSkip(fake, skip=4, max_pool=True)
    assert not env.direct
    env.reset()
    obs, reward, terminated, truncated, _ = env.step(2)
    assert reward == 7 and not terminated and fake.t == 4 and fake.actions == [2] * 4
    # frames 3 and 4 pooled: the body is value(4) (larger), pixel (0, 1) is 255 - value(3)
    assert obs[5, 5] == max(FakeAle.value(3), FakeAle.value(4)) == FakeAle.value(4)
    assert obs[0, 1] == 255 - FakeAle.value(3)
    # the game ends at frame 6, inside the second skip: rewards of frames 5-6, last frame as is
    obs, reward, terminated, _, _ = env.step(3)
    assert reward == 24 and terminated and fake.t == 6
    assert obs[5, 5] == FakeAle.value(6) and obs[0, 1] == 255 - FakeAle.value(6)


def test_frame_skip_without_pooling_returns_last_frame():
    fake = FakeAle()
    env = MaxAndSkip(fake, skip=3, max_pool=False)
    env.reset()
    obs, *_ = env.step(0)
    assert fake.t == 3 and obs[0, 1] == 255 - FakeAle.value(3) and obs[5, 5] == FakeAle.value(3)


def test_noop_reset_takes_random_noops():
    counts = set()
    for seed in range(12):
        fake = FakeAle()
        env = NoopReset(fake, noop_max=30)
        env.reset(seed=seed)
        assert 1 <= fake.t <= 30 and set(fake.actions) == {0}
        counts.add(fake.t)
    assert len(counts) > 3
    fake = FakeAle()
    preprocess(fake, options(noop_max=0)).reset(seed=0)
    assert fake.t == 0 and fake.actions == []


def test_fire_reset_after_reset_and_after_life_loss():
    fake = FakeAle(rewards={2: 5}, life_losses={2})
    env = FireReset(fake, fire_action=1)
    _, info = env.reset()
    assert fake.actions == [1] and info["lives"] == 3
    _, reward, *_ = env.step(3)  # frame 2 loses a life: FIRE follows in the same step
    assert fake.actions == [1, 3, 1] and reward == 5
    env.step(2)
    assert fake.actions == [1, 3, 1, 2]


def test_fire_reset_is_used_only_when_the_game_has_fire():
    fake = FakeAle()
    env = preprocess(fake, options(noop_max=0, frame_skip=1), fire_action=None)
    env.reset()
    assert fake.actions == []
    fake = FakeAle()
    env = preprocess(fake, options(noop_max=0, frame_skip=1), fire_action=1)
    env.reset()
    assert fake.actions == [1]


def _play(env, fake, steps, action=2):
    """Step ``env`` (resetting after each episode end); returns the (reward, terminated, truncated,
    info) of each step and the number of episode ends."""
    out = []
    for _ in range(steps):
        _, reward, terminated, truncated, info = env.step(action)
        out.append((reward, terminated, truncated, info))
        if terminated or truncated:
            env.reset()
    return out


def test_episodic_life_ends_training_episodes_and_continues_the_game():
    fake = FakeAle(rewards={3: 5, 7: -3, 12: 2}, life_losses={5, 9}, game_len=14)
    env = EpisodicLife(fake)
    env.reset()
    ends = []
    for _ in range(5):
        obs, _, terminated, _, info = env.step(2)
        ends.append(terminated)
    assert ends == [False] * 4 + [True] and info["lives"] == 2
    obs2, info2 = env.reset()
    assert fake.resets == 1 and fake.t == 5  # no real reset, no step
    np.testing.assert_array_equal(obs2, obs)
    assert info2["lives"] == 2
    for _ in range(4):
        _, _, terminated, _, _ = env.step(2)
    assert terminated and fake.t == 9
    env.reset()
    for _ in range(5):
        _, _, terminated, _, _ = env.step(2)
    assert terminated and fake.t == 14
    env.reset()  # the game is over: a real reset
    assert fake.resets == 2 and fake.t == 0


@pytest.mark.parametrize("train", [True, False])
def test_raw_episode_reported_once_per_game_with_unclipped_sum(train):
    rewards = {3: 5, 7: -3, 12: 2, 20: 40}
    fake = FakeAle(rewards=rewards, life_losses={5, 9}, game_len=22)
    env = preprocess(fake, options(noop_max=0, frame_skip=1, fire_reset=False), train=train)
    assert env.reports_raw_episodes is True and env.get_wrapper_attr("reports_raw_episodes") is True
    env.reset(seed=0)
    steps = _play(env, fake, 44)  # exactly two games
    raw = [info[RAW_EPISODE_KEY] for _, _, _, info in steps if RAW_EPISODE_KEY in info]
    assert raw == [(44.0, 22), (44.0, 22)]
    ends = sum(term or trunc for _, term, trunc, _ in steps)
    got = [r for r, *_ in steps[:22]]
    if train:  # three lives, so three training episodes per game; clipped rewards
        assert ends == 6
        assert got[2] == 1 and got[6] == -1 and got[11] == 1 and got[19] == 1
        assert set(got) <= {-1.0, 0.0, 1.0}
    else:
        assert ends == 2
        assert got[2] == 5 and got[6] == -3 and got[19] == 40 and sum(got) == 44
    assert RAW_EPISODE_KEY in steps[21][3] and steps[21][3]["lives"] == 1


def test_raw_length_counts_agent_steps_with_automatic_fire():
    # lives lost on frames 3 and 6; the FIRE after each is part of the step that lost the life
    fake = FakeAle(rewards={4: 2, 7: 3}, life_losses={3, 6}, game_len=10)
    env = preprocess(fake, options(noop_max=0, frame_skip=1), train=False, fire_action=1)
    env.reset()
    assert fake.actions == [1]  # the reset's FIRE
    steps = _play(env, fake, 7)
    # ... and the next game's reset presses FIRE again
    assert fake.actions == [1, 2, 2, 1, 2, 2, 1, 2, 2, 2, 1] and fake.resets == 2
    assert [r for r, *_ in steps] == [0, 2, 0, 3, 0, 0, 0]
    assert steps[-1][1] and steps[-1][3][RAW_EPISODE_KEY] == (5.0, 7)


def test_max_episode_steps_truncates_the_whole_game():
    fake = FakeAle(rewards={2: 1, 6: 1}, life_losses={4}, game_len=1000)
    env = preprocess(fake, options(noop_max=0, frame_skip=2, fire_reset=False), train=True,
                     max_episode_steps=5)
    env.reset()
    steps = _play(env, fake, 5)
    # life lost on frame 4 (agent step 2): a training episode ends, the game goes on
    assert [(term, trunc) for _, term, trunc, _ in steps] == [(False, False), (True, False)] + \
        [(False, False)] * 2 + [(False, True)]
    assert steps[-1][3][RAW_EPISODE_KEY] == (2.0, 5)
    assert fake.resets == 2  # the truncated game was followed by a real reset


def test_tetris_lines_reported_at_game_end():
    fake = FakeAle(rewards={2: 1, 3: 2}, game_len=4, lives=0)
    env = preprocess(fake, options(noop_max=0, frame_skip=1, fire_reset=False), rewards_are_lines=True)
    env.reset()
    steps = _play(env, fake, 4)
    assert steps[-1][3]["lines"] == 3 and steps[-1][3][RAW_EPISODE_KEY] == (3.0, 4)
    assert all("lines" not in info for *_, info in steps[:-1])


def test_observation_stack_is_channels_first_newest_last():
    fake = FakeAle()
    env = preprocess(fake, options(noop_max=0, frame_skip=1, fire_reset=False, frame_stack=4))
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = env.reset()
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    assert (obs[:, 40, 40] == FakeAle.value(0)).all()
    for _ in range(6):
        new, *_ = env.step(0)
    assert list(new[:, 40, 40]) == [FakeAle.value(t) for t in (3, 4, 5, 6)]
    assert new is not env.step(0)[0] and not np.shares_memory(new, obs)
    rgb = FakeAle(shape=(210, 160, 3))
    env = preprocess(rgb, options(noop_max=0, frame_skip=1, fire_reset=False, grayscale=False,
                                  frame_stack=2, screen_size=42))
    obs, _ = env.reset()
    assert obs.shape == (6, 42, 42) and env.observation_space.shape == (6, 42, 42)


def test_frame_stack_ring_order_over_many_steps():
    fake = FakeAle()
    env = FrameStack(ResizeFrame(fake, 84), k=3)
    env.reset()
    for t in range(1, 20):
        obs, *_ = env.step(0)
        want = [FakeAle.value(max(s, 0)) for s in (t - 2, t - 1, t)]
        assert list(obs[:, 40, 40]) == want


# --------------------------------------------------------------------------------------------------
# real ALE


def test_make_atari_options_reach_ale():
    env = make_atari("ALE/Pong-v5", {"grayscale": False, "frame_stack": 2}, repeat_action_probability=0.25)
    try:
        assert env.unwrapped.spec.kwargs["repeat_action_probability"] == 0.25
        assert env.unwrapped.spec.kwargs["frameskip"] == 1
        assert env.observation_space.shape == (6, 84, 84)
        obs, _ = env.reset(seed=0)
        for _ in range(20):
            obs, *_ = env.step(0)
        assert obs.shape == (6, 84, 84) and obs.dtype == np.uint8 and obs.any()
    finally:
        env.close()
    with pytest.raises(ValueError, match="frameskip is set by env.atari"):
        make_atari("ALE/Pong-v5", frameskip=4)


def test_direct_emulator_path_matches_env_step():
    import ale_py

    gym.register_envs(ale_py)
    envs = [MaxAndSkip(gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0,
                                obs_type="grayscale"), 4, True, direct=d) for d in (True, False)]
    assert envs[0].direct and not envs[1].direct
    for env in envs:
        env.reset(seed=3)
    rng = np.random.default_rng(3)
    for a in rng.integers(0, 4, 300):
        a_out, b_out = (env.step(int(a)) for env in envs)
        np.testing.assert_array_equal(a_out[0], b_out[0])
        assert a_out[1:4] == b_out[1:4] and a_out[4]["lives"] == b_out[4]["lives"]
        if a_out[2] or a_out[3]:
            for env in envs:
                env.reset()
    for env in envs:
        env.close()


@pytest.mark.parametrize("env_id", ["ALE/Tetris-v5", "ALE/Breakout-v5"])
@pytest.mark.parametrize("train", [True, False])
def test_real_ale_smoke(env_id, train):
    env = make_atari(env_id, train=train, max_episode_steps=150)
    try:
        assert env.reports_raw_episodes is True
        assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        obs, info = env.reset(seed=1)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and "lives" in info
        rng = np.random.default_rng(1)
        raw, clipped = [], 0.0
        for a in rng.integers(0, env.action_space.n, 300):
            obs, reward, terminated, truncated, info = env.step(int(a))
            assert env.observation_space.contains(obs) and "lives" in info
            clipped += reward
            if train:
                assert reward in (-1.0, 0.0, 1.0)
            if RAW_EPISODE_KEY in info:
                raw.append(info[RAW_EPISODE_KEY])
                if env_id == "ALE/Tetris-v5":
                    assert info["lines"] == int(info[RAW_EPISODE_KEY][0])
            if terminated or truncated:
                env.reset()
        assert raw and all(0 < length <= 150 for _, length in raw)
        assert any(length == 150 for _, length in raw) or len(raw) >= 2
    finally:
        env.close()
