"""Checks against the schema (:data:`~drlmpi.config.schema.SCHEMA`).

:func:`check_config` walks a composed config and raises
:class:`~drlmpi.config.errors.ConfigError` with one line, ``<option> <what is wrong>, got
<value>``, for the first bad value; :func:`check_override` does the same for one ``key=value``
command-line override before Hydra starts (the sweeping process included, for every value of a
sweep). Scopes: ``""`` (root), ``run``, ``env`` (with every environment family's own options,
``env/<family>``), ``algo/<name>``, ``topology/<name>``; an algorithm's or a topology's options
are checked against the scope of the ``name`` it was composed with, an ``env.`` override against
the node its env file starts from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from drlmpi.config.options import Option, plain
from drlmpi.config.overrides import parse, values
from drlmpi.config.plugins import group_files
from drlmpi.config.schema import SCHEMA, file_scope, group_scopes


def env_scope() -> dict[str, Option]:
    """Every ``env`` option: those of every environment and each family's own (which of them an
    id may set is checked where ids are known: :func:`drlmpi.envs.families.check_env`)."""
    if not group_scopes("env"):
        raise RuntimeError("no environment family is registered: call drlmpi.envs.families.register() "
                           "before checking a config")
    out = dict(SCHEMA["env"])
    for options in group_scopes("env").values():
        out.update({key: option for key, option in options.items() if key not in out})
    return out


def scope_of(cfg: Mapping[str, Any], path: str) -> dict[str, Option] | None:
    """The schema of ``cfg[path]`` (``env``: every env option; ``algo``/``topology`` by their
    composed ``name``; ``None`` for a name without a scope). Topology and family scopes come from
    their modules: checking one before any is registered is a mistake of the caller's, not a
    custom topology."""
    if path in ("", "run"):
        return SCHEMA[path]
    if path == "env":
        return env_scope()
    return named_scope(path, (cfg.get(path) or {}).get("name"))


def named_scope(group: str, name: Any) -> dict[str, Option] | None:
    """The scope of ``algo`` or ``topology`` option ``name`` (``None``: no scope of that name)."""
    if group == "topology" and not group_scopes("topology"):
        raise RuntimeError("no topology is registered: call drlmpi.topologies.core.registry.register() "
                           "before checking a config")
    return SCHEMA.get(f"{group}/{name}")


def check_config(cfg: Mapping[str, Any]) -> None:
    """Raise :class:`~drlmpi.algos.base.ConfigError` for the first value the schema refuses.

    ``algo``/``topology`` are checked against the scope named by their ``name``, when the schema
    has one (a custom algorithm's or topology's options are left to it). Top-level keys the
    schema does not know (an experiment preset's own, ``world_size_by_topology``) are left to
    their users; under ``run``, ``env``, ``algo`` and ``topology`` a key is refused when no scope
    of its group knows it (a typo added with ``+``/``++``, which Hydra lets through), while a key
    of another algorithm or topology is accepted (a sweep's ``++topology.utd_mode=free`` reaches
    every topology of the sweep)."""
    from drlmpi.config.errors import ConfigError

    for path in ("", "run", "env", "algo", "topology"):
        scope = scope_of(cfg, path)
        node = cfg if path == "" else cfg.get(path)
        if scope is None or node is None:
            continue
        if path:
            _refuse_unknown(path, scope, node)
        for key, option in scope.items():
            name = f"{path}.{key}" if path else key
            if isinstance(node, DictConfig) and key in node.keys() and OmegaConf.is_missing(node, key):
                raise ConfigError(f"{name} must be set (it has no default), got ???")
            if key not in node:
                continue
            value = node[key]
            problem = option.problem(value)
            if problem is not None:
                raise ConfigError(f"{name} {problem}, got {_show(value)}")
    run = cfg.get("run") or {}
    if all(run.get(k) is None for k in ("max_env_steps", "max_train_seconds", "max_episodes")):
        raise ConfigError("run.max_env_steps, run.max_train_seconds and run.max_episodes are all null: "
                          "set at least one budget, got none")


def ignored_options(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """One line for each ``algo``/``topology`` key that another algorithm or topology takes but
    the composed one does not (a sweep's ``++topology.utd_mode=free`` on its sequential jobs):
    accepted by :func:`check_config`, ignored by the run, said at its start."""
    out = []
    for path in ("algo", "topology"):
        scope, node = scope_of(cfg, path), cfg.get(path)
        if scope is None or node is None:
            continue
        name = node.get("name")
        out += [f"{path}.{key} is not an option of {path}={name}: ignored" for key in node.keys()
                if key not in scope]
    return tuple(out)


def undeclared(cfg: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """By section (``algo``, ``topology``, both always present): the options given that the
    composed algorithm or topology does not declare (what :func:`ignored_options` reports), as
    plain values; empty for a section without a scope (a custom algorithm keeps all its keys)."""
    out: dict[str, dict[str, Any]] = {"algo": {}, "topology": {}}
    for path in out:
        scope, node = scope_of(cfg, path), cfg.get(path)
        if scope is not None and node is not None:
            out[path] = {key: plain(node[key]) for key in node.keys() if key not in scope}
    return out


def _refuse_unknown(path: str, scope: Mapping[str, Any], node: Mapping[str, Any]) -> None:
    """Raise for the first key of ``node`` that no scope of ``path``'s group knows."""
    from drlmpi.config.errors import ConfigError, did_you_mean

    known = set(scope)
    if path in ("algo", "topology"):
        for other in group_scopes(path).values():
            known |= set(other)
    for key in node.keys():
        if key not in known:
            close = did_you_mean(str(key), known, lambda option: f"{path}.{option}")
            hint = f" ({close})" if close else ""
            whose = f"of any {path}" if path in ("algo", "topology") else f"of {path}"
            raise ConfigError(f"{path}.{key} is not an option {whose}{hint}, got {_show(node[key])}")


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return str(dict(value))
    if hasattr(value, "__iter__"):
        try:
            return str(list(value))
        except TypeError:
            pass
    return str(value)


def check_override(arg: str, scopes: Mapping[str, str | Sequence[str] | None]) -> None:
    """Check one command-line override ``key=value`` (each value of a ``a,b,c`` sweep, as Hydra's
    grammar reads it) before Hydra composes anything; ``scopes`` maps ``algo``/``topology``/``env``
    to the name chosen on the command line (or its default), or to each name of a sweep over them
    (``None`` or absent: not known yet, an experiment preset may pick it). A value is checked
    against every chosen scope that has the option (an env file's: the node it starts from). A
    plain ``run.``/``env.``/``algo.``/``topology.`` key that a chosen scope lacks is refused in one
    line (Hydra's own refusal takes five): a typo, with a "did you mean", another algorithm's or
    topology's option, naming who takes it (in a sweep, ``++`` sets it for the jobs that take it,
    the others ignore it), or another environment family's, naming its env files. Interpolations
    and sweep functions are left to Hydra."""
    from drlmpi.config.errors import ConfigError

    (override,) = parse([arg])
    key = override.key_or_group
    items = values(override)
    if key.startswith("hydra") or items is None:
        return
    path, _, leaf = key.rpartition(".")
    if path in ("algo", "topology"):
        names = scopes.get(path)
        names = (names,) if isinstance(names, str) else tuple(names or ())
        chosen = [(name, named_scope(path, name)) for name in names]
        if any(scope is None for _, scope in chosen):  # a custom class's options are its own
            chosen = []
    elif path == "env":
        chosen = _env_files(scopes.get("env"))
    elif path in ("", "run"):
        chosen = [(None, SCHEMA[path])]
    else:
        return
    if path and chosen and not (override.is_add() or override.is_force_add()):
        _refuse_missing(path, leaf, chosen, items)
    for _, scope in chosen:
        option = scope.get(leaf)
        if option is None or option.kind in ("map", "any"):
            continue
        for value in items:
            problem = option.problem(value)
            if problem is not None:
                raise ConfigError(f"{key} {problem}, got {_show(value)}")


def _refuse_missing(path: str, leaf: str, chosen: list[tuple[str | None, Mapping[str, Any]]],
                    items: list[Any]) -> None:
    """Raise for a plain ``path.leaf=...`` that a scope of ``chosen`` (``(name, scope)``; name
    ``None`` for ``run``/``env``) does not have: Hydra could not set it there."""
    from drlmpi.config.errors import ConfigError

    lacking = [name for name, scope in chosen if leaf not in scope]
    if not lacking:
        return
    value = items[0] if len(items) == 1 else items
    takers = sorted(name for name, scope in group_scopes(path).items() if leaf in scope)
    if not takers:  # a typo: no option of that name anywhere
        known = {"run": SCHEMA["run"], "env": env_scope()}.get(path, {})
        _refuse_unknown(path, known, {leaf: value})
    if path == "env":  # env files are not their family: name the family's files
        theirs = ", ".join(name for name in sorted(group_files("env"))
                           if file_scope("env", name) == f"env/{takers[0]}") or "none"
        mine = ", ".join(f"env={name} ({_family(file_scope('env', name))})" for name in lacking)
        raise ConfigError(f"env.{leaf} is an option of the {takers[0]} family (env files: {theirs}), "
                          f"not of {mine}, got {_show(value)}")
    sweep = (f": ++{path}.{leaf}=... sets it for the jobs that take it, the others ignore it"
             if len(lacking) < len(chosen) else "")
    take = "takes" if len(takers) == 1 else "take"
    raise ConfigError(f"{path}.{leaf} is not an option of {', '.join(f'{path}={n}' for n in lacking)} "
                      f"({', '.join(takers)} {take} it){sweep}, got {_show(value)}")


def _env_files(names: str | Sequence[str] | None) -> list[tuple[str | None, dict[str, Option]]]:
    """``(env file, the options of the node it starts from)`` for each env file chosen; every env
    option, under ``None``, while the files are not known (a preset may pick one) or not drlmpi's
    to read."""
    names = (names,) if isinstance(names, str) else tuple(names or ())
    scopes = [file_scope("env", name) for name in names]
    if not names or None in scopes:
        return [(None, env_scope())]
    return [(name, {**SCHEMA["env"], **SCHEMA[scope]}) for name, scope in zip(names, scopes)]


def _family(scope: str | None) -> str:
    """``env/gym`` -> ``gym family`` (an env file's node, for messages)."""
    return f"{scope.split('/', 1)[1]} family" if scope and "/" in scope else "no family's options"
