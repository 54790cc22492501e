"""Command-line overrides read with Hydra's own grammar (its ``OverridesParser``), before Hydra or
MPI start: what a key is set to, every value of a choice sweep (``a,b,c``), and which values are
left to Hydra (sweep functions such as ``range(1,3)``, intervals, interpolations)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType, ValueType
from hydra.errors import HydraException

from drlmpi.config.errors import ConfigError


@cache
def _parser() -> OverridesParser:
    return OverridesParser.create()


@cache
def _option_values() -> dict[str, tuple[str, ...] | None]:
    """Hydra's command-line options that take a value, from its own argument parser: each option
    string, and the values it may take when the value is optional (``--info [plugins]``;
    ``None``: it always takes the next argument, as ``--cfg job``)."""
    from hydra._internal.utils import get_args_parser

    taking = {}
    for action in get_args_parser()._actions:
        if action.option_strings and action.nargs in (None, "?"):
            for option in action.option_strings:
                taking[option] = None if action.nargs is None else tuple(action.choices or ())
    return taking


def split_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """A command line as (Hydra's options with their values - ``-m``, ``--cfg job``, ``--info
    plugins``, ``--config-dir=DIR`` -, the ``key=value`` overrides), each in its order."""
    options: list[str] = []
    overrides: list[str] = []
    takes_value = False
    for i, arg in enumerate(args):
        if takes_value:
            options.append(arg)
            takes_value = False
        elif arg.startswith("-"):
            options.append(arg)
            choices = _option_values().get(arg, ())
            following = args[i + 1] if i + 1 < len(args) else None
            takes_value = following is not None and (choices is None or following in choices)
        else:
            overrides.append(arg)
    return options, overrides


def override_args(args: Sequence[str]) -> list[str]:
    """The ``key=value`` arguments of a command line (:func:`split_args`)."""
    return split_args(args)[1]


def hydra_order(args: Sequence[str]) -> list[str]:
    """``args`` with the options first and the overrides together after them: Hydra's argument
    parser takes the overrides as one run (``seed=1 --cfg job algo=ppo`` would be refused)."""
    options, overrides = split_args(args)
    return [*options, *overrides]


def parse(args: Sequence[str]) -> list[Override]:
    """Hydra's reading of the ``key=value`` arguments (options such as ``-m`` and ``--cfg job``
    left out, :func:`override_args`); one it cannot read is refused in one line."""
    overrides = []
    for arg in override_args(args):
        try:
            overrides.append(_parser().parse_override(arg))
        except HydraException as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"the override {arg!r} cannot be read ({first})") from None
    return overrides


def values(override: Override) -> list[Any] | None:
    """The value(s) ``override`` sets: one, or each choice of a choice sweep; ``None`` for a
    deletion and for what only Hydra can expand (range and interval sweeps, globs,
    interpolations)."""
    if override.type == OverrideType.DEL:
        return None
    if override.is_sweep_override():
        if not override.is_choice_sweep() or override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            return None  # a glob (a choice sweep to Hydra) names choices only Hydra lists
        items = list(override.value().list)
    else:
        items = [override.value()]
    if any(isinstance(v, str) and "${" in v for v in items):
        return None
    return items


def value_text(override: Override) -> str | None:
    """A single-valued override's value as written (``None`` for a sweep or a deletion)."""
    if override.type == OverrideType.DEL or override.is_sweep_override():
        return None
    value = override.value()
    return "null" if value is None else str(value)


def find(args: Sequence[str], key: str) -> Override | None:
    """The last override of ``key`` (``key=``, ``+key=`` or ``++key=``) among ``args``."""
    found = [o for o in parse(args) if o.key_or_group == key]
    return found[-1] if found else None
