"""The configuration schema: every option's type, default, allowed range and one-line doc,
generated from the settings classes (:mod:`drlmpi.config.scopes`: the top level, ``run``, ``env``
and each algorithm; each topology's beside its class, added by the topology registry through
:func:`add_scope`).

:data:`SETTINGS` maps each scope to its class, :data:`SCHEMA` to its options. :func:`register`
stores each scope's defaults as a node of Hydra's ConfigStore (``schema/root``, ``schema/env``,
``schema/algo/<name>``, ``schema/topology/<name>``); each YAML file in ``conf/`` starts its
defaults list with its scope's node and keeps only what differs (an environment's id and
threshold, a tuned pair's hyperparameters, a preset's sweep). Importing this module registers the
nodes it holds, the registry the topologies' (the entry point does both; so must code that calls
Hydra's ``compose`` API itself); :func:`group_config` gives one group option's composed values
without Hydra (tests, benchmarks). The checks against it: :mod:`drlmpi.config.checks`; what users
read of it: :mod:`drlmpi.run.reference`; the typed objects a run reads:
:mod:`drlmpi.config.settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from drlmpi.config.options import Option
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


def defaults(scope: str) -> dict[str, Any]:
    """The defaults of one scope as plain values (``???`` where an option has none)."""
    return {key: list(option.default) if isinstance(option.default, tuple) else option.default
            for key, option in SCHEMA[scope].items()}


def nodes() -> dict[str, dict[str, Any]]:
    """ConfigStore path -> node: ``schema/root`` (top level and ``run``), ``schema/env``,
    ``schema/algo/<name>``, ``schema/topology/<name>`` (the topologies' once registered)."""
    out = {"schema/root": {**defaults(""), "run": defaults("run")}, "schema/env": defaults("env")}
    for scope in SCHEMA:
        if "/" in scope:
            out[f"schema/{scope}"] = defaults(scope)
    return out


def _store(path: str, node: dict[str, Any]) -> None:
    from hydra.core.config_store import ConfigStore

    group, _, name = path.rpartition("/")
    ConfigStore.instance().store(group=group, name=name, node=node)


def register() -> None:
    """Store every scope's defaults in Hydra's ConfigStore (plain nodes: values are checked by
    :func:`check_config`, which words its refusals for users, not by OmegaConf's types)."""
    for path, node in nodes().items():
        _store(path, node)


def add_scope(scope: str, options: dict[str, Option] | type[Settings]) -> None:
    """Add a scope declared outside this module - a topology's, which its own module declares
    (:mod:`drlmpi.topologies.core.registry` adds them all) - and store its node for Hydra."""
    if isinstance(options, type):
        SETTINGS[scope] = options
        options = options_of(options)
    SCHEMA[scope] = options
    _store(f"schema/{scope}", defaults(scope))


def group_scopes(group: str) -> dict[str, dict[str, Option]]:
    """Every scope of ``algo`` or ``topology`` added so far, by option name (``dqn``, ``star``)."""
    return {scope.split("/", 1)[1]: options for scope, options in SCHEMA.items()
            if scope.startswith(f"{group}/")}


def group_config(group: str, name: str) -> DictConfig:
    """``conf/<group>/<name>.yaml`` over its schema defaults, without Hydra (what composing
    ``<group>=<name>`` puts under ``<group>``, before tuned files, presets and overrides)."""
    own = OmegaConf.load(group_files(group)[name])
    base = defaults(f"{group}/{name}" if group in ("algo", "topology") else group)
    own_values = {k: v for k, v in OmegaConf.to_container(own).items() if k != "defaults"}
    return OmegaConf.merge(OmegaConf.create(base), own_values)


def scope_of(cfg: Mapping[str, Any], path: str) -> dict[str, Option] | None:
    """The schema of ``cfg[path]`` (``algo``/``topology`` by their composed ``name``; ``None`` for a
    name without a scope). Topology scopes come from their modules: checking one before any is
    registered is a mistake of the caller's, not a custom topology."""
    if path in ("", "run", "env"):
        return SCHEMA[path]
    return named_scope(path, (cfg.get(path) or {}).get("name"))


def named_scope(group: str, name: Any) -> dict[str, Option] | None:
    """The scope of ``algo`` or ``topology`` option ``name`` (``None``: no scope of that name)."""
    if group == "topology" and not group_scopes("topology"):
        raise RuntimeError("no topology is registered: call drlmpi.topologies.core.registry.register() "
                           "before checking a config")
    return SCHEMA.get(f"{group}/{name}")


register()  # importing the schema makes its nodes available to Hydra (entry point, compose API)
