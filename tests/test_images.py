"""Image observations end to end: uint8 bytes packed in the experience rows, kept bit for bit
through replay and rollouts, CNN encoders, the raw-episode protocol, vector environments per
rank (sync and async give the same experience), every topology moving exactly the image bytes
it claims, learning on a tiny image task, and the refusals."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import tests.image_env  # noqa: F401  (registers ImageSide-v0)
from drlmpi.algos.dqn import DQN
from drlmpi.algos.encoders import conv_features, image_chw, resolve_encoder
from drlmpi.algos.ppo import PPO
from drlmpi.algos.random_policy import RandomPolicy
from drlmpi.config.errors import ConfigError
from drlmpi.config.schema import group_config
from drlmpi.data.replay import ReplayBuffer
from drlmpi.envs.make import make_env
from drlmpi.envs.spec import env_spec
from drlmpi.envs.vector import SerialEnvs, WorkerEnvs
from drlmpi.mpi.wire import ChunkHeader
from drlmpi.roles.actor import Actor
from tests.image_env import ImageSide
from tests.shared_runs import declare

IMAGE_ENV = "env.id=tests.image_env:ImageSide-v0"


def image_spec(**kwargs):
    return env_spec(make_env("tests.image_env:ImageSide-v0", **kwargs))


def every_byte_pattern(n: int, shape: tuple[int, ...]) -> np.ndarray:
    """Images whose bytes cover 0..255 in every position of a 4-byte slot: NaN, infinity and
    subnormal float32 bit patterns included."""
    size = int(np.prod(shape))
    flat = ((np.arange(n * size, dtype=np.int64) * 7 + np.arange(n * size) // 256) % 256).astype(np.uint8)
    # infinity, a quiet NaN, a subnormal and a signalling NaN (little-endian float32 slots)
    special = [0, 0, 0x80, 0x7F, 0, 0, 0xC0, 0x7F, 1, 0, 0, 0, 1, 0, 0x80, 0x7F]
    flat[: min(16, flat.size)] = special[: min(16, flat.size)]
    return flat.reshape(n, *shape)


def test_image_columns_are_packed_bytes_and_round_trip_bit_for_bit():
    spec = image_spec(size=37, channels=3, layout="hwc")  # 4107 bytes: the last slot is padded
    layout = DQN.experience_layout(spec)
    assert layout.packed and layout.obs_shape == (37, 37, 3)
    assert layout.obs_slots == math.ceil(37 * 37 * 3 / 4) == 1027
    assert layout.width == 2 * 1027 + 1 + 6 and layout.row_bytes == 4 * layout.width
    images = every_byte_pattern(300, (37, 37, 3))
    slots = images.reshape(300, -1)[:, : 4 * (4107 // 4)].copy().view(np.float32)
    assert np.isnan(slots).any() and np.isinf(slots).any() and (np.abs(slots[slots != 0]) < 1.2e-38).any()
    rows = layout.empty(300)
    layout.put_obs(rows, "obs", images)
    layout.put_obs(rows, "next_obs", images[::-1])
    assert np.array_equal(layout.obs_array(rows), images)
    # Through the replay (ring wrap included) and a sampled minibatch.
    replay = ReplayBuffer(layout, 256, "cpu", seed=0)
    replay.add(rows[:100])
    replay.add(np.concatenate([rows[100:200], rows[200:]]))
    stored = layout.obs_array(replay.rows)
    assert np.array_equal(stored[:44], images[256:]) and np.array_equal(stored[44:], images[44:256])
    batch = replay.sample(64)
    index = replay._buffers(64)[1].numpy()
    assert np.array_equal(layout.obs_tensor(replay._buffers(64)[2]).numpy(), stored[index])
    assert batch["obs"].shape == (64, 1027)
    # A rollout's table (torch.cat of packed columns) keeps them too.
    table = torch.cat([torch.from_numpy(rows[:, layout.slices["obs"]]), torch.ones(300, 1)], dim=1)
    shuffled = table.index_select(0, torch.arange(299, -1, -1))
    assert np.array_equal(layout.obs_tensor(shuffled).numpy(), images[::-1])


def test_env_spec_takes_vectors_and_uint8_images_only():
    assert image_spec(layout="hw").obs_shape == (36, 36)
    assert image_spec().image and image_spec().describe_obs() == "image 1x36x36 uint8"
    env = gym.make("CartPole-v1")
    assert not env_spec(env).image and env_spec(env).obs_shape == (4,)

    class FloatImage(ImageSide):
        def __init__(self):
            super().__init__()
            self.observation_space = gym.spaces.Box(0, 1, (1, 36, 36), np.float32)

    with pytest.raises(ValueError, match="flat Box or a uint8 Box image"):
        env_spec(FloatImage())


@pytest.mark.parametrize(("kwargs", "chw"), [
    ({"layout": "chw", "channels": 4, "size": 84}, (4, 84, 84, False)),
    ({"layout": "hwc", "channels": 3, "size": 40}, (3, 40, 40, True)),
    ({"layout": "hw", "size": 36}, (1, 36, 36, False)),
])
def test_cnn_shapes_for_every_image_layout(kwargs, chw):
    spec = image_spec(**kwargs)
    assert image_chw(spec.obs_shape) == chw
    cfg = group_config("algo", "ppo")
    ppo = PPO(spec, cfg, seed=0)
    assert ppo.encoder == "cnn" and ppo.net.shared
    images = every_byte_pattern(5, spec.obs_shape)
    dist = ppo.net.distribution(ppo.obs_tensor(images))
    assert dist.logits.shape == (5, 2)
    # The packed columns of stored rows give the same outputs as the uint8 images.
    rows = ppo.layout.empty(5)
    ppo.layout.put_obs(rows, "obs", images)
    packed = torch.from_numpy(rows)[:, ppo.layout.slices["obs"]]
    assert torch.equal(ppo.net.value(packed), ppo.net.value(ppo.obs_tensor(images)))
    dqn = DQN(spec, group_config("algo", "dqn"), seed=0)
    assert dqn.q(dqn.obs_tensor(images)).shape == (5, 2)
    c, h, w, _ = chw
    assert conv_features(c, h, w) == 64 * ((((h - 8) // 4 + 1) - 4) // 2 - 1) ** 2
    if h == 84:
        assert conv_features(c, h, w) == 3136  # the Nature DQN's 7x7x64


def test_encoder_choice_and_refusals():
    small = image_spec(size=16)
    assert resolve_encoder(small, "auto", "ppo") == "mlp"
    assert resolve_encoder(image_spec(), "auto", "ppo") == "cnn"
    assert resolve_encoder(image_spec(), "mlp", "ppo") == "mlp"
    with pytest.raises(ConfigError, match=r"at least 36x36.*image 1x16x16 uint8.*encoder=mlp"):
        resolve_encoder(small, "cnn", "dqn")
    cartpole = env_spec(gym.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="encoder=cnn needs image observations.*vector of 4"):
        resolve_encoder(cartpole, "cnn", "ppo")
    mlp_on_images = PPO(small, group_config("algo", "ppo"), seed=0)
    assert mlp_on_images.encoder == "mlp"
    obs = every_byte_pattern(3, small.obs_shape)
    assert mlp_on_images.net.distribution(mlp_on_images.obs_tensor(obs)).logits.shape == (3, 2)


def test_td3_refuses_image_observations():
    from drlmpi.algos.td3 import TD3
    from drlmpi.envs.spec import EnvSpec

    spec = EnvSpec("Img-v0", 36 * 36, False, 0, 1, (-1.0,), (1.0,), obs_shape=(36, 36), obs_dtype="uint8")
    with pytest.raises(ConfigError, match="algo=td3 takes flat vector observations.*image 36x36 uint8"):
        TD3(spec, group_config("algo", "td3"), seed=0, learner=False)


def test_actor_logs_raw_games_not_training_episodes():
    envs = [make_env("tests.image_env:ImageSide-v0", size=16, episode_steps=4, lives=3) for _ in range(2)]
    spec = env_spec(envs[0])
    assert spec.raw_episodes
    actor = Actor(envs, RandomPolicy(spec, {}, seed=0), stream_base=0, seed=0)
    layout = actor.layout
    rows = actor.collect(24)  # 24 steps x 2 envs: 6 training episodes = 2 games per env
    lengths = layout.column(rows, "episode_length")[:, 0]
    ended = (layout.column(rows, "truncated")[:, 0] > 0).sum()
    assert ended == 12 and (lengths > 0).sum() == 4 == actor.episodes
    assert set(lengths[lengths > 0]) == {12}
    returns = layout.column(rows, "episode_return")[lengths > 0, 0]
    assert set(returns) <= set(range(0, 25, 2))  # raw rewards are doubled: even numbers


@pytest.mark.parametrize("env_id", ["CartPole-v1", "tests.image_env:ImageSide-v0"])
def test_async_vector_envs_give_the_same_experience_as_sync(env_id):
    make = [lambda: make_env(env_id) for _ in range(3)]
    spec = env_spec(make[0]())
    dtype = np.uint8 if spec.image else np.float32
    rows = []
    for bank in (SerialEnvs([m() for m in make], dtype), WorkerEnvs(make, dtype)):
        actor = Actor(bank, RandomPolicy(spec, {}, seed=4), stream_base=0, seed=11)
        rows.append(actor.collect(120))  # CartPole episodes end and reset inside
        actor.close()
    assert rows[0].shape == rows[1].shape
    assert rows[0].tobytes() == rows[1].tobytes()
    layout = RandomPolicy(spec, {}, seed=0).layout
    assert (layout.column(rows[0], "episode_length") > 0).any() or spec.image


# (topology overrides, ranks, what carries experience to the learners)
CASES = [
    (["topology=sequential"], 1, None),
    (["topology=p2p"], 2, "experience"),
    (["topology=star"], 3, "experience"),
    (["topology=async"], 3, "experience"),
    (["topology=parameter_server"], 3, "gradients"),
    (["topology=allgather"], 2, "gradients"),
    (["topology=groups"], 4, "experience"),
    (["topology=central"], 3, "observations"),
]
IMAGE_RUN = ["algo=dqn", IMAGE_ENV, "env.reward_threshold=null", "+env.kwargs.size=40",
             "+env.kwargs.channels=2", "run.max_env_steps=600", "run.eval_every=100000",
             "run.progress_every_s=0", "algo.learning_starts=100", "algo.updates_per_step=0.1",
             "algo.batch_size=16", "algo.hidden=[32]", "env.num_envs=2"]


for _overrides, _ranks, _ in CASES:
    declare(f"image-{_overrides[0][9:]}", _ranks, [*IMAGE_RUN, *_overrides])


@pytest.mark.parametrize(("overrides", "ranks", "carrier"), CASES, ids=[c[0][0][9:] for c in CASES])
def test_image_contract_through_every_topology(runs, overrides, ranks, carrier):
    run = runs.get(f"image-{overrides[0][9:]}")
    summary = run.summary()
    # 2 x 40 x 40 bytes = 800 float32 slots per observation column, + the action and 6 scalars.
    row_bytes = summary["experience_row_bytes"]
    assert row_bytes == 4 * (2 * 800 + 1 + 6)
    assert summary["updates"] > 0 and summary["env_steps"] >= 600
    per_rank = summary["per_rank"]
    if carrier == "experience":
        # Every simulator sent exactly its rows' bytes (async: plus one header per chunk);
        # groups: over its group's communicator.
        header = 8 * len(ChunkHeader) if overrides[0] == "topology=async" else 0
        simulators = [r for r in per_rank if r["role"] == "simulator"]
        assert len(simulators) == ranks - (2 if overrides[0] == "topology=groups" else 1)
        for rank in simulators:
            messages, nbytes = rank.get("group_comm", rank)["sent"]["experience"]
            sent = rank["env_steps"] - rank.get("unsent_steps", 0)
            assert sent > 0 and messages > 0
            assert nbytes == sent * row_bytes + messages * header, (nbytes, sent, messages)
        assert not any("experience" in r.get("group_comm", r)["sent"] for r in per_rank
                       if r["role"] != "simulator")
    elif carrier == "gradients":
        for rank in per_rank:
            assert "experience" not in rank["sent"]
    else:  # central: each step's new observations once (a first message per environment group),
        # the action and 6 scalars, plus a final observation per ended episode; no rows
        width = 4 * (800 + 1 + 6)
        for rank in (r for r in per_rank if r["role"] == "simulator"):
            nbytes = rank["sent"]["observations"][1]
            assert nbytes == width * (rank["env_steps"] + 2 + rank["episodes"])
            assert "experience" not in rank["sent"]
    assert len(run.rows("episode")) >= 600 // 16 - 4


CNN_LEARNS = {"ppo": ["algo.rollout_steps=128", "algo.batch_size=32", "algo.epochs=4", "algo.lr=3e-3",
                      "run.max_env_steps=3000"],
              "dqn": ["algo.learning_starts=200", "algo.exploration_steps=600", "algo.batch_size=16",
                      "run.max_env_steps=1200"]}
# algo.encoder per run: the Nature stack for both algorithms (IMPALA's stack learning this task
# took 12-18 s on one CPU thread, its 15 convolutions a pass: test_the_impala_stack_trains below
# checks its gradient steps in-process, docs/results/h200host_ppo_breakout_impala/ its learning)
CNN_RUNS = {"cnn-ppo": ("ppo", "cnn"), "cnn-dqn": ("dqn", "cnn")}
for _name, (_algo, _encoder) in CNN_RUNS.items():
    declare(_name, 1, [f"algo={_algo}", IMAGE_ENV, "env.reward_threshold=null", f"algo.encoder={_encoder}",
                       "run.eval_every=100000", "run.progress_every_s=0", *CNN_LEARNS[_algo]])


@pytest.mark.parametrize("name", list(CNN_RUNS))
def test_a_cnn_learns_the_image_task(runs, name):
    """A random policy returns about 8 of 16; the CNN learns which side the square is on."""
    run = runs.get(name)
    returns = run.returns("episode")
    # The first 16 episodes: PPO's first rollouts (the initial policy), DQN's epsilon-1 warm-up.
    first, last = np.mean(returns[:16]), np.mean(returns[-len(returns) // 5:])
    assert first < 10.5 and last > 13.5, (first, last)


def test_tetris_trains_its_cnn_end_to_end(pool, tmp_path):
    """The default algorithm on ALE Tetris (DQN with the Atari config: a CNN, a 100k-frame-stack
    replay), its first update moved 300 steps in: the CNN trains, and the run ends cleanly - or,
    on a host without the memory for that replay, is refused at start-up in one line with the
    figure."""
    from drlmpi.device.memory import host_available_bytes
    from tests.conftest import RunResult, run_in_pool
    from tests.mpi_pool import PoolError
    from tests.pool_worker import compose

    overrides = ["env=tetris", "run.max_env_steps=400", "algo.learning_starts=300", "algo.batch_size=8",
                 "run.eval_episodes=1", "run.progress_every_s=0"]
    job = run_in_pool(pool, 1, overrides, tmp_path / "run")
    need = DQN.storage_bytes(env_spec(make_env("ALE/Tetris-v5")), {"buffer_size": 100_000})
    if need > 0.9 * (host_available_bytes() or need):
        with pytest.raises(PoolError, match="algo.buffer_size=100000 rows x 56496 bytes"):
            job.result()
        return
    job.result()
    summary = RunResult(tmp_path / "run").summary()
    assert summary["env_id"] == "ALE/Tetris-v5" and summary["env_steps"] >= 400
    assert summary["experience_row_bytes"] == 4 * (2 * 84 * 84 * 4 // 4 + 7)
    assert summary["stop_reason"] == "max_env_steps" and summary["updates"] > 0
    # The updates moved the CNN away from its initial weights (same config and seed).
    cfg = compose(overrides)
    initial = DQN(env_spec(make_env("ALE/Tetris-v5")), cfg.algo, seed=int(cfg.seed)).state_dict()
    trained = torch.load(tmp_path / "run" / "policy.pt", weights_only=True)
    conv = [k for k in initial if k.startswith("q.") and k.endswith("weight")][0]
    assert not torch.equal(initial[conv], trained[conv]), conv


WORKER_ENVS = declare("image-star-worker-envs", 2, [
    "algo=dqn", IMAGE_ENV, "env.reward_threshold=null", "topology=star", "env.num_envs=3", "env.vector=async",
    "run.max_env_steps=900", "run.eval_every=100000", "run.progress_every_s=0", "algo.learning_starts=100",
    "algo.batch_size=16", "algo.hidden=[32]"])


def test_star_with_worker_process_environments(runs):
    """env.vector=async: the simulator steps its 3 environments in worker processes; steps and
    bytes are counted per environment, and the job ends cleanly (the workers closed)."""
    run = runs.get(WORKER_ENVS)
    summary = run.summary()
    assert summary["num_envs"] == 3 and summary["env_steps"] >= 900
    sims = [r for r in summary["per_rank"] if r["rank"] != 0]
    assert sum(r["env_steps"] for r in sims) == summary["env_steps"]
    for sim in sims:
        assert sim["env_steps"] % 3 == 0
        messages, nbytes = sim["sent"]["experience"]
        assert nbytes == sim["env_steps"] * summary["experience_row_bytes"]
    assert {r["rank"] for r in run.rows("episode")} == {"1"}


def test_the_impala_stack_shapes_refusals_and_packed_rows():
    """algo.encoder=impala: IMPALA's residual stack (3 stages, 16/32/32 channels, each halving the
    image) for DQN and PPO; a residual block whose last convolution is zero passes its input
    through; the packed columns of stored rows give the same outputs as the images; flat
    observations and small images are refused as for cnn."""
    from drlmpi.algos.encoders import ResidualBlock, impala_cnn

    assert conv_features(4, 84, 84, "impala") == 32 * 11 * 11
    spec = image_spec()
    c, h, w, _ = image_chw(spec.obs_shape)
    assert conv_features(c, h, w, "impala") == 32 * math.ceil(h / 8) * math.ceil(w / 8)
    block = ResidualBlock(3)
    torch.nn.init.zeros_(block.conv1.weight), torch.nn.init.zeros_(block.conv1.bias)
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(block(x), x)
    assert sum(isinstance(m, ResidualBlock) for m in impala_cnn(4).modules()) == 6
    ppo = PPO(spec, {**group_config("algo", "ppo"), "encoder": "impala", "hidden": [32]}, seed=0)
    assert ppo.encoder == "impala" and any(isinstance(m, ResidualBlock) for m in ppo.net.modules())
    images = every_byte_pattern(5, spec.obs_shape)
    assert ppo.net.distribution(ppo.obs_tensor(images)).logits.shape == (5, 2)
    rows = ppo.layout.empty(5)
    ppo.layout.put_obs(rows, "obs", images)
    packed = torch.from_numpy(rows)[:, ppo.layout.slices["obs"]]
    assert torch.equal(ppo.net.value(packed), ppo.net.value(ppo.obs_tensor(images)))
    dqn = DQN(spec, {**group_config("algo", "dqn"), "encoder": "impala", "hidden": [32]}, seed=0)
    assert dqn.q(dqn.obs_tensor(images)).shape == (5, 2)
    assert any(isinstance(m, ResidualBlock) for m in dqn.q.modules())
    with pytest.raises(ConfigError, match=r"encoder=impala needs images of at least 36x36"):
        resolve_encoder(image_spec(size=16), "impala", "dqn")
    with pytest.raises(ConfigError, match="encoder=impala needs image observations"):
        resolve_encoder(env_spec(gym.make("CartPole-v1")), "impala", "ppo")


@pytest.mark.parametrize("autocast", ["off", "bfloat16"])
def test_the_impala_stack_trains(autocast):
    """PPO steps through IMPALA's stack: every convolution gets a gradient, and ten steps on rows
    whose advantage favours one action (each step's ratio taken from the policy before it, as
    successive rollouts would) raise that action's probability on every one of those images.
    Under algo.autocast=bfloat16 the convolutions compute in bfloat16, the heads and gradients
    stay float32."""
    spec = image_spec()
    ppo = PPO(spec, {**group_config("algo", "ppo"), "encoder": "impala", "hidden": [32], "lr": 1e-3,
                     "vtrace": False, "normalize_advantage": False,  # (all advantages are 1)
                     "autocast": autocast}, seed=0)
    seen = []
    first_conv = next(m for m in ppo.net.modules() if isinstance(m, torch.nn.Conv2d))
    first_conv.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    obs = ppo.obs_tensor(every_byte_pattern(16, spec.obs_shape))
    action = torch.zeros(16, 1)
    with torch.no_grad():
        before = ppo.net.log_prob_entropy(ppo.net.distribution(obs), action)[0]
    batch = {"obs": obs, "action": action, "log_prob": before.clone(), "advantage": torch.ones(16),
             "return": torch.zeros(16), "value": torch.zeros(16)}
    convs = [m for m in ppo.net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 15
    for step in range(10):
        with torch.no_grad():
            batch["log_prob"] = ppo.net.log_prob_entropy(ppo.net.distribution(obs), action)[0]
        ppo.learn(batch, lambda *a: None)
        if step == 0:
            assert all(c.weight.grad is not None and c.weight.grad.abs().sum() > 0 for c in convs)
        ppo.policy.apply_gradients()
    with torch.no_grad():
        after = ppo.net.log_prob_entropy(ppo.net.distribution(obs), action)[0]
    assert (after > before).all() and after.exp().min() > 0.6, (before.exp(), after.exp())
    assert set(seen) == {torch.bfloat16 if autocast == "bfloat16" else torch.float32}
    assert after.dtype == torch.float32 and all(p.dtype == torch.float32 for p in ppo.net.parameters())


@pytest.mark.parametrize("encoder", ["cnn", "impala"])
def test_channels_last_is_the_same_network_laid_out_otherwise(encoder):
    """algo.channels_last=true: the convolutions take channels-last images (from uint8 frames and
    from packed rows alike), and the network computes what the channels-first one does - the same
    parameters, values, action probabilities and gradients - and is a report variant of its own;
    refused where no convolution stack runs."""
    spec = image_spec(size=40, channels=3)
    cfg = {**group_config("algo", "ppo"), "encoder": encoder, "hidden": [16]}
    first, last = PPO(spec, cfg, seed=0), PPO(spec, {**cfg, "channels_last": True}, seed=0)
    layouts = []
    conv = next(m for m in last.net.modules() if isinstance(m, torch.nn.Conv2d))
    conv.register_forward_pre_hook(lambda module, args: layouts.append(
        args[0].is_contiguous(memory_format=torch.channels_last) and not args[0].is_contiguous()))
    images = every_byte_pattern(6, spec.obs_shape)
    rows = last.layout.empty(6)
    last.layout.put_obs(rows, "obs", images)
    for obs in (last.obs_tensor(images), torch.from_numpy(rows)[:, last.layout.slices["obs"]]):
        assert torch.equal(first.policy.flat.params, last.policy.flat.params)
        dist_f, value_f = first.net.distribution_value(obs)
        dist_l, value_l = last.net.distribution_value(obs)
        assert torch.allclose(value_f, value_l, atol=1e-5)
        assert torch.allclose(dist_f.probs, dist_l.probs, atol=1e-6)
        for ppo, value in ((first, value_f), (last, value_l)):
            ppo.policy.backward(value.square().mean())
        assert torch.allclose(first.policy.flat.grads, last.policy.flat.grads, rtol=1e-4, atol=1e-5)
    assert layouts == [True, True]
    parts = PPO.report_variant_parts({**cfg, "channels_last": True})
    assert parts == ([] if encoder == "cnn" else ["encoder=impala"]) + ["channels_last=true"]
    with pytest.raises(ConfigError, match="algo.channels_last=true lays out a convolution stack's images"):
        PPO(env_spec(gym.make("CartPole-v1")), {**group_config("algo", "ppo"), "channels_last": True})


def test_autocast_is_refused_on_flat_observations():
    with pytest.raises(ConfigError, match="algo.autocast=bfloat16 runs an image trunk.*vector of 4"):
        PPO(env_spec(gym.make("CartPole-v1")), {**group_config("algo", "ppo"), "autocast": "bfloat16"})


def test_the_learner_benchmark_measures_impalas_stack_with_and_without_autocast(capsys):
    """``bench.learner --obs atari_impala --autocast``: its PPO update closure on the preset's
    network, in float32 and under autocast (a short rollout here: the benchmark's 1,024 rows
    through IMPALA's stack take seconds on one CPU thread); --autocast without PPO on images is
    refused in one line."""
    from drlmpi.bench.learner import drlmpi_step, main

    for autocast in ("off", "bfloat16"):
        step = drlmpi_step("ppo", 8, "cpu", "off", obs="atari_impala", autocast=autocast, rollout_steps=16,
                           epochs=1)
        metrics = [step() for _ in range(3)]  # two minibatches of a rollout, then the next rollout
        assert all(np.isfinite(m["policy_loss"]) for m in metrics)
    with pytest.raises(SystemExit):
        main(["--algo", "dqn", "--obs", "atari", "--autocast"])
    assert "--autocast measures PPO on images" in capsys.readouterr().err
