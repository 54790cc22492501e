"""Environment families: one module per kind of ``env.id`` (:class:`~drlmpi.envs.families.base.Family`),
each saying how its ids are recognised, made and checked, which ``env`` options are its own, how
a simulator steps several of them, what to install for them and whether they render.
:func:`family_of` picks an id's family; nothing outside ``drlmpi/envs/families/`` branches on the
kind of an id: the shared layers ask the id's family (:func:`check_env`, :func:`joined_bank`,
:func:`env_threads`, :func:`make_options`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium

from drlmpi.config.errors import ConfigError
from drlmpi.config.options import plain
from drlmpi.config.schema import SETTINGS, add_scope
from drlmpi.config.scopes import EnvSettings
from drlmpi.envs.families import atari, gym, mujoco
from drlmpi.envs.families.base import Family

#: tried in this order; the first that recognises an id is its family. ``gym`` recognises every id, so
#: it comes last: a new family goes before it.
FAMILIES: tuple[Family, ...] = (atari.FAMILY, mujoco.FAMILY, gym.FAMILY)


def family_of(env_id: str) -> Family:
    """The first family of :data:`FAMILIES` that recognises ``env_id``."""
    for family in FAMILIES:
        if family.recognises(str(env_id)):
            return family
    raise LookupError(f"no environment family recognises env.id={env_id}")


def register() -> None:
    """Add every family's ``env/<name>`` scope (its own options) to the schema, with the node
    ``schema/env/<name>`` its env files start from. Idempotent and cheap; call it before Hydra
    composes a config (the entry point, the run plan and the tests do): a family whose settings
    are registered already is skipped (the run plan calls this for every job of a sweep)."""
    for family in FAMILIES:
        if SETTINGS.get(f"env/{family.name}") is not family.settings:
            add_scope(f"env/{family.name}", family.settings)


def env_settings(env: EnvSettings | Mapping[str, Any]) -> EnvSettings:
    """An ``env`` section (a checked config section, or typed settings) as the settings of its id's
    family: every env option and the family's own (``Family.section``)."""
    env_id = env.id if isinstance(env, EnvSettings) else env["id"]
    return family_of(env_id).section().coerce(env)


def make_options(env: EnvSettings | Mapping[str, Any]) -> dict[str, Any]:
    """The ``make`` keyword arguments the family of ``env.id`` takes from an ``env`` section: its
    own options' values (typed)."""
    env = env_settings(env)
    return family_of(env.id).option_values(env)


def check_env(env: Any) -> None:
    """Refuse, in one line, an option of another family than ``env.id``'s set away from its
    default (``env.num_threads=2`` for ``CartPole-v1``), then what the id's family refuses
    (``Family.check_options``: worker processes for an ALE id, a package not installed...)."""
    family = family_of(env.id)
    for other in FAMILIES:
        for key, option in other.options.items():
            if key in family.options or key not in env or _unset(env[key], option.default):
                continue
            raise ConfigError(f"env.{key} is an option of the {other.name} family ({other.ids}), not of "
                              f"env.id={env.id} ({family.name} family): remove it, "
                              f"got env.{key}={plain(env[key])}")
    family.check_options(env)


def joined_bank(envs: list[gymnasium.Env], dtype: Any) -> Any:
    """The one bank in which the family of ``envs`` steps them together (``Family.join``), or
    ``None``: they step one after another (:class:`~drlmpi.envs.vector.SerialEnvs`)."""
    spec = getattr(envs[0], "spec", None) if envs else None
    join = family_of(spec.id).join if spec is not None else None
    return join(envs, dtype) if join is not None else None


def env_threads(env: EnvSettings | Mapping[str, Any]) -> int:
    """The busy threads a simulator of the ``env`` section runs for its environments (1 unless
    its id's family steps them in threads of its own: ``Family.threads``)."""
    env = env_settings(env)
    family = family_of(env.id)
    return family.threads(family.option_values(env))


def _unset(value: Any, default: Any) -> bool:
    """Whether an option of another family holds its default (or null): what every section of
    an env file of that family, and an old run's saved config, carries."""
    return value is None or plain(value) == default


__all__ = ["FAMILIES", "Family", "check_env", "env_settings", "env_threads", "family_of", "joined_bank",
           "make_options", "register"]
