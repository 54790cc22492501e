"""Atari (ALE) through ale-py's AtariVectorEnv: the options and what they map to, the observations,
and the bank held against what users see - raw whole games, episodic life, clipped rewards, FIRE
after a lost life (also in the experience rows), seeds, refused actions - plus the
one-environment adapter (evaluation, probing, play) and the time limit."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from ale_py.vector_env import AtariVectorEnv

from drlmpi.algos.ppo import PPO
from drlmpi.algos.random_policy import RandomPolicy
from drlmpi.config.schema import group_config
from drlmpi.envs.atari import ATARI_DEFAULTS, action_set, ale_settings, check_ale_kwargs, check_atari_options
from drlmpi.envs.atari_bank import AleBank
from drlmpi.envs.make import env_make_kwargs, make_env, probe_spec
from drlmpi.envs.spec import RAW_EPISODE_KEY, env_spec
from drlmpi.envs.vector import SerialEnvs
from drlmpi.roles.actor import Actor
from tests.shared_runs import declare

FIRE = 1  # Breakout's actions: NOOP, FIRE, RIGHT, LEFT


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


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
    ({"frame_stak": 2}, "env.atari has no option 'frame_stak' (did you mean env.atari.frame_stack? options:"),
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


@pytest.mark.parametrize("key", ["render_mode", "mode", "frameskip", "obs_type", "continuous"])
def test_env_kwargs_an_ale_id_cannot_take_are_refused_in_one_line(key):
    with pytest.raises(ValueError) as err:
        check_ale_kwargs({key: 1})
    assert f"env.kwargs.{key} is not taken by ALE ids" in str(err.value) and "\n" not in str(err.value)
    check_ale_kwargs({"repeat_action_probability": 0.25, "full_action_space": True})


@pytest.mark.parametrize("override", ["env.atari.frame_stack=2", "+env.atari.frame_stack=2"])
def test_one_option_from_the_command_line_keeps_the_other_defaults(override):
    from tests.pool_worker import compose

    cfg = compose(["env=breakout", override])  # the env files leave env.atari empty: with or without +
    assert dict(cfg.env.atari) == {"frame_stack": 2}
    spec = probe_spec(cfg.env.id, **env_make_kwargs(cfg.env))
    assert spec.obs_shape == (2, 84, 84)
    assert compose(["env=breakout"]).env.atari == {}


def test_options_map_to_the_vector_env_arguments():
    s = ale_settings("ALE/Breakout-v5", {"frame_skip": 3, "screen_size": 42, "frame_stack": 2,
                                         "grayscale": False, "noop_max": 7, "max_pool": False},
                     max_episode_steps=100)
    assert (s.game, s.n_actions, s.fire_action, s.obs_shape) == ("breakout", 4, FIRE, (6, 42, 42))
    assert s.arguments == {
        "frameskip": 3, "maxpool": False, "grayscale": False, "img_height": 42, "img_width": 42,
        "stack_num": 2, "noop_max": 7, "use_fire_reset": True, "repeat_action_probability": 0.0,
        "full_action_space": False, "max_num_frames_per_episode": 300,
        # drlmpi's own episodic life and clipping; the vector env's would lose the raw game
        "episodic_life": False, "life_loss_info": False, "reward_clipping": False}
    assert s.life_ends and s.clip_rewards
    # evaluation plays whole games with raw rewards; env.kwargs win over env.atari
    s = ale_settings("ALE/Pong-v5", {"repeat_action_probability": 0.1}, train=False,
                     repeat_action_probability=0.25, full_action_space=True)
    assert not s.life_ends and not s.clip_rewards and s.n_actions == 18
    assert s.arguments["repeat_action_probability"] == 0.25
    assert s.arguments["max_num_frames_per_episode"] == 108_000  # the id's own limit
    # FIRE only with fire_reset, in games that have it
    assert ale_settings("ALE/Breakout-v5", {"fire_reset": False}).fire_action is None
    assert action_set("freeway", False) == ("NOOP", "UP", "DOWN")
    assert ale_settings("ALE/Freeway-v5").fire_action is None


# --------------------------------------------------------------------------------------------------
# observations and the adapter


def test_the_adapter_reports_its_spaces_without_an_emulator_and_stacks_frames():
    env = make_env("ALE/Breakout-v5")
    spec = env_spec(env)
    assert env.bank is None  # nothing started to read the spaces
    assert (spec.env_id, spec.obs_shape, spec.obs_dtype, spec.n_actions, spec.raw_episodes) == \
        ("ALE/Breakout-v5", (4, 84, 84), "uint8", 4, True)
    assert probe_spec("ALE/Tetris-v5", train=False).n_actions == 5
    obs, info = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    assert info["lives"] == 5
    # a reset's stack is zero-filled; each step pushes the newest frame last
    assert [bool(frame.any()) for frame in obs] == [False, False, False, True]
    new, *_ = env.step(0)
    assert [bool(frame.any()) for frame in new] == [False, False, True, True]
    np.testing.assert_array_equal(new[2], obs[3])
    env.close()
    assert env.bank is None


def test_rgb_frames_are_channels_first_oldest_frame_first():
    bank = AleBank(ale_settings("ALE/Pong-v5", {"grayscale": False, "frame_stack": 2, "screen_size": 42}), 1)
    ref = AtariVectorEnv("pong", 1, num_threads=1, grayscale=False, stack_num=2, img_height=42,
                         img_width=42, autoreset_mode="SameStep", reward_clipping=False)
    bank.reset(5)
    ref.reset(seed=5)
    for _ in range(3):
        obs = bank.step([2]).obs
        want = ref.step(np.array([2]))[0]
    assert obs.shape == (1, 6, 42, 42) and want.shape == (1, 2, 42, 42, 3) and obs.any()
    for k in range(2):
        for c in range(3):
            np.testing.assert_array_equal(obs[0, 3 * k + c], want[0, k, :, :, c])
    bank.close()


# --------------------------------------------------------------------------------------------------
# the bank against what users see


@pytest.mark.parametrize(("env_id", "train"), [
    ("ALE/Breakout-v5", True),  # lives and FIRE
    ("ALE/Asterix-v5", True),  # lives, no FIRE, rewards of 50: clipping shows
    ("ALE/Tetris-v5", False),  # evaluation: whole games, raw rewards
])
def test_the_bank_conforms_to_the_raw_games(env_id, train):
    """Each step held against the vector env with nothing of drlmpi's (raw rewards, whole
    games), fed the actions the bank actually sent."""
    n = 2
    settings = ale_settings(env_id, train=train)
    bank = AleBank(settings, n)
    ref = AtariVectorEnv(settings.game, n, num_threads=1, autoreset_mode="SameStep", reward_clipping=False)
    np.testing.assert_array_equal(bank.reset(3), ref.reset(seed=3)[0])  # env i: seed 3 + i
    lives = np.full(n, -1)
    game_return, game_length = np.zeros(n), np.zeros(n, dtype=int)
    fire_due = np.zeros(n, dtype=bool)
    games = lost_lives = fires = 0
    rng = np.random.default_rng(3)
    for _ in range(700):
        asked = rng.integers(0, settings.n_actions, n)
        out = bank.step(asked.tolist())
        # FIRE, and only FIRE, where the previous step lost a life (in a game with FIRE)
        assert sorted(out.forced) == list(np.nonzero(fire_due)[0]) and set(out.forced.values()) <= {FIRE}
        fires += len(out.forced)
        sent = asked.copy()
        sent[list(out.forced)] = FIRE
        nxt, reward, terminated, truncated, info = ref.step(sent)
        game_return += reward
        game_length += 1
        over = terminated | truncated
        lost = ~over & (info["lives"] < lives)
        lives = info["lives"].copy()
        np.testing.assert_array_equal(out.next_obs, nxt)
        np.testing.assert_array_equal(out.reward, np.sign(reward) if train else reward)
        np.testing.assert_array_equal(out.terminated, (terminated | lost) if train else terminated)
        np.testing.assert_array_equal(out.truncated, truncated)
        assert sorted(out.raw) == list(np.nonzero(over)[0])  # a lost life does not end the game
        for i in np.nonzero(over)[0]:
            # the whole game: its unclipped return and its agent steps, on its last step
            assert out.raw[i] == (game_return[i], game_length[i])
            np.testing.assert_array_equal(out.obs[i], info["final_obs"][i])
            game_return[i], game_length[i] = 0, 0
            games += 1
        lost_lives += int(lost.sum())
        fire_due = lost & (settings.fire_action is not None)
    assert games >= 2
    if env_id != "ALE/Tetris-v5":
        assert lost_lives >= 4
    assert (fires > 0) == (env_id == "ALE/Breakout-v5")
    bank.close()


def test_a_policy_that_never_fires_still_finishes_breakout_games():
    """Breakout waits for FIRE to launch each ball: drlmpi sends it after a lost life, so a
    NOOP-only game ends in a few hundred steps instead of stalling to the time limit."""
    env = make_env("ALE/Breakout-v5", train=False, max_episode_steps=2000)
    env.reset(seed=0)
    step, terminated, truncated = 0, False, False
    while not (terminated or truncated):
        _, _, terminated, truncated, info = env.step(0)
        step += 1
    assert terminated and not truncated and step < 1000
    assert info[RAW_EPISODE_KEY] == (0.0, step)  # the FIRE steps are agent steps of the game
    env.close()


def test_experience_rows_record_the_fire_sent_after_a_lost_life():
    envs = [make_env("ALE/Breakout-v5") for _ in range(2)]
    actor = Actor(envs, RandomPolicy(env_spec(envs[0]), {}, seed=0), stream_base=0, seed=0)
    assert actor.envs.mode == "ale"
    rows = actor.collect(300)
    layout = actor.layout

    def column(name: str) -> np.ndarray:
        return layout.column(rows, name)[:, 0].reshape(300, 2)  # rows: step-major, env-minor

    lost = (column("terminated") > 0) & (column("episode_length") == 0)
    assert lost[:-1].sum() >= 4
    assert (column("action")[1:][lost[:-1]] == FIRE).all()
    lengths = column("episode_length")
    assert (lengths > 0).sum() == actor.episodes >= 1  # whole games, not lives
    actor.close()


def test_ppo_rows_carry_the_log_probability_of_the_fire_sent():
    """PPO's behaviour log-probability in a row whose action the environment replaced (FIRE
    after a lost life) is that of FIRE, so the rollout's ratio is the recorded action's."""
    envs = [make_env("ALE/Breakout-v5") for _ in range(2)]
    algo = PPO(env_spec(envs[0]), group_config("algo", "ppo"), seed=0, learner=False)
    actor = Actor(envs, algo, stream_base=0, seed=0)
    rows = actor.collect(300)
    layout = actor.layout
    lost = (layout.column(rows, "terminated")[:, 0] > 0) & (layout.column(rows, "episode_length")[:, 0] == 0)
    forced = np.nonzero(lost[:-2])[0] + 2  # rows: step-major, env-minor (2 envs)
    assert len(forced) >= 3 and (layout.column(rows, "action")[forced, 0] == FIRE).all()
    obs = layout.obs_array(rows, "obs")[forced]
    fire = np.full((len(forced), 1), FIRE, dtype=np.float32)
    expected = algo.extras_for(obs, fire)[:, 0]
    np.testing.assert_allclose(layout.column(rows, "log_prob")[forced, 0], expected, rtol=1e-5)
    actor.close()


def test_seeds_reproduce_games_whatever_the_thread_count():
    settings = ale_settings("ALE/Breakout-v5", {"repeat_action_probability": 0.25})

    def play(seed: int, threads: int = 1) -> np.ndarray:
        bank = AleBank(settings, 3, num_threads=threads)
        frames = [bank.reset(seed)]
        for a in np.random.default_rng(0).integers(0, 4, 60):
            frames.append(bank.step([a] * 3).next_obs)  # every env the same actions
        bank.close()
        return np.stack(frames)

    games = play(7)
    np.testing.assert_array_equal(games, play(7, threads=2))
    np.testing.assert_array_equal(games[:, 1], play(8)[:, 0])  # env i gets seed + i
    assert not np.array_equal(games[:, 0], games[:, 1])
    np.testing.assert_array_equal(games, play(7 + 2**31))  # kept in the vector env's range


def _step_within(bank: AleBank, actions: list, seconds: float = 20.0) -> object:
    """``bank.step(actions)``'s result or exception, from a thread: a failure, not a hung test
    run, when it does not return (the vector env waits forever on an out-of-range action)."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(bank.step(actions))
        except Exception as exc:  # noqa: BLE001 (the caller checks which)
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"bank.step({actions}) did not return in {seconds:.0f} s"
    return outcome[0]


