"""The configuration schema: every option's type, default, allowed range and one-line doc,
generated from the settings classes (:mod:`drlmpi.config.scopes`: the top level, ``run``, the
``env`` options every environment has and each algorithm); each topology's scope is declared
beside its class and added by the topology registry (:mod:`drlmpi.topologies.core.registry`), each
environment family's own ``env`` options in its module (``Family.options``, scope
``env/<family>``), added by :func:`drlmpi.envs.families.register` - both through
:func:`add_scope`.

:data:`SETTINGS` maps each scope to its class, :data:`SCHEMA` to its options. :func:`register`
stores each scope's defaults as a node of Hydra's ConfigStore (``schema/root``, ``schema/env``,
``schema/env/<family>`` - every env option and the family's own -, ``schema/algo/<name>``,
``schema/topology/<name>``); each YAML file in ``conf/`` starts its defaults list with its scope's
node (an env file with its id's family's) and keeps only what differs (an environment's id and
threshold, a tuned pair's hyperparameters, a preset's sweep). Importing this module registers the
nodes it holds, the registries the topologies' and the families' (the entry point does all three;
so must code that calls Hydra's ``compose`` API itself); :func:`group_config` gives one group
option's composed values without Hydra (tests, benchmarks). The checks against it:
:mod:`drlmpi.config.checks`; what users read of it: :mod:`drlmpi.run.reference`; the typed
objects a run reads: :mod:`drlmpi.config.settings`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from drlmpi.config.inputs import read_yaml
from drlmpi.config.options import Option, plain
from drlmpi.config.plugins import group_files
from drlmpi.config.scopes import (
    DQNSettings,
    EnvSettings,
    PPOSettings,
    RandomSettings,
    RootSettings,
    RunSettings,
    TD3Settings,
)
from drlmpi.config.settings import Settings, options_of

#: the settings class of each scope (a topology's is added by the topology registry: add_scope)
SETTINGS: dict[str, type[Settings]] = {cls.scope: cls for cls in (
    RootSettings, RunSettings, EnvSettings, DQNSettings, TD3Settings, PPOSettings, RandomSettings)}

#: every scope's options, generated from its settings class
SCHEMA: dict[str, dict[str, Option]] = {scope: options_of(cls) for scope, cls in SETTINGS.items()}


def default_of(option: Option) -> Any:
    """An option's default as a plain value of its own (a list where the option holds a tuple)."""
    return list(option.default) if isinstance(option.default, tuple) else copy.copy(option.default)


def defaults(scope: str) -> dict[str, Any]:
    """The defaults of one scope as plain values (``???`` where an option has none)."""
    return {key: default_of(option) for key, option in SCHEMA[scope].items()}


def node(scope: str) -> DictConfig:
    """The ConfigStore node of ``scope``: its defaults - an environment family's (``env/<name>``)
    over every environment's. A map option whose default is a mapping stays open: a key is set
    with or without ``+`` (``env.atari.frame_stack=2``)."""
    options = {**SCHEMA["env"], **SCHEMA[scope]} if scope.startswith("env/") else SCHEMA[scope]
    out = OmegaConf.create({key: default_of(option) for key, option in options.items()})
    for key, option in options.items():
        if option.kind == "map" and isinstance(option.default, Mapping):
            OmegaConf.set_struct(out[key], False)
    return out


def nodes() -> dict[str, Any]:
    """ConfigStore path -> node: ``schema/root`` (top level and ``run``), ``schema/env``,
    ``schema/algo/<name>``, ``schema/topology/<name>`` and ``schema/env/<family>`` (the
    topologies' and families' once registered)."""
    out: dict[str, Any] = {"schema/root": {**defaults(""), "run": defaults("run")}}
    for scope in SCHEMA:
        if scope not in ("", "run"):
            out[f"schema/{scope}"] = node(scope)
    return out


def _store(path: str, value: Any) -> None:
    from hydra.core.config_store import ConfigStore

    group, _, name = path.rpartition("/")
    ConfigStore.instance().store(group=group, name=name, node=value)


def register() -> None:
    """Store every scope's defaults in Hydra's ConfigStore (plain nodes: values are checked by
    :func:`check_config`, which words its refusals for users, not by OmegaConf's types)."""
    for path, value in nodes().items():
        _store(path, value)


def add_scope(scope: str, options: dict[str, Option] | type[Settings]) -> None:
    """Add a scope declared outside this module - a topology's or an environment family's, which
    its own module declares (:mod:`drlmpi.topologies.core.registry`, :mod:`drlmpi.envs.families`
    add them all), as its options or its settings class - and store its node for Hydra."""
    if isinstance(options, type):
        SETTINGS[scope] = options
        options = options_of(options)
    SCHEMA[scope] = options
    _store(f"schema/{scope}", node(scope))


def group_scopes(group: str) -> dict[str, dict[str, Option]]:
    """Every scope of ``algo``, ``topology`` or ``env`` (the families') added so far, by name
    (``dqn``, ``star``, ``atari``)."""
    return {scope.split("/", 1)[1]: options for scope, options in SCHEMA.items()
            if scope.startswith(f"{group}/")}


def file_scope(group: str, name: str) -> str | None:
    """The scope whose node ``conf/<group>/<name>.yaml`` starts from (``env/atari`` for a file
    whose defaults list names ``/schema/env/atari@_here_``); ``None``: no such file or scope."""
    path = group_files(group).get(name)
    if path is None:
        return None
    for entry in read_yaml(path, kind=dict).get("defaults") or ():
        text = str(entry)
        if text.startswith("/schema/") and text.endswith("@_here_"):
            scope = text.removeprefix("/schema/").removesuffix("@_here_")
            return scope if scope in SCHEMA else None
    return None


def group_config(group: str, name: str) -> DictConfig:
    """``conf/<group>/<name>.yaml`` over its schema defaults, without Hydra (what composing
    ``<group>=<name>`` puts under ``<group>``, before tuned files, presets and overrides)."""
    own = read_yaml(group_files(group)[name], kind=dict)
    scope = file_scope(group, name)
    own_values = {k: v for k, v in OmegaConf.to_container(own).items() if k != "defaults"}
    return OmegaConf.merge(node(scope) if scope else OmegaConf.create({}), own_values)


def scope_values(options: Mapping[str, Option], section: Mapping[str, Any]) -> dict[str, Any]:
    """``section``'s values of ``options`` (plain), an option's default where ``section`` lacks
    it (a family's options where ``env.id=`` names one of its ids on another family's env file)."""
    return {key: plain(section[key]) if key in section else default_of(option)
            for key, option in options.items()}


register()  # importing the schema makes its nodes available to Hydra (entry point, compose API)
