"""Typed settings: every scope of the configuration is a frozen dataclass whose fields carry their
option (:class:`~drlmpi.config.options.Option`: type, default, bounds, choices, one-line doc).

A scope is declared once, as a :class:`Settings` subclass written with the field makers below::

    @dataclass(frozen=True)
    class RunSettings(Settings):
        max_env_steps: int | None = integer(100_000, "budget: job-wide environment steps", nullable=True)

Everything else is derived from the dataclass: the schema the checks and the reference read
(:func:`options_of`), the defaults stored in Hydra's ConfigStore (:func:`drlmpi.config.schema.node`) and,
once a composed config passed its checks, the typed object the run reads
(:meth:`Settings.build`): ints as ints, floats as floats, lists as tuples, maps as read-only
mappings - so no reader casts, and no reader has a default of its own.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from omegaconf import DictConfig, OmegaConf

from drlmpi.config.options import REQUIRED, Option, plain

S = TypeVar("S", bound="Settings")

#: the key of a field's metadata that holds its option
OPTION = "option"


def _field(option: Option) -> Any:
    default = option.default
    if isinstance(default, list):
        default = tuple(default)
    if isinstance(default, Mapping):  # a read-only mapping, made for each instance
        frozen = dict(default)
        return dataclasses.field(default_factory=lambda: types.MappingProxyType(dict(frozen)),
                                 metadata={OPTION: option})
    return dataclasses.field(default=default, metadata={OPTION: option})


def integer(default: int | None, doc: str, low: float | None = 1, high: float | None = None,
            nullable: bool = False) -> Any:
    return _field(Option("int", doc, default, low=low, high=high, nullable=nullable))


def real(default: float | None, doc: str, low: float | None = None, high: float | None = None,
         low_open: bool = False, nullable: bool = False) -> Any:
    return _field(Option("float", doc, default, low=low, high=high, low_open=low_open, nullable=nullable))


def positive(default: float | None, doc: str, nullable: bool = False) -> Any:
    return real(default, doc, low=0, low_open=True, nullable=nullable)


def unit(default: float, doc: str) -> Any:
    return real(default, doc, low=0, high=1)


def flag(default: bool, doc: str) -> Any:
    return _field(Option("bool", doc, default))


def choice(default: str | None, doc: str, *choices: str, nullable: bool = False) -> Any:
    return _field(Option("str", doc, default, choices=tuple(choices), nullable=nullable))


def text(default: Any, doc: str, nullable: bool = False) -> Any:
    """A string option with no fixed choices (:data:`REQUIRED` default: the YAML must set it)."""
    return _field(Option("str", doc, default, nullable=nullable))


def int_list(default: list[int], doc: str) -> Any:
    return _field(Option("ints", doc, tuple(default)))


def mapping(default: Mapping[str, Any] | None, doc: str, nullable: bool = False) -> Any:
    return _field(Option("map", doc, default, nullable=nullable))


def options_of(cls: type[Settings]) -> dict[str, Option]:
    """The scope's options by name, in declaration order (what the schema holds)."""
    return {f.name: f.metadata[OPTION] for f in dataclasses.fields(cls) if OPTION in f.metadata}


#: the Python type a field of each option kind is annotated with (``X | None`` when nullable)
KIND_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str, "ints": tuple,
                               "map": Mapping}


