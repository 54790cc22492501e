"""What an environment family declares, in one place: :class:`Family`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium


@dataclass(frozen=True)
class Family:
    """A kind of environment id and everything drlmpi does differently for it.

    ``make(env_id, *, sim_cost_ms, max_episode_steps, atari, train, num_threads, **kwargs)``
    builds one environment (the arguments of :func:`drlmpi.envs.make.make_env`; a family ignores
    those it has no use for). A simulator's environments are stepped by the banks of
    :mod:`drlmpi.envs.vector`, which every family shares (ALE environments join one vector env
    there by their type, :func:`drlmpi.envs.atari_bank.joined_bank`).
    """

    #: a short name (``gym``, ``atari``, ``mujoco``)
    name: str
    #: whether an ``env.id`` is one of this family's
    recognises: Callable[[str], bool]
    #: one environment of an id of this family
    make: Callable[..., gymnasium.Env]
    #: the family's own ``make`` keyword arguments read from an ``env`` config section
    make_options: Callable[[Any], dict[str, Any]]
    #: refuse, with a one-line ConfigError, options of an ``env`` section this family cannot run
    check_options: Callable[[Any], None]
    #: how to install what its ids need ("" when Gymnasium alone makes them)
    install_hint: str = ""
    #: whether ``python -m drlmpi.play --render`` can open a window for its ids
    renders: bool = True
    #: why it cannot, when it cannot (play's error message)
    no_render_reason: str = ""
