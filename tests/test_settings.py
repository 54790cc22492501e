"""Typed settings (drlmpi/config/settings.py, drlmpi/config/scopes.py): the schema is generated from
the settings classes (every topology's too: drlmpi/topologies/core/registry.py), a checked config
becomes a frozen object of the declared types, and a config written before an option existed still
builds (the option takes its default)."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from drlmpi.config.schema import SCHEMA, SETTINGS, group_config
from drlmpi.config.scopes import EnvSettings, PPOSettings, RunSettings, TopologySettings
from drlmpi.config.settings import declaration_problem, integer, options_of, text
from drlmpi.topologies.core.base import SyncFields
from drlmpi.topologies.core.registry import built_in, register, settings_problem
from drlmpi.topologies.star import Star, StarSettings

register()  # the topologies' scopes too, before the parameters below are made from SETTINGS


@pytest.mark.parametrize("scope", sorted(SETTINGS))
def test_each_fields_type_is_its_options_kind(scope):
    """A field's annotation and its option agree (an ``int`` field holds an ``integer``): a field
    declared with the wrong maker would be checked as one type and read as another. Every scope,
    the topologies' included; the schema holds each class's options."""
    assert declaration_problem(SETTINGS[scope]) is None
    assert SCHEMA[scope] == options_of(SETTINGS[scope])


def test_the_scopes_include_every_topology():
    assert {f"topology/{name}" for name in built_in()} <= set(SETTINGS) and len(built_in()) >= 8


@dataclasses.dataclass(frozen=True)
class _WrongType(TopologySettings):
    laps: str = integer(3, "rounds a lap lasts")


@dataclasses.dataclass(frozen=True)
class _NotNullable(TopologySettings):
    laps: int = integer(None, "rounds a lap lasts (null: none)", nullable=True)


@dataclasses.dataclass(frozen=True)
class _NullableText(TopologySettings):
    label: str | None = text("x", "a label")


class _NotADataclass(TopologySettings):
    laps: int = integer(3, "rounds a lap lasts")


@dataclasses.dataclass(frozen=True)
class _NoMaker(TopologySettings):
    laps: int = 3


def test_a_broken_settings_declaration_is_said_in_one_line():
    """An annotation that disagrees with its field maker (type or nullability), a subclass left
    without @dataclass (its fields would silently be none of the scope's) or a field made without
    a maker: each said in one line."""
    assert declaration_problem(TopologySettings) is None and declaration_problem(PPOSettings) is None
    assert declaration_problem(_WrongType) == ("_WrongType.laps is annotated str but made as a int option: "
                                               "annotate it int or use the maker of its type")
    assert declaration_problem(_NotNullable) == ("_NotNullable.laps is annotated int but its option is "
                                                 "nullable: add '| None'")
    assert declaration_problem(_NullableText) == ("_NullableText.label is annotated str | None but its "
                                                  "option is not nullable: drop '| None'")
    assert declaration_problem(_NotADataclass) == ("_NotADataclass is not a dataclass: declare it with "
                                                   "@dataclass(frozen=True)")
    assert declaration_problem(_NoMaker) == ("_NoMaker.laps has no option: make it with a field maker "
                                             "(integer, text, ...)")


def test_the_registry_refuses_a_topology_whose_settings_are_declared_wrongly():
    """A topology whose settings class is declared wrongly, is no settings class, or that still
    declares a dict of options is refused by the registry before anything reads its config."""

    class Broken(Star):
        settings_class = _WrongType

    class NotSettings(Star):
        settings_class = dict

    class OldStyle(Star):
        options = {"laps": integer(3, "rounds a lap lasts")}

    assert settings_problem(Star) is None and settings_problem(Broken) == declaration_problem(_WrongType)
    assert settings_problem(NotSettings).startswith("settings_class is <class 'dict'>, not a subclass of "
                                                    "drlmpi.config.scopes.TopologySettings")
    assert settings_problem(OldStyle).startswith("it declares its options as a dict (options = {...}), which "
                                                 "drlmpi no longer reads: declare them as a frozen dataclass")


@pytest.mark.parametrize("name", sorted(built_in()))
def test_each_topology_builds_its_typed_settings_from_its_composed_config(name):
    """``conf/topology/<name>.yaml`` over its schema node becomes the topology's settings class,
    holding exactly the composed values, typed; the topology reads that object."""
    cls = built_in()[name]
    node = group_config("topology", name)
    settings = cls.settings_of(node)
    assert type(settings) is cls.settings_class is SETTINGS[f"topology/{name}"]
    assert isinstance(settings, TopologySettings) and settings.scope == f"topology/{name}"
    assert (settings.name, settings._target_) == (name, f"{cls.__module__}.{cls.__qualname__}")
    assert settings.as_dict() == OmegaConf.to_container(node)
    assert cls(node).cfg == settings and cls.settings_of(settings) is settings
    if isinstance(settings, SyncFields):  # YAML may write a count as 64.0: read as the int it is
        every = cls.settings_of(OmegaConf.merge(node, {"sync_every": 64.0})).sync_every
        assert every == 64 and type(every) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.name = "other"  # type: ignore[misc]


def test_a_plugins_settings_take_their_target_and_name_from_its_yaml_file():
    """A settings class that leaves ``_target_`` and ``name`` to the registry (a plugin's, or one
    class under a second YAML file) is registered as a subclass whose defaults are the file's."""
    from drlmpi.topologies.core.registry import named_settings

    assert named_settings(StarSettings, "drlmpi.topologies.star.Star", "star") is StarSettings
    derived = named_settings(StarSettings, "plugin.Fast", "fast")
    assert issubclass(derived, StarSettings) and derived.scope == "topology/fast"
    assert declaration_problem(derived) is None
    options = options_of(derived)
    assert (options["_target_"].default, options["name"].default) == ("plugin.Fast", "fast")
    assert list(options) == list(options_of(StarSettings))
    assert derived.build({}).name == "fast" and StarSettings.build({}).name == "star"


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
    assert isinstance(job.topology, StarSettings) and job.topology.name == "star"
    assert job.topology.sync_every == cfg.topology.sync_every and job.topology.round_rows is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.run.max_env_steps = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.topology.sync_every = 1  # type: ignore[misc]
