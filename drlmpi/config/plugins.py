"""Where config files come from: ``conf/``, then each directory on ``DRLMPI_PLUGIN_PATH``.

A plugin directory is laid out as ``conf/`` is (``topology/<name>.yaml``, ``algo/...``) and holds the
Python modules its files name (``_target_: ring.Ring`` for ``<dir>/ring.py``): a new topology is
one module and one YAML file there, with no edit to drlmpi. Hydra searches these directories after
``conf/`` (``hydra_plugins/drlmpi_launcher/search_path.py``), the topology registry reads their
topologies (:mod:`drlmpi.topologies.core.registry`), and their modules import from them. A name that
``conf/`` already has stays ``conf/``'s. A plugin directory's YAML file that cannot be read is
refused in one line with the command line's checks (:func:`check_plugin_files`), whether or not
the run picks it. Light on purpose: every process that composes reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the checkout's conf/ (installed with pip -e): drlmpi's own config files
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
#: the environment variable listing plugin directories (separated as PATH is: ``:`` on Linux)
PLUGIN_PATH = "DRLMPI_PLUGIN_PATH"


def plugin_dirs() -> list[Path]:
    """The plugin directories, in the order given (a missing one is refused in one line)."""
    from drlmpi.config.errors import ConfigError

    dirs = []
    for entry in os.environ.get(PLUGIN_PATH, "").split(os.pathsep):
        if not entry:
            continue
        path = Path(entry).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(f"{PLUGIN_PATH} names {entry}, which is not a directory")
        dirs.append(path)
    return dirs


def group_files(group: str) -> dict[str, Path]:
    """Option name -> file of one config group (``topology``: ``star`` -> conf/topology/star.yaml),
    conf/ first, then each plugin directory."""
    files: dict[str, Path] = {}
    for root in (CONF_DIR, *plugin_dirs()):
        for path in sorted((root / group).glob("*.yaml")):
            files.setdefault(path.stem, path)
    return files


#: the config groups a plugin directory may hold files of (as conf/ does)
PLUGIN_GROUPS = ("algo", "env", "topology", "experiment", "tuned")


def check_plugin_files() -> None:
    """Read every YAML file of the plugin directories' config groups; one that is not valid YAML
    raises :class:`~drlmpi.config.errors.ConfigError` naming it and where it breaks (Hydra, or
    the topology registry, would end in a parser's traceback)."""
    from drlmpi.config.inputs import read_yaml

    for root in plugin_dirs():
        for group in PLUGIN_GROUPS:
            for path in sorted((root / group).rglob("*.yaml")):
                read_yaml(path, f"correct it, or take {root} off {PLUGIN_PATH}")