def test_an_action_outside_the_game_raises_instead_of_hanging():
    bank = AleBank(ale_settings("ALE/Tetris-v5"), 2)
    bank.reset(0)
    for bad, words in (([0, 5], "action 5 of environment 1 is not one of the game's 5 actions (0..4)"),
                       ([-1, 0], "action -1 of environment 0"), ([0.5, 1], "actions must be integers"),
                       ([0], "expected 2 actions")):
        error = _step_within(bank, bad)
        assert isinstance(error, ValueError) and words in str(error), error
    assert bank.step([4, 0]).obs.shape == (2, 4, 84, 84)  # it still steps
    bank.close()


@pytest.mark.parametrize("env_id", ["ALE/Tetris-v5", "ALE/Breakout-v5"])
def test_max_episode_steps_truncates_the_whole_game(env_id):
    env = make_env(env_id, max_episode_steps=60)  # training: a lost life ends an episode, not the game
    env.reset(seed=1)
    ends = []
    for step in range(1, 61):
        _, _, terminated, truncated, info = env.step(0)
        if terminated or truncated:
            ends.append((step, terminated, truncated, info.get(RAW_EPISODE_KEY)))
            env.reset()  # continues the game after a lost life
    assert ends[-1] == (60, False, True, (0.0, 60))
    assert all(term and not trunc and raw is None for _, term, trunc, raw in ends[:-1])
    assert len(ends) >= (3 if env_id == "ALE/Breakout-v5" else 1)
    env.close()


