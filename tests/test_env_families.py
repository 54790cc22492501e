"""Environment families (drlmpi/envs/families/): every id goes to the first family that recognises
it, ``gym`` last; a family added to the registry is found for its ids and its option check,
make and make options are the ones a run uses."""

from __future__ import annotations

import gymnasium
import pytest
from omegaconf import OmegaConf

from drlmpi.config.errors import ConfigError
from drlmpi.envs import families
from drlmpi.envs.families import FAMILIES, Family, family_of
from drlmpi.envs.make import env_make_kwargs, make_env
from drlmpi.run.preflight import check_env_options


@pytest.mark.parametrize("env_id, name", [("CartPole-v1", "gym"), ("LunarLander-v3", "gym"),
                                          ("ALE/Breakout-v5", "atari"), ("ALE/Pong-v5", "atari"),
                                          ("HalfCheetah-v5", "mujoco"), ("Hopper-v5", "mujoco"),
                                          ("Pendulum-v1", "gym"), ("No-Such-v0", "gym")])
def test_each_id_goes_to_its_family(env_id, name):
    assert family_of(env_id).name == name


def test_gym_is_the_last_family_and_recognises_every_id():
    assert [family.name for family in FAMILIES] == ["atari", "mujoco", "gym"]
    assert FAMILIES[-1].recognises("Anything-v0")


def test_what_each_family_declares():
    by_name = {family.name: family for family in FAMILIES}
    assert not by_name["atari"].renders and "AtariVectorEnv" in by_name["atari"].no_render_reason
    assert by_name["gym"].renders and by_name["mujoco"].renders
    assert "pip install 'drlmpi[mujoco]'" in by_name["mujoco"].install_hint
    assert "pip install ale-py" in by_name["atari"].install_hint
    assert by_name["gym"].install_hint == ""


class _Made(gymnasium.Env):
    def __init__(self, env_id: str, kwargs: dict) -> None:
        self.env_id, self.kwargs = env_id, kwargs


def test_a_family_added_to_the_registry_is_found_checked_and_made(monkeypatch):
    checked = []

    def check(env):
        checked.append(env.id)
        if env.get("speed", 1) > 9:
            raise ConfigError(f"env.speed must be at most 9, got env.speed={env.speed}")

    fake = Family(name="fake", recognises=lambda env_id: env_id.startswith("Fake/"),
                  make=lambda env_id, **kwargs: _Made(env_id, kwargs),
                  make_options=lambda env_cfg: {"speed": env_cfg.get("speed", 1)},
                  check_options=check, install_hint="pip install fake")
    monkeypatch.setattr(families, "FAMILIES", (*FAMILIES[:-1], fake, FAMILIES[-1]))
    assert family_of("Fake/Thing-v0") is fake
    assert family_of("ALE/Breakout-v5").name == "atari" and family_of("CartPole-v1").name == "gym"

    check_env_options(OmegaConf.create({"id": "Fake/Thing-v0", "speed": 3}))
    assert checked == ["Fake/Thing-v0"]
    with pytest.raises(ConfigError, match="env.speed must be at most 9"):
        check_env_options(OmegaConf.create({"id": "Fake/Thing-v0", "speed": 10}))

    kwargs = env_make_kwargs(OmegaConf.create({"id": "Fake/Thing-v0", "speed": 3, "kwargs": {"k": 1}}))
    assert kwargs == {"max_episode_steps": None, "speed": 3, "k": 1}
    env = make_env("Fake/Thing-v0", **kwargs)
    assert isinstance(env, _Made) and env.env_id == "Fake/Thing-v0" and env.kwargs["speed"] == 3


def test_the_gym_family_refuses_ale_options():
    with pytest.raises(ConfigError, match="env.atari is for ALE/ ids"):
        check_env_options(OmegaConf.create({"id": "CartPole-v1", "atari": {"frame_stack": 2}}))
    check_env_options(OmegaConf.create({"id": "CartPole-v1"}))
