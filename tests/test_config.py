"""Config composition (Hydra's compose API, no MPI) and start-up validation."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from drlmpi.__main__ import _launch_time_resolver
from drlmpi.algos.base import ConfigError
from drlmpi.run import validate
from tests.conftest import CONF

OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True)


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_default_is_dqn_cartpole_sequential_with_tuned_values():
    cfg = _compose()
    assert (cfg.algo.name, cfg.env.id, cfg.topology.name) == ("dqn", "CartPole-v1", "sequential")
    assert cfg.env.reward_threshold == 475
    assert cfg.run.eval_every == 2000  # from conf/tuned/dqn_cartpole.yaml


def test_tuned_file_follows_the_env_choice():
    cfg = _compose("env=lunarlander", "topology=star")
    assert cfg.env.id == "LunarLander-v3"
    assert cfg.algo.lr == pytest.approx(6.3e-4)
    assert cfg.run.max_env_steps == 500_000


def test_command_line_overrides_beat_tuned_files():
    cfg = _compose("algo.lr=0.01", "env.id=Acrobot-v1", "topology.sync_every=7", "seed=3")
    assert cfg.algo.lr == 0.01 and cfg.env.id == "Acrobot-v1"
    assert cfg.topology.sync_every == 7 and cfg.seed == 3


@pytest.mark.parametrize("group,options", [
    ("algo", ["dqn"]), ("env", ["cartpole", "lunarlander", "pendulum"]),
    ("topology", ["sequential", "p2p", "star"]),
])
def test_every_documented_option_composes(group, options):
    for option in options:
        cfg = _compose(f"{group}={option}")
        assert cfg[group].name == option


def test_validate_accepts_and_refuses():
    algo_cls, topology_cls, spec = validate(_compose(), world_size=1)
    assert spec.n_actions == 2 and topology_cls.name == "sequential"
    with pytest.raises(ConfigError, match="topology=p2p needs exactly 2 ranks, but the job has 4"):
        validate(_compose("topology=p2p"), world_size=4)
    with pytest.raises(ConfigError, match="algo=dqn needs a discrete action space"):
        validate(_compose("env=pendulum"), world_size=1)
    with pytest.raises(ConfigError, match="world_size=3 was asked for but this job has 1"):
        validate(_compose("world_size=3"), world_size=1)
    with pytest.raises(ConfigError, match="env.num_envs must be >= 1"):
        validate(_compose("env.num_envs=0"), world_size=1)
    with pytest.raises(ConfigError, match="cannot be imported"):
        validate(_compose("topology._target_=drlmpi.topologies.nope.Nope"), world_size=1)