def test_a_simulators_ale_environments_join_one_vector_env_and_close_it():
    before = _threads()
    envs = [make_env("ALE/Tetris-v5", num_threads=2) for _ in range(3)]
    bank = SerialEnvs(envs, np.uint8)
    assert bank.mode == "ale" and bank.joined.n == 3 and bank.joined.num_threads == 2
    assert bank.reset(0).shape == (3, 4, 84, 84) and _threads() == before + 2
    bank.close()
    assert _threads() == before  # the vector env's threads are gone
    with pytest.raises(ValueError, match="made with the same options"):
        SerialEnvs([make_env("ALE/Tetris-v5"), make_env("ALE/Tetris-v5", train=False)], np.uint8)


#: the 16-rank Breakout preset on 3 CPU ranks, 2 games per simulator: central (the learner acts)
#: and star (the simulators act), each one rollout - its per-game rollouts must resolve to this
#: job's 4 games (32 steps x 4 games = 128 rows) and both must train on ALE frames. With the
#: Nature stack: the preset's IMPALA stack on one CPU core took the two runs from 10 s to 33 s
#: (tests/test_images.py shows that stack learn; the test below that the preset asks for it)
BREAKOUT_PRESET = ["+experiment=ppo_breakout_16", "world_size=3", "device=cpu", "env.num_envs=2",
                   "run.max_train_seconds=null", "run.max_env_steps=128", "run.progress_every_s=0",
                   "algo.epochs=1", "algo.encoder=cnn"]
