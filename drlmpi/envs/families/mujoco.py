"""Gymnasium's MuJoCo environments (``HalfCheetah-v5``, ``Hopper-v5``...): made like any
Gymnasium id once MuJoCo's warnings go through Python's ``warnings``; they need MuJoCo
installed. No options of their own (``conf/env/`` files of MuJoCo ids start from
``schema/env/mujoco``, where the family's options would go)."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium

from drlmpi.config.errors import ConfigError
from drlmpi.envs.families.base import Family
from drlmpi.envs.families.gym import make as make_gym

INSTALL_HINT = "pip install 'drlmpi[mujoco]' (it installs gymnasium[mujoco])"


def is_mujoco(env_id: str) -> bool:
    """Whether ``env_id`` is one of Gymnasium's MuJoCo environments (``HalfCheetah-v5``...)."""
    try:
        entry = gymnasium.spec(str(env_id)).entry_point
    except gymnasium.error.Error:
        return False
    return isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco")


def route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings (Gymnasium's v5 models use attributes MuJoCo 4 deprecates) through
    Python's ``warnings``, shown once per message, instead of MuJoCo's default: a line on stdout
    AND a ``MUJOCO_LOG.TXT`` appended in the working directory of every rank."""
    import mujoco

    mujoco.set_mju_user_warning(lambda message: warnings.warn(f"MuJoCo: {message}", stacklevel=2))


def make(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """One MuJoCo environment: :func:`drlmpi.envs.families.gym.make` with MuJoCo's warnings routed."""
    route_mujoco_warnings()
    return make_gym(env_id, **kwargs)


def check_options(env: Any) -> None:
    """Refuse, in one line, a MuJoCo id without MuJoCo installed."""
    try:
        import mujoco  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"env.id={env.id} needs MuJoCo: {INSTALL_HINT}: {exc}") from exc


FAMILY = Family(name="mujoco", recognises=is_mujoco, make=make, ids="Gymnasium's MuJoCo ids",
                check_options=check_options, install_hint=INSTALL_HINT)
