"""Typed settings (drlmpi/config/settings.py, drlmpi/config/scopes.py): the schema is generated from
the settings classes, a checked config becomes a frozen object of the declared types, and a config
written before an option existed still builds (the option takes its default)."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping

import pytest
from omegaconf import OmegaConf

from drlmpi.config.schema import SCHEMA, SETTINGS, group_config
from drlmpi.config.scopes import EnvSettings, PPOSettings, RunSettings
from drlmpi.config.settings import OPTION, options_of

KINDS = {"int": int, "float": float, "bool": bool, "str": str, "ints": tuple, "map": Mapping}


@pytest.mark.parametrize("scope", sorted(SETTINGS))
def test_each_fields_type_is_its_options_kind(scope):
    """A field's annotation and its option agree (an ``int`` field holds an ``integer``): a field
    declared with the wrong maker would be checked as one type and read as another."""
    cls = SETTINGS[scope]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        option = f.metadata[OPTION]
        hint = hints[f.name]
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
        inner = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
        declared = typing.get_origin(inner) or inner
        assert declared is KINDS[option.kind] or issubclass(declared, KINDS[option.kind]), (scope, f.name)
        assert (optional and type(None) in typing.get_args(hint)) == option.nullable, (scope, f.name)
    assert SCHEMA[scope] == options_of(cls)


def test_a_checked_config_builds_a_frozen_object_of_the_declared_types():
    node = OmegaConf.create({**group_config("algo", "ppo"), "hidden": [32, 32], "lr": 1, "epochs": 4.0,
                             "rollout_steps": "${algo_rows}"})
    node = OmegaConf.merge(OmegaConf.create({"algo_rows": 512}), {"algo": node}).algo
    ppo = PPOSettings.build(node)
    assert ppo.hidden == (32, 32) and isinstance(ppo.lr, float) and ppo.lr == 1.0
    assert isinstance(ppo.epochs, int) and ppo.epochs == 4 and ppo.rollout_steps == 512
    assert ppo.name == "ppo" and ppo.vtrace is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        ppo.lr = 3.0
    assert ppo.replace(hidden=[8]).hidden == (8,) and ppo.hidden == (32, 32)


def test_maps_are_read_only_and_a_missing_option_takes_its_default():
    env = EnvSettings.build({"name": "breakout", "id": "ALE/Breakout-v5", "reward_threshold": 30,
                             "kwargs": {"frameskip": 2, "nested": {"a": [1, 2]}}})
    assert env.kwargs["frameskip"] == 2 and env.kwargs["nested"]["a"] == (1, 2)
    with pytest.raises(TypeError):
        env.kwargs["frameskip"] = 4  # type: ignore[index]
    assert env.num_envs == 1 and env.sim_cost_ms_by_rank is None and env.reward_threshold == 30.0
    assert env.as_dict()["kwargs"] == {"frameskip": 2, "nested": {"a": [1, 2]}}
    old_run = {"max_env_steps": 5000, "eval_every": 1000}  # written before later options existed
    run = RunSettings.build(old_run)
    assert run.max_env_steps == 5000 and run.memory_sample_s == 0 and run.matmul_precision == "highest"


def test_an_option_without_a_default_must_be_given():
    with pytest.raises(ValueError, match="env.id must be set"):
        EnvSettings.build({"name": "x", "reward_threshold": None})


def test_a_composed_job_becomes_its_typed_settings():
    """The whole job (Hydra's composition of the defaults, a tuned pair and overrides) as one
    typed object: each section the settings class of the algorithm and topology composed."""
    from hydra import compose, initialize_config_dir

    from drlmpi.config.job import JobSettings
    from drlmpi.config.scopes import PPOSettings
    from drlmpi.topologies.core.registry import register
    from tests.conftest import CONF

    register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["algo=ppo", "env=pendulum", "topology=star",
                                                       "algo.hidden=[32]", "seed=3"])
    job = JobSettings.build(cfg)
    assert job.seed == 3 and job.env.id == "Pendulum-v1" and isinstance(job.algo, PPOSettings)
    assert job.algo.hidden == (32,) and job.algo.lr == cfg.algo.lr
    assert job.run.eval_every == cfg.run.eval_every
    assert job.topology["name"] == "star" and job.topology["sync_every"] == cfg.topology.sync_every
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.run.max_env_steps = 1  # type: ignore[misc]