PRESET_RUNS = {topology: declare(f"breakout-preset-{topology}", 3,
                                  [*BREAKOUT_PRESET, f"topology={topology}"])
               for topology in ("central", "star")}


#: the 4-GPU preset (four groups, central inside each) on 4 CPU ranks: 2 groups of a learner and
#: one simulator of 2 games, 256 steps - each learner's rollout is its own group's 2 games x 32 steps
GROUPS4_RUN = declare("breakout-groups4", 4, [
    "+experiment=ppo_breakout_groups4", "world_size=4", "topology.learners=2", "device=cpu", "env.num_envs=2",
    "run.max_train_seconds=null", "run.max_env_steps=512", "run.progress_every_s=0", "algo.epochs=1",
    "algo.encoder=cnn"])  # 512 steps: one group may start well after the other on a loaded machine
# (57 to 199 of 256 steps in a CI run), and each needs 64 for its first rollout


def test_the_four_gpu_breakout_preset_keeps_each_learners_batch_the_one_gpu_presets():
    """At its size (64 ranks: 4 groups of a learner and 15 simulators x 8 games), the 4-GPU
    preset's learners each take the one-GPU preset's rollout (3,840 rows) and minibatch (256 rows),
    the job's four of them averaged into one update of 1,024; IMPALA's stack, central in a group."""
    from drlmpi.algos.ppo import PPO
    from drlmpi.topologies.groups import Groups
    from tests.pool_worker import compose

    cfg = compose(["+experiment=ppo_breakout_groups4", "device=cpu"])
    settings = Groups.settings_of(cfg.topology)
    assert (cfg.world_size, settings.learners, settings.group_wiring) == (64, 4, "central")
    job_envs = Groups.env_ranks(cfg.world_size, settings) * cfg.env.num_envs
    job = PPO.job_options(cfg.algo, job_envs)
    assert (job_envs, job) == (480, {"rollout_steps": 15360, "batch_size": 1024})
    one_gpu = compose(["+experiment=ppo_breakout_16", "device=cpu"]).algo
    per_learner = Groups.batch_rule(settings, {**PPO.settings_of(cfg.algo).as_dict(), **job}, 64).values
    assert (per_learner["rollout_steps"], per_learner["batch_size"]) == (3840, 256) == (
        PPO.job_options(one_gpu, 15 * 8)["rollout_steps"], one_gpu.batch_size)
    assert (per_learner["encoder"], tuple(per_learner["hidden"])) == ("impala", (256,))