def declaration_problem(cls: type) -> str | None:
    """What is wrong with the declaration of settings class ``cls``, in one line (``None``:
    nothing): a subclass left without ``@dataclass(frozen=True)`` (its fields would be none of the
    scope's), a field made without a field maker, or an annotation that disagrees with its
    maker (an ``int`` field made with :func:`text`, a nullable option not annotated ``| None``) -
    checked as one type, it would be read as another."""
    for klass in cls.__mro__:
        if any(isinstance(value, dataclasses.Field) for value in vars(klass).values()):
            return f"{klass.__qualname__} is not a dataclass: declare it with @dataclass(frozen=True)"
    if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
        return f"{cls.__qualname__} is not a frozen dataclass: declare it with @dataclass(frozen=True)"
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # noqa: BLE001 (an annotation that names nothing: NameError, TypeError)
        return f"{cls.__qualname__}'s annotations cannot be read: {exc}"
    for f in dataclasses.fields(cls):
        option = f.metadata.get(OPTION)
        if option is None:
            return (f"{cls.__qualname__}.{f.name} has no option: make it with a field maker (integer, "
                    f"text, ...)")
        hint = hints[f.name]
        shown = hint.__name__ if isinstance(hint, type) else str(hint)
        args = typing.get_args(hint)
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
        inner = next(a for a in args if a is not type(None)) if optional else hint
        declared = typing.get_origin(inner) or inner
        kind = KIND_TYPES[option.kind] if option.kind in KIND_TYPES else object
        if not (isinstance(declared, type) and issubclass(declared, kind)):
            return (f"{cls.__qualname__}.{f.name} is annotated {shown} but made as a {option.kind} option: "
                    f"annotate it {kind.__name__} or use the maker of its type")
        if optional != option.nullable:
            return (f"{cls.__qualname__}.{f.name} is annotated {shown} but its option is "
                    f"{'nullable' if option.nullable else 'not nullable'}: "
                    f"{'add' if option.nullable else 'drop'} '| None'")
    return None


def typed(option: Option, value: Any) -> Any:
    """``value`` (already checked against ``option``) as the type the option declares: an int for
    ``int`` (YAML may write ``1e5`` or ``2.0``), a float for ``float``, a tuple of ints for ``ints``,
    a read-only mapping for ``map`` (nested mappings too)."""
    value = plain(value)
    if value is None:
        return None
    if option.kind == "int":
        return int(value)
    if option.kind == "float":
        return float(value)
    if option.kind == "ints":
        return tuple(int(v) for v in value)
    if option.kind == "map":
        return read_only(value)
    return value


def read_only(value: Any) -> Any:
    if isinstance(value, Mapping):
        return types.MappingProxyType({k: read_only(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(read_only(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class Settings:
    """A scope's settings (subclasses declare the fields). ``scope``: its path in the config
    (``run``, ``env``, ``algo/ppo``, ``topology/star``; empty for the top level)."""

    scope: ClassVar[str] = ""

    @classmethod
    def options(cls) -> dict[str, Option]:
        return options_of(cls)

    @classmethod
    def build(cls: type[S], node: Mapping[str, Any]) -> S:
        """The typed settings of a checked config node (:func:`~drlmpi.config.checks.check_config`
        has refused anything the options do not allow). Keys the scope does not declare are left
        out (another scope's, which the checks reported); a declared key the node lacks takes its
        default - a run directory written before the option existed. ``node`` may be typed
        settings of another class (a whole env section, for a family's own options)."""
        if isinstance(node, Settings):
            node = {f.name: getattr(node, f.name) for f in dataclasses.fields(node)}
        values = {}
        for key, option in options_of(cls).items():
            if key in node and not (isinstance(node, DictConfig) and OmegaConf.is_missing(node, key)):
                values[key] = typed(option, node[key])
            elif option.default is REQUIRED:
                raise ValueError(f"{cls.scope or 'the top level'}.{key} must be set (it has no default)")
        return cls(**values)

    @classmethod
    def coerce(cls: type[S], value: S | Mapping[str, Any]) -> S:
        """``value`` as these settings: itself when it already is, else :meth:`build` of it (a
        config node, or a plain mapping in tests and tools)."""
        return value if isinstance(value, cls) else cls.build(value)

    def replace(self: S, **changes: Any) -> S:
        """A copy with ``changes`` (typed like :meth:`build`'s values)."""
        options = options_of(type(self))
        return dataclasses.replace(self, **{k: typed(options[k], v) if k in options else v
                                            for k, v in changes.items()})

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain values (lists for tuples, dicts for mappings)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = thawed(value.as_dict() if isinstance(value, Settings) else value)
        return out


def thawed(value: Any) -> Any:
    """Typed values as plain ones: tuples as lists, read-only mappings as dicts (to pickle or
    to write)."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value
