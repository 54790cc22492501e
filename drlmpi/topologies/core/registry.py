"""Every topology a config can name - the one registry the schema, the command line, the planner,
the sweep and the report find topologies through.

A topology is one module and one YAML file. ``topology/<name>.yaml`` (in conf/, or in a plugin
directory on ``DRLMPI_PLUGIN_PATH``: :mod:`drlmpi.config.plugins`) names its class
(``_target_``); the class declares everything else - its settings (:attr:`Topology.settings_class`,
a frozen dataclass of :class:`~drlmpi.config.scopes.TopologySettings`), its rank rules, its pace
model for the planner and any report section. :func:`register` reads every such file, imports
each class, and adds its settings class to the schema as the ``topology/<name>`` scope (stored in
Hydra's ConfigStore as ``schema/topology/<name>``, which the YAML file's defaults list starts
from), so it runs before anything checks or composes a config: the command line, the sweep
launcher and the planner call it; so must code that composes through Hydra's API itself.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from drlmpi.config import scopes
from drlmpi.config.errors import ConfigError
from drlmpi.config.inputs import read_yaml
from drlmpi.config.plugins import CONF_DIR, group_files, plugin_dirs
from drlmpi.config.schema import SCHEMA, add_scope
from drlmpi.config.settings import declaration_problem, options_of

if TYPE_CHECKING:
    from drlmpi.topologies.core.base import Topology

#: where a topology's settings are declared, for the refusal of one that declares them otherwise
WRITING_A_TOPOLOGY = "docs/topologies.md, 'Writing a topology'"


def names() -> list[str]:
    """Every topology a config can name, built-in and plugin."""
    return sorted(group_files("topology"))


def import_target(target: str) -> object:
    """What ``module.name`` names, the plugin directories on the import path (their modules
    import from them); raises ImportError or AttributeError."""
    for directory in plugin_dirs():
        if str(directory) not in sys.path:
            sys.path.append(str(directory))
    module, _, attribute = target.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def load_class(target: str) -> type[Topology]:
    """The topology class ``module.Class``, refused in one line if it is none or if its settings
    class is declared wrongly (:func:`settings_problem`)."""
    from drlmpi.topologies.core.base import Topology  # imports torch: not for names()

    try:
        cls = import_target(target)
    except Exception as exc:  # noqa: BLE001 (a plugin's module may fail in any way: one line)
        older = isinstance(exc, ImportError) and (exc.name or "").startswith("drlmpi.")
        hint = f" (written for an older drlmpi? {WRITING_A_TOPOLOGY})" if older else ""
        raise ConfigError(f"topology class {target} cannot be imported: {exc}{hint}") from None
    if not (isinstance(cls, type) and issubclass(cls, Topology)):
        raise ConfigError(f"{target} is not a Topology (drlmpi.topologies.core.base.Topology)")
    problem = settings_problem(cls)
    if problem is not None:
        raise ConfigError(f"topology class {target}: {problem}")
    return cls


def settings_problem(cls: type[Topology]) -> str | None:
    """What is wrong with how topology class ``cls`` declares its options (``None``: nothing).
    The options of a topology written for an older drlmpi, a dict of options (``options =
    {...}``), are refused rather than half read: its own code would read its config by key."""
    if isinstance(getattr(cls, "options", None), Mapping):
        return (f"it declares its options as a dict (options = {{...}}), which drlmpi no longer reads: "
                f"declare them as a frozen dataclass of drlmpi.config.scopes.TopologySettings and name it "
                f"settings_class ({WRITING_A_TOPOLOGY})")
    settings = cls.settings_class
    if not (isinstance(settings, type) and issubclass(settings, scopes.TopologySettings)):
        return (f"settings_class is {settings!r}, not a subclass of drlmpi.config.scopes.TopologySettings "
                f"({WRITING_A_TOPOLOGY})")
    return declaration_problem(settings)


def named_settings(settings: type[scopes.TopologySettings], target: str,
                   name: str) -> type[scopes.TopologySettings]:
    """``settings`` as the ``topology/<name>`` scope: whose ``_target_`` and ``name`` default to
    its YAML file's. The class itself when they do (every built-in's declares them), else a
    subclass that says so (a plugin's settings that leave them to the registry, or a second YAML
    file naming the same class)."""
    scope, options = f"topology/{name}", options_of(settings)
    if (options["_target_"].default, options["name"].default, settings.scope) == (target, name, scope):
        return settings
    return dataclasses.make_dataclass(
        settings.__name__,
        [("_target_", str, scopes.target(target)), ("name", str, scopes.label(name, "topology"))],
        bases=(settings,), frozen=True, namespace={"scope": scope, "__qualname__": settings.__qualname__})


def target_of(path: Path) -> str:
    """The class a ``topology/<name>.yaml`` names (``_target_``), refused in one line if none."""
    target = read_yaml(path, kind=dict).get("_target_")
    if not isinstance(target, str):
        raise ConfigError(f"{path} names no class: add '_target_: module.Class' (a Topology)")
    return target


def built_in() -> dict[str, type[Topology]]:
    """drlmpi's own topologies (``conf/topology/``, never a plugin's), name -> class, in report
    order: every list of them in the docs and the tests is made from this one."""
    classes = {path.stem: load_class(target_of(path)) for path in (CONF_DIR / "topology").glob("*.yaml")}
    return dict(sorted(classes.items(), key=lambda item: (item[1].report_order, item[0])))


def register() -> None:
    """Add the ``topology/<name>`` scope of every topology not registered yet, from the class its
    YAML file names (``_target_``). Idempotent and cheap to repeat: a registered name's file is
    not read again (make_plan calls this for every job of a sweep and every cell of a plan)."""
    for name, path in group_files("topology").items():
        if f"topology/{name}" in SCHEMA:
            continue
        target = target_of(path)
        add_scope(f"topology/{name}", named_settings(load_class(target).settings_class, target, name))
