"""Environment families (drlmpi/envs/families/): every id goes to the first family that recognises
it, ``gym`` last; each family owns its ``env`` options (the atari family ``env.num_threads`` and
``env.atari``; its env files start from its node), which another family's id refuses; a family
added to the registry is found for its ids, and its options, check and make are the ones a run
uses; the shared layers ask the family (the bank a simulator steps, the threads a rank runs). Run
directories written while those options sat in the shared ``env`` scope still load in the report
and recompose for ``resume=`` (committed ones under docs/results/)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import gymnasium
import numpy as np
import pytest
from omegaconf import OmegaConf

from drlmpi.config.checks import check_config
from drlmpi.config.errors import ConfigError
from drlmpi.config.settings import Settings, integer
from drlmpi.envs import families
from drlmpi.envs.atari import check_atari_options
from drlmpi.envs.families import FAMILIES, Family, check_env, env_threads, family_of, joined_bank
from drlmpi.envs.make import env_make_kwargs, make_env
from drlmpi.report.runs import load_run
from drlmpi.run.arguments import resume_arguments
from drlmpi.run.preflight import check_env_options, check_resume
from tests.conftest import REPO
from tests.pool_worker import compose

#: a run of the PPO Breakout preset written before the families owned their options (central, 16
#: ranks on an H100 host): its saved config has env.num_threads and env.atari in the env section
OLD_ALE_RUN = REPO / "docs" / "results" / "h100host_ppo_breakout_16" / "central_seed2"
#: a LunarLander run of the same time: the Atari keys sit in its (gym) env section too
OLD_GYM_RUN = REPO / "docs" / "results" / "2core_dqn_lunar_polyak" / "star16_sync64_seed0"


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
    assert set(by_name["atari"].options) == {"num_threads", "atari"}  # the family's own options
    assert not by_name["gym"].options and not by_name["mujoco"].options


class _Made(gymnasium.Env):
    def __init__(self, env_id: str, kwargs: dict) -> None:
        self.env_id, self.kwargs = env_id, kwargs


def test_a_family_added_to_the_registry_is_found_checked_and_made(monkeypatch):
    checked = []

    def check(env):
        checked.append(env.id)
        if env.speed > 9:
            raise ConfigError(f"env.speed must be at most 9, got env.speed={env.speed}")

    @dataclasses.dataclass(frozen=True)
    class FakeOptions(Settings):  # a family declares its own env options as settings
        speed: int = integer(1, "how fast")

    fake = Family(name="fake", recognises=lambda env_id: env_id.startswith("Fake/"),
                  make=lambda env_id, **kwargs: _Made(env_id, kwargs),
                  settings=FakeOptions, threads=lambda options: options["speed"],
                  check_options=check, install_hint="pip install fake")
    monkeypatch.setattr(families, "FAMILIES", (*FAMILIES[:-1], fake, FAMILIES[-1]))
    assert family_of("Fake/Thing-v0") is fake
    assert family_of("ALE/Breakout-v5").name == "atari" and family_of("CartPole-v1").name == "gym"

    check_env_options(OmegaConf.create({"id": "Fake/Thing-v0", "speed": 3}))
    assert checked == ["Fake/Thing-v0"]
    with pytest.raises(ConfigError, match="env.speed must be at most 9"):
        check_env_options(OmegaConf.create({"id": "Fake/Thing-v0", "speed": 10}))
    with pytest.raises(ConfigError, match=r"^env.speed is an option of the fake family \(Gymnasium ids\), "
                                          r"not of env.id=CartPole-v1 \(gym family\)"):
        check_env_options(OmegaConf.create({"id": "CartPole-v1", "speed": 3}))

    kwargs = env_make_kwargs(section(id="Fake/Thing-v0", speed=3, kwargs={"k": 1}))
    assert kwargs == {"max_episode_steps": None, "speed": 3, "k": 1}
    env = make_env("Fake/Thing-v0", **kwargs)
    assert isinstance(env, _Made) and env.env_id == "Fake/Thing-v0" and env.kwargs["speed"] == 3
    # a section without the option (composed from another family's env file): its default
    assert env_make_kwargs(section(id="Fake/Thing-v0"))["speed"] == 1
    assert env_threads(section(id="Fake/Thing-v0", speed=4)) == 4


def section(**values):
    """An env section as a run's composed config holds it (a name and a threshold beside the id)."""
    return OmegaConf.create({"name": "test", "reward_threshold": None, **values})


