"""Command-line overrides read with Hydra's own grammar (its ``OverridesParser``), before Hydra or
MPI start: what a key is set to, every value of a choice sweep (``a,b,c``), and which values are
left to Hydra (sweep functions such as ``range(1,3)``, intervals, interpolations)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import HydraException

from drlmpi.config.errors import ConfigError


@cache
def _parser() -> OverridesParser:
    return OverridesParser.create()


def parse(args: Sequence[str]) -> list[Override]:
    """Hydra's reading of the ``key=value`` arguments (options such as ``-m`` left out); one it
    cannot read is refused in one line."""
    overrides = []
    for arg in args:
        if arg.startswith("-"):
            continue
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
        if not override.is_choice_sweep():
            return None
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
