"""What one option may be (:class:`Option`): its type, default, bounds, choices and one-line doc,
and the check of a value against them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING, OmegaConf

REQUIRED = MISSING  # an option without a default: the YAML that selects the scope must set it


@dataclass(frozen=True)
class Option:
    """What one option may be.

    Args:
        kind: ``int``, ``float``, ``bool``, ``str``, ``ints`` (a list of positive integers),
            ``map`` (a mapping) or ``any``.
        doc: one line.
        default: the value when nothing sets it (:data:`REQUIRED`: none; a list is a tuple).
        low, high: inclusive bounds for numbers (``None``: unbounded).
        low_open: the lower bound itself is not allowed (``> low`` rather than ``>= low``).
        choices: the allowed strings.
        nullable: ``null`` is allowed (it means "off" or "not set"; the doc says which).
    """

    kind: str
    doc: str
    default: Any = REQUIRED
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()
    nullable: bool = False

    def bounds(self) -> str:
        """A number's range in words: ``in [0, 1]``, ``>= 1``, ``> 0`` (empty: unbounded)."""
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{format_number(self.low)}, {format_number(self.high)}]"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {format_number(self.low)}"
        if self.high is not None:
            return f"<= {format_number(self.high)}"
        return ""

    def allowed(self, markdown: bool = False) -> str:
        """The allowed values in words (the reference table's column when ``markdown``)."""
        if self.choices:
            text = (" \\| ".join(f"`{c}`" for c in self.choices) if markdown
                    else " | ".join(self.choices))
        elif self.kind in ("int", "float"):
            text = f"{self.kind} {self.bounds() or 'any'}"
        elif self.kind == "ints":
            text = "list of ints >= 1"
        else:
            text = self.kind
        return text + (", or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (``None`` when it is allowed)."""
        if value is None:
            return None if self.nullable else "must be set (null is not allowed)"
        kind = self.kind
        if kind == "any":
            return None
        if kind == "bool":
            return None if isinstance(value, bool) else "must be true or false"
        if kind == "str":
            if not isinstance(value, str):
                return "must be a string"
            if self.choices and value not in self.choices:
                return f"must be one of {', '.join(self.choices)}"
            return None
        if kind == "map":
            return None if isinstance(value, Mapping) else "must be a mapping ({key: value, ...})"
        if kind == "ints":
            if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
                return "must be a list of integers, e.g. [64, 64]"
            items = list(value)
            if not items or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                    for v in items):
                return "must be a non-empty list of integers >= 1"
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be an integer" if kind == "int" else "must be a number"
        if kind == "int" and not (isinstance(value, int) or float(value).is_integer()):
            return "must be an integer"
        if not math.isfinite(float(value)):
            return "must be finite"
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and value > self.high
        if below or above:
            return f"must be {self.bounds()}"
        return None


def plain(value: Any) -> Any:
    """A config value as plain Python: a mapping or list node as ``dict``/``list`` (resolved)."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def format_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)
