"""Atari games of the Arcade Learning Environment (``ALE/<Game>-v5``): every one is played
through ale-py's ``AtariVectorEnv`` (:mod:`drlmpi.envs.atari`, :mod:`drlmpi.envs.atari_bank`),
with the ``env.atari`` options and ``env.num_threads``; they need ale-py installed and have no
render window."""

from __future__ import annotations

from typing import Any

import gymnasium

from drlmpi.config.errors import ConfigError
from drlmpi.envs.families.base import Family

INSTALL_HINT = "pip install ale-py; it ships the game ROMs"


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` names an Arcade Learning Environment game (``ALE/<Game>-v5``)."""
    return str(env_id).startswith("ALE/")


def make(env_id: str, *, sim_cost_ms: float = 0.0, max_episode_steps: int | None = None,
         atari: Any = None, train: bool = True, num_threads: int = 1, **kwargs: Any) -> gymnasium.Env:
    """One ``AtariVectorEnv`` environment with its preprocessing
    (:func:`drlmpi.envs.atari_bank.make_atari`); ``kwargs`` go to ``AtariVectorEnv``."""
    from drlmpi.envs.atari_bank import make_atari

    # The cost goes into the settings (the bank burns it), so the environment can still join
    # its simulator's vector env.
    return make_atari(env_id, atari, train=train, max_episode_steps=max_episode_steps,
                      sim_cost_ms=sim_cost_ms, num_threads=num_threads, **kwargs)


def make_options(env_cfg: Any) -> dict[str, Any]:
    """The ``env.atari`` options and the thread count of the vector env."""
    return {"atari": env_cfg.get("atari"), "num_threads": int(env_cfg.get("num_threads") or 1)}


def check_options(env: Any) -> None:
    """Refuse, in one line, worker processes (``env.vector=async``), an ALE id without ale-py
    installed, and bad ``env.atari`` values or ``env.kwargs``."""
    if env["vector"] == "async":
        raise ConfigError(f"env.vector=async is not for ALE/ ids: a simulator's env.num_envs environments "
                          f"step in one AtariVectorEnv; use env.num_threads=N to step them in N threads, "
                          f"got env.vector=async with env.id={env.id}")
    try:
        import ale_py  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"env.id={env.id} needs ale-py ({INSTALL_HINT}): {exc}") from exc
    from drlmpi.envs.atari import check_ale_kwargs, check_atari_options

    try:
        check_atari_options(env.get("atari"))
        check_ale_kwargs(env.get("kwargs"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


FAMILY = Family(name="atari", recognises=is_atari, make=make, make_options=make_options,
                check_options=check_options, install_hint=INSTALL_HINT, renders=False,
                no_render_reason="ALE ids are played by AtariVectorEnv, which does not render")