def test_the_four_gpu_breakout_preset_runs_on_cpu(runs):
    """The preset's wiring on 4 CPU ranks (two groups): each learner acts for its simulator's
    Breakout frames, stores its own group's rollout (32 steps x 2 games = 64 rows, in minibatches
    of 4: the job's 128 / 15 split between 2 learners) and both run the same updates with their
    gradients averaged, ending with identical parameters."""
    summary = runs.get(GROUPS4_RUN).summary()
    stats = summary["topology_stats"]
    assert (summary["env_id"], summary["topology_label"]) == ("ALE/Breakout-v5", "groups[2xcentral]")
    assert stats["per_rank_algo"] == {"rollout_steps": 64, "batch_size": 4}
    learners = stats["per_learner"]
    assert len(learners) == 2 and all(r["updates"] == summary["updates"] >= 16 for r in learners)
    assert all(r["serves"] > 0 for r in learners)  # each learner acted for its own simulator
    assert stats["param_checksums_per_rank"][0] == stats["param_checksums_per_rank"][1]


def test_the_breakout_preset_learns_with_impalas_stack():
    """The preset's network: IMPALA's residual stack into one hidden layer of 256."""
    from drlmpi.algos.ppo import PPO
    from tests.pool_worker import compose

    algo = PPO.settings_of(compose(["+experiment=ppo_breakout_16", "device=cpu"]).algo)
    assert (algo.encoder, tuple(algo.hidden)) == ("impala", (256,))


@pytest.mark.parametrize("topology", sorted(PRESET_RUNS))
def test_the_breakout_preset_runs_on_cpu_under_central_and_star(runs, topology):
    """Two 3-rank PPO jobs on Breakout frames with the preset's rollout. Over 5 s together (a
    CNN acting and training on CPU): the issue's CPU check that both topologies still run."""
    summary = runs.get(PRESET_RUNS[topology]).summary()
    assert (summary["env_id"], summary["topology"], summary["world_size"]) == ("ALE/Breakout-v5", topology, 3)
    assert summary["algo_job_options"] == {"rollout_steps": 32 * 2 * 2}  # 32 steps x 2 sims x 2 games
    assert summary["env_steps"] >= 128 and summary["updates"] >= 1  # one rollout of 128 rows
    learner, *simulators = summary["per_rank"]
    carried = "observations" if topology == "central" else "experience"
    # Each of the job's steps sent its frame stack (4 x 84 x 84 bytes) at least once; how the
    # steps split between the two simulators depends on which answers first.
    sent = [sim["sent"][carried][1] for sim in simulators]
    assert min(sent) > 0 and sum(sent) >= summary["env_steps"] * 4 * 84 * 84
