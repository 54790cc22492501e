"""What an environment family declares, in one place: :class:`Family`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium

from drlmpi.config.options import Option
from drlmpi.config.scopes import EnvSettings
from drlmpi.config.settings import Settings, options_of


@dataclass(frozen=True)
class NoOptions(Settings):
    """A family without ``env`` options of its own."""


def env_section(own: type[Settings]) -> type[EnvSettings]:
    """The settings class of a whole ``env`` section of a family's ids: every environment's
    options and the family's own (``own``), one frozen dataclass."""
    if own is NoOptions:
        return EnvSettings
    section = dataclass(frozen=True)(type(f"{own.__name__}Env", (EnvSettings, own),
                                          {"__module__": own.__module__, "scope": "env"}))
    section.__doc__ = f"An ``env`` section of the ids {own.__name__} serves: every env option and its own."
    return section


def _nothing_to_check(env: Any) -> None:
    """A family without refusals of its own."""


def _one_thread(options: Mapping[str, Any]) -> int:
    """A family whose environments step in the simulator's own thread."""
    return 1


@dataclass(frozen=True)
class Family:
    """A kind of environment id and everything drlmpi does differently for it.

    ``make(env_id, *, sim_cost_ms, max_episode_steps, train, **kwargs)`` builds one environment
    (the arguments of :func:`drlmpi.envs.make.make_env`; a family ignores those it has no use
    for); ``kwargs`` are the family's own :attr:`options`' values (by name) and ``env.kwargs``.
    A simulator's environments are stepped by the banks of :mod:`drlmpi.envs.vector`, which
    every family shares; a family that steps several of its environments together gives
    :attr:`join`, and ``env.vector=sync`` then steps them in the bank it returns.
    """

    #: a short name (``gym``, ``atari``, ``mujoco``); its ``env`` scope is ``env/<name>``
    name: str
    #: whether an ``env.id`` is one of this family's
    recognises: Callable[[str], bool]
    #: one environment of an id of this family
    make: Callable[..., gymnasium.Env]
    #: its ids, in words, for messages and the reference (``ALE/ ids``)
    ids: str = "Gymnasium ids"
    #: its own ``env`` options as a settings class (the schema's scope ``env/<name>``; the env files
    #: of its ids start from the node ``schema/env/<name>``, every env option and these): their
    #: values are passed to :attr:`make`
    settings: type[Settings] = NoOptions
    #: refuse, with a one-line ConfigError, what an ``env`` section of its ids cannot run
    check_options: Callable[[Any], None] = _nothing_to_check
    #: one bank stepping a simulator's environments of this family together
    #: (``join(envs, dtype)``; ``None``, or no ``join``: they step one after another)
    join: Callable[[list[gymnasium.Env], Any], Any] | None = None
    #: the busy threads a simulator's environments run in its rank, from the option values
    #: (binding a rank to one core serialises more than one)
    threads: Callable[[Mapping[str, Any]], int] = _one_thread
    #: how to install what its ids need ("" when Gymnasium alone makes them)
    install_hint: str = ""
    #: whether ``python -m drlmpi.play --render`` can open a window for its ids
    renders: bool = True
    #: why it cannot, when it cannot (play's error message)
    no_render_reason: str = ""

    #: (the class of a whole env section of its ids, made once: :meth:`section`)
    _sections: ClassVar[dict[type[Settings], type[EnvSettings]]] = {}

    @property
    def options(self) -> dict[str, Option]:
        """Its own ``env`` options (generated from :attr:`settings`)."""
        return options_of(self.settings)

    def section(self) -> type[EnvSettings]:
        """The settings class of a whole ``env`` section of its ids (:func:`env_section`)."""
        if self.settings not in self._sections:
            self._sections[self.settings] = env_section(self.settings)
        return self._sections[self.settings]

    def option_values(self, env: Mapping[str, Any] | Settings) -> dict[str, Any]:
        """Its own options' values in the ``env`` section ``env`` (a config node or typed
        settings), typed, an option's default where the section lacks it (``env.id=`` naming one
        of its ids on another family's env file)."""
        own = self.settings.build(env)
        return {key: getattr(own, key) for key in self.options}
