"""Every topology a config can name - the one registry the schema, the command line, the planner,
the sweep and the report find topologies through.

A topology is one module and one YAML file. ``topology/<name>.yaml`` (in conf/, or in a plugin
directory on ``DRLMPI_PLUGIN_PATH``: :mod:`drlmpi.config.plugins`) names its class
(``_target_``); the class declares everything else - its options (:attr:`Topology.options`), its
rank rules, its pace model for the planner and any report section. :func:`register` reads every
such file, imports each class, and adds its options to the schema as the ``topology/<name>``
scope (stored in Hydra's ConfigStore as ``schema/topology/<name>``, which the YAML file's defaults
list starts from), so it runs before anything checks or composes a config: the command line, the
sweep launcher and the planner call it; so must code that composes through Hydra's API itself.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from omegaconf import OmegaConf

from drlmpi.config.errors import ConfigError
from drlmpi.config.options import named
from drlmpi.config.plugins import CONF_DIR, group_files, plugin_dirs
from drlmpi.config.schema import SCHEMA, add_scope
from drlmpi.topologies.core.base import Topology


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
    """The topology class ``module.Class``, refused in one line if it is none."""
    try:
        cls = import_target(target)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"topology class {target} cannot be imported: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Topology)):
        raise ConfigError(f"{target} is not a Topology (drlmpi.topologies.core.base.Topology)")
    return cls


def target_of(path: Path) -> str:
    """The class a ``topology/<name>.yaml`` names (``_target_``), refused in one line if none."""
    target = OmegaConf.load(path).get("_target_")
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
        cls = load_class(target)
        add_scope(f"topology/{name}", {**named(target, name, "topology"), **cls.options})