def test_another_familys_option_is_refused_unless_it_holds_its_default():
    with pytest.raises(ConfigError, match=r"^env.atari is an option of the atari family \(ALE/ ids\), not "
                                          r"of env.id=CartPole-v1 \(gym family\): remove it, got "
                                          r"env.atari=\{'frame_stack': 2\}$"):
        check_env(OmegaConf.create({"id": "CartPole-v1", "atari": {"frame_stack": 2}}))
    with pytest.raises(ConfigError, match="env.num_threads is an option of the atari family"):
        check_env(OmegaConf.create({"id": "Hopper-v5", "num_threads": 2}))
    # what an atari env file's section carries (env=breakout env.id=CartPole-v1), and an old
    # run's saved section: the defaults, or null
    check_env(OmegaConf.create({"id": "CartPole-v1", "num_threads": 1, "atari": {}}))
    check_env(OmegaConf.create({"id": "CartPole-v1", "num_threads": 1, "atari": None}))
    check_env(OmegaConf.create({"id": "CartPole-v1"}))


def test_the_shared_layers_ask_the_family():
    gym_env = section(id="CartPole-v1", kwargs={})
    ale_env = section(id="ALE/Tetris-v5", num_threads=3, atari={"frame_stack": 2})
    assert env_threads(gym_env) == 1 and env_threads(ale_env) == 3
    assert env_make_kwargs(gym_env) == {"max_episode_steps": None}  # no option of another family
    assert env_make_kwargs(ale_env) == {"max_episode_steps": None, "num_threads": 3,
                                        "atari": {"frame_stack": 2}}
    envs = [make_env("CartPole-v1") for _ in range(2)]
    assert joined_bank(envs, np.float32) is None  # gym steps them one after another
    ale = [make_env("ALE/Tetris-v5", num_threads=2) for _ in range(2)]
    bank = joined_bank(ale, np.uint8)  # the atari family: one AtariVectorEnv
    assert bank.mode == "ale" and bank.n == 2 and bank.num_threads == 2
    bank.close()


def test_the_family_files_carry_its_options_and_others_do_not():
    breakout, cartpole = compose(["env=breakout", "env.num_threads=4"]), compose(["env=cartpole"])
    assert breakout.env.num_threads == 4 and breakout.env.atari == {}
    assert "num_threads" not in cartpole.env and "atari" not in cartpole.env
    check_config(breakout)
    check_config(cartpole)


@pytest.mark.parametrize("run_dir, env, topology, ranks", [(OLD_ALE_RUN, "breakout", "central", 16),
                                                          (OLD_GYM_RUN, "lunarlander", "star", 2)])
def test_an_old_run_directory_loads_in_the_report(run_dir, env, topology, ranks):
    saved = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    assert saved.env.num_threads == 1 and saved.env.atari is None  # the layout before the families'
    run = load_run(run_dir)
    assert (run.env, run.algo.split("[")[0], run.world_size) == (env, saved.algo.name, ranks)
    assert run.topology.startswith(topology) and run.summary["env_steps"] > 0
    # what play and the checks make of the saved section (python -m drlmpi.play RUN_DIR)
    check_config(saved)
    check_env_options(saved.env)
    assert env_make_kwargs(saved.env) == ({"max_episode_steps": None, "num_threads": 1, "atari": None}
                                          if env == "breakout" else {"max_episode_steps": None})


@pytest.mark.parametrize("run_dir", [OLD_ALE_RUN, OLD_GYM_RUN], ids=["breakout", "lunarlander"])
def test_an_old_run_directory_recomposes_for_resume(tmp_path, run_dir):
    """``resume=DIR`` recomposes the run from its saved overrides with today's files: the env
    section comes out as the run had it (the Atari keys where its id is an ALE one; null and
    ``{}`` both mean every default) and passes the run plan's checks and its comparison with the
    checkpoint. The committed directory has no checkpoint (its tensors are not what is checked
    here), so its copy is given the description its last checkpoint would have had."""
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    saved, ranks = OmegaConf.load(copy / ".hydra" / "config.yaml"), load_run(run_dir).world_size
    (copy / "checkpoint").mkdir()
    meta = {"generation": 1, "world_size": ranks, "topology": saved.topology.name,
            "algo": saved.algo.name, "env": saved.env.id, "ranks_with_state": []}
    (copy / "checkpoint" / "meta.json").write_text(json.dumps(meta))
    argv, resumed_ranks = resume_arguments([f"resume={copy}"])
    assert resumed_ranks == ranks
    cfg = compose([a for a in argv if not a.startswith("hydra.")])
    ale = family_of(saved.env.id).name == "atari"
    # a gym id's section loses the Atari keys; an ALE id's keeps them
    kept = [key for key in saved.env if ale or key not in ("num_threads", "atari")]
    assert sorted(cfg.env) == sorted(kept)
    assert all(cfg.env[key] == saved.env[key] for key in kept if key != "atari")
    if ale:
        assert check_atari_options(cfg.env.atari) == check_atari_options(saved.env.atari)
    check_config(cfg)
    check_env_options(cfg.env)
    assert check_resume(cfg, ranks) == meta

