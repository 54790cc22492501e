"""Atari games of the Arcade Learning Environment (``ALE/<Game>-v5``): every one is played
through ale-py's ``AtariVectorEnv`` (:mod:`drlmpi.envs.atari`, :mod:`drlmpi.envs.atari_bank`).
The family's own options (:class:`AtariOptions`): ``env.atari``, the preprocessing, and
``env.num_threads``, the threads of the vector env a simulator's environments join. Its ids need
ale-py installed and have no render window."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium

from drlmpi.config.errors import ConfigError
from drlmpi.config.settings import Settings, integer, mapping
from drlmpi.envs.families.base import Family

INSTALL_HINT = "pip install ale-py; it ships the game ROMs"

@dataclass(frozen=True)
class AtariOptions(Settings):
    """The family's ``env`` options (scope ``env/atari``; conf/env/breakout.yaml, pong.yaml and
    tetris.yaml start from its node, ``schema/env/atari``)."""

    scope: ClassVar[str] = "env/atari"
    num_threads: int = integer(1, "threads stepping a simulator's num_envs environments (its one "
                                  "AtariVectorEnv); at most the cores each rank may use")
    atari: Mapping[str, Any] | None = mapping({}, "preprocessing: docs/environments.md lists the keys ({} "
                                                  "or null: the defaults there; env.atari.frame_stack=2 sets "
                                                  "one)", nullable=True)


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` names an Arcade Learning Environment game (``ALE/<Game>-v5``)."""
    return str(env_id).startswith("ALE/")


def make(env_id: str, *, sim_cost_ms: float = 0.0, max_episode_steps: int | None = None,
         train: bool = True, atari: Any = None, num_threads: int = 1, **kwargs: Any) -> gymnasium.Env:
    """One ``AtariVectorEnv`` environment with the preprocessing ``atari`` (``env.atari``),
    joining a vector env of ``num_threads`` threads in a simulator
    (:func:`drlmpi.envs.atari_bank.make_atari`); ``kwargs`` go to ``AtariVectorEnv``."""
    from drlmpi.envs.atari_bank import make_atari

    # The cost goes into the settings (the bank burns it), so the environment can still join
    # its simulator's vector env.
    return make_atari(env_id, atari, train=train, max_episode_steps=max_episode_steps,
                      sim_cost_ms=sim_cost_ms, num_threads=num_threads, **kwargs)


def join(envs: list[gymnasium.Env], dtype: Any) -> Any:
    """A simulator's ALE environments as one ``AtariVectorEnv`` bank
    (:func:`drlmpi.envs.atari_bank.joined_bank`)."""
    from drlmpi.envs.atari_bank import joined_bank

    return joined_bank(envs, dtype)


def threads(options: Mapping[str, Any]) -> int:
    """The vector env's threads, ``env.num_threads``."""
    return options["num_threads"]


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
        check_atari_options(FAMILY.option_values(env)["atari"])
        check_ale_kwargs(env.get("kwargs"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


FAMILY = Family(name="atari", recognises=is_atari, make=make, ids="ALE/ ids", settings=AtariOptions,
                check_options=check_options, join=join, threads=threads, install_hint=INSTALL_HINT,
                renders=False, no_render_reason="ALE ids are played by AtariVectorEnv, which does not render")
