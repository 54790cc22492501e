"""Config-group choices (``env=lunarlander``, ``+experiment=ppo_breakout_16``,
``hydra/sweeper=optuna``) checked on the command line before Hydra composes anything.

A choice that names no config of its group is refused in one line, with the nearest choices and
all of them, as an option's typo is (:mod:`drlmpi.config.checks`), instead of Hydra's own refusal
(its search path and a traceback hint, after seconds of composing). The choices are what Hydra
itself would find, listed through its config repository over the same search path a run uses:
conf/, each plugin directory (``hydra_plugins/drlmpi_launcher/search_path.py``), Hydra's own
configs and the ConfigStore nodes of installed Hydra plugins (``hydra/sweeper=optuna``,
``hydra/launcher=submitit_slurm``). A config in a folder of its group is a choice as
``folder/name`` (``+experiment=pair/dqn_cartpole``).

Only what can be read for certain is checked: each name of a plain value, a choice sweep
(``a,b``, ``choice(a,b)``) or a list; deletions, globs, ranges, interpolations and values that are
not names are left to Hydra, and so is every choice when the command line changes where configs
are found (``--config-dir``, ``--config-path``, ``--config-name``, ``hydra.searchpath``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drlmpi.config.errors import ConfigError, did_you_mean
from drlmpi.config.overrides import parse, split_args, values
from drlmpi.config.plugins import CONF_DIR

#: the groups whose choices are checked (the others, such as ``tuned``, are left to Hydra)
CHECKED_GROUPS = ("algo", "env", "topology", "experiment", "hydra/sweeper", "hydra/launcher")
#: Hydra's options that change where configs are found or which config is the primary one
SEARCH_OPTIONS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")
#: the nearest choices a refusal names at most
NEAREST = 3


def config_repository() -> Any:
    """Hydra's config repository over the search path a run of ``python -m drlmpi`` has."""
    from hydra._internal.config_repository import ConfigRepository
    from hydra._internal.utils import create_config_search_path

    return ConfigRepository(config_search_path=create_config_search_path(f"file://{CONF_DIR}"))


def group_choices(group: str, repository: Any = None) -> list[str]:
    """Every config of ``group`` Hydra can load, sorted: its own first, then each folder's as
    ``folder/name``."""
    from hydra.core.object_type import ObjectType

    repository = config_repository() if repository is None else repository
    out = sorted(repository.get_group_options(group, results_filter=ObjectType.CONFIG))
    for folder in sorted(repository.get_group_options(group, results_filter=ObjectType.GROUP)):
        out += [f"{folder}/{name}" for name in group_choices(f"{group}/{folder}", repository)]
    return out


def _names(items: list[Any]) -> list[str] | None:
    """The config names of an override's values (a list's elements each), or ``None`` if any
    is not a plain name (a number, ``null``, a mapping): left to Hydra."""
    out = []
    for item in items:
        for name in item if isinstance(item, list) else [item]:
            if not isinstance(name, str) or not name:
                return None
            out.append(name.removesuffix(".yaml"))
    return out


def _searches_elsewhere(argv: Sequence[str]) -> bool:
    """Whether the command line changes where Hydra looks for configs."""
    options, _ = split_args(argv)
    if any(option.split("=", 1)[0] in SEARCH_OPTIONS for option in options):
        return True
    return any(o.key_or_group == "hydra.searchpath" for o in parse(argv))


def top_level(choices: list[str]) -> tuple[list[str], list[str]]:
    """A group's choices of its own, and the folders the others are in (in order, once each)."""
    own = [name for name in choices if "/" not in name]
    return own, list(dict.fromkeys(name.split("/", 1)[0] for name in choices if "/" in name))


def _listing(group: str, choices: list[str]) -> str:
    """``a, b, c`` (a folder's configs as ``folder/...``: there may be many)."""
    own, folders = top_level(choices)
    return ", ".join(own + [f"{folder}/..." for folder in folders]) or f"none (no config in {group}/)"


def check_group_choices(argv: Sequence[str]) -> None:
    """Raise :class:`ConfigError` in one line for the first value of a :data:`CHECKED_GROUPS`
    override on the command line (each value of a sweep) that names no config of its group:
    ``env must be one of ant, breakout, ... (did you mean env=lunarlander?), got 'lunar'``."""
    picked = [(o, names) for o in parse(argv) if o.key_or_group in CHECKED_GROUPS
              and (names := _names(values(o) or [])) is not None and names]
    if not picked or _searches_elsewhere(argv):
        return
    repository = config_repository()
    for override, names in picked:
        group = override.key_or_group
        choices = group_choices(group, repository)
        for name in names:
            if name in choices:
                continue
            key = override.get_key_element()
            hint = did_you_mean(name, choices, f"{key}={{}}".format, NEAREST)
            raise ConfigError(f"{key} must be one of {_listing(group, choices)}"
                              f"{f' ({hint})' if hint else ''}, got {name!r}")
