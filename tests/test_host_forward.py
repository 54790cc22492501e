"""The numpy acting path (drlmpi/algos/host_forward.py): the same actions as torch's, on the
weights a simulator receives, and only where it applies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from drlmpi.algos.dqn import DQN
from drlmpi.algos.host_forward import MAX_HOST_ROWS, HostMLP
from drlmpi.bench.act import CASES
from drlmpi.bench.learner import algo_settings
from drlmpi.envs.spec import EnvSpec


def acting(name: str, seed: int = 0):
    cls, spec = CASES[name]
    return cls(spec, algo_settings(name, 64), device="cpu", seed=seed, learner=False), spec


@pytest.mark.parametrize("name", ["dqn", "td3"])
def test_the_host_path_acts_as_torch_does_on_received_weights(name):
    algo, spec = acting(name)
    rng = np.random.default_rng(1)
    for rows in range(1, MAX_HOST_ROWS + 1):
        obs = rng.normal(size=(rows, spec.obs_dim)).astype(np.float32)
        through_torch = algo.act_tensor(algo.obs_tensor(obs), True).numpy()
        np.testing.assert_allclose(algo.act_host(obs), through_torch, rtol=0, atol=1e-5)
    # weights arriving as a simulator gets them: loaded, and written straight into the buffer
    # (an MPI receive): the next call must use them, not a copy taken at construction
    obs = rng.normal(size=(3, spec.obs_dim)).astype(np.float32)
    before = algo.act_host(obs).copy()
    algo.policy.flat.load_params(rng.normal(size=algo.policy.flat.numel).astype(np.float32))
    loaded = algo.act_host(obs)
    np.testing.assert_allclose(loaded, algo.act_tensor(algo.obs_tensor(obs), True).numpy(), atol=1e-4)
    algo.policy.flat.params_numpy()[:] = rng.normal(size=algo.policy.flat.numel).astype(np.float32)
    received = algo.act_host(obs)
    np.testing.assert_allclose(received, algo.act_tensor(algo.obs_tensor(obs), True).numpy(), atol=1e-4)
    assert not (np.array_equal(before, loaded) and np.array_equal(loaded, received))


@pytest.mark.parametrize("name", ["dqn", "td3"])
def test_exploring_actions_match_those_acted_through_torch(name):
    host, spec = acting(name, seed=3)
    plain, _ = acting(name, seed=3)
    plain.act_host = lambda obs: None
    calls = []
    wrapped = host.act_host
    host.act_host = lambda obs: calls.append(len(obs)) or wrapped(obs)
    obs = np.random.default_rng(2).normal(size=(200, 1, spec.obs_dim)).astype(np.float32)
    steps = 10**9  # past warm-up and exploration decay: the network chooses
    for o in obs:
        a, _ = host.act(o, steps, True)
        b, _ = plain.act(o, steps, True)
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert len(calls) == len(obs)
    host.act(np.zeros((MAX_HOST_ROWS + 1, spec.obs_dim), np.float32), steps, True)
    assert len(calls) == len(obs), "more rows than MAX_HOST_ROWS act through torch"


def test_only_plain_cpu_mlps_get_a_host_twin():
    mlp = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2), nn.Tanh())
    assert HostMLP.of(mlp) is not None
    assert HostMLP.of(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2, 2))) is None
    assert HostMLP.of(nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.ReLU())) is None  # two activations
    assert HostMLP.of(nn.Sequential(nn.Linear(3, 8, bias=False))) is None
    assert HostMLP.of(nn.Sequential(nn.Linear(3, 8).double())) is None
    assert HostMLP.of(nn.Linear(3, 8)) is None
    x = torch.randn(2, 3)
    np.testing.assert_allclose(HostMLP.of(mlp)(x.numpy()), mlp(x).detach().numpy(), atol=1e-6)


def test_image_networks_act_through_torch():
    spec = EnvSpec("Img-v0", 36 * 36, True, 2, 1, (), (), obs_shape=(1, 36, 36), obs_dtype="uint8")
    for encoder in ("cnn", "mlp"):  # the CNN, and the MLP behind its uint8-scaling encoder
        algo = DQN(spec, algo_settings("dqn", 32, encoder=encoder), device="cpu", learner=False)
        assert algo.act_host(np.zeros((1, *spec.obs_shape), np.uint8)) is None
        actions, _ = algo.act(np.zeros((1, *spec.obs_shape), np.uint8), 10**9, False)
        assert actions.shape == (1, 1)
