"""What every topology must provide (:class:`Topology`): its settings class (its schema scope), its
rank rules, its pace model for the planner, how reports show it, and its run on every rank - plus
the options that topologies syncing in amounts of experience share (:class:`SyncFields`,
:func:`ramp_from`) and the round-control messages the collective topologies share.

A topology decides who simulates, who learns and what moves when. It builds its roles through
the context (:mod:`drlmpi.topologies.core.context`) and returns a :class:`RankReport` from every rank;
:mod:`drlmpi.run` gathers those into ``summary.json``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from drlmpi.config.errors import ConfigError
from drlmpi.config.scopes import TopologySettings
from drlmpi.config.settings import Settings, choice, integer, options_of
from drlmpi.job_control.launchers import size_refusal
from drlmpi.mpi.wire import Control, int64_message
from drlmpi.roles.learner import Learner
from drlmpi.topologies.core.reports import RankReport

if TYPE_CHECKING:
    from drlmpi.topologies.core.context import RunContext, RunPlan


@dataclass(frozen=True)
class SyncFields(Settings):
    """``sync_every`` and ``sync_unit``: the experience a simulator collects per round or chunk
    (the settings of every topology that syncs in amounts of experience derive from it, and each
    redeclares ``sync_every`` with its own default and what it means there)."""

    sync_every: int = integer(256, "experience collected per round (sync_unit: steps or episodes)")
    sync_unit: str = choice("steps", "what sync_every counts: environment steps or episodes",
                            "steps", "episodes")


def ramp_from() -> Any:
    """p2p's and star's ``ramp_from``: a run's first rounds short, so the learner starts training
    after a few steps instead of idling through a whole first round (:func:`round_sizes`)."""
    return integer(None, "steps each simulator collects in the first round, doubled every round up to the "
                         "round's size (null: every round full size; sync_unit=steps only)", nullable=True)


def round_sizes(every: int, ramp_from: int | None) -> Iterator[int]:
    """The steps (or episodes) of each round, in order: ``every`` each, or with ``ramp_from``
    ``ramp_from``, twice that, ... up to ``every`` and ``every`` from then on."""
    size = every if ramp_from is None else min(every, max(1, ramp_from))
    while True:
        yield size
        size = min(every, 2 * size)


def whole_rounds(settings: Any) -> bool:
    """Every round of p2p's or star's ``settings`` is the same number of steps (none of
    episodes, none ramped up): a run then ends at the end of the round that reaches its budget."""
    return settings.sync_unit == "steps" and settings.ramp_from is None


def check_ramp(name: str, ramp_from: int | None, sync_unit: str) -> None:
    """Refuse ``ramp_from`` where rounds count episodes (a ramp counts steps)."""
    if ramp_from is not None and sync_unit != "steps":
        raise ConfigError(f"topology.ramp_from counts steps: use topology.sync_unit=steps with it "
                          f"(topology={name}, sync_unit={sync_unit})")


class Topology(ABC):
    """A way of wiring simulator ranks to learner ranks.

    Subclasses set :attr:`name`, :attr:`settings_class` (the ``topology.*`` options with their
    types, defaults and docs, a frozen dataclass of :class:`~drlmpi.config.scopes.TopologySettings`:
    the schema's ``topology/<name>`` scope, added by :mod:`drlmpi.topologies.core.registry`), the
    accepted world sizes and, if needed, override :meth:`check` to refuse algorithms they cannot
    drive. An instance reads its settings typed (``self.cfg.sync_every``), every class method
    through :meth:`settings_of`. The planner reads their pace model
    (``pace``, :mod:`drlmpi.topologies.core.pace`). They also declare how reports show them:
    :attr:`report_order` (row order), :attr:`report_variants` (config keys whose non-default
    value is part of the label, ``allgather[allgather]``) and :meth:`paper_label` (the row name in
    the DQN paper's runtime table); a class method ``report_section(runs)`` adds a section of its
    own to the report (central's serves). Adding a topology is one Python file and one YAML file
    (in conf/topology/, or a plugin directory: :mod:`drlmpi.config.plugins`); nothing else is
    edited.
    """

    name: ClassVar[str]
    #: its settings: ``_target_``, ``name`` and its options, each a field with its type, default
    #: and doc (``_target_`` and ``name`` default to its YAML file's: the registry sees to it)
    settings_class: ClassVar[type[TopologySettings]] = TopologySettings
    min_ranks: ClassVar[int] = 1
    max_ranks: ClassVar[int | None] = None
    report_order: ClassVar[int] = 100
    #: config key -> default value; a run with another value is labelled ``name[value]``
    #: (``name[key=value]`` for a number: ``star[sync_every=64]``). ``None``: the default of the
    #: option of that name in its own :attr:`settings_class`, so a subclass with another default
    #: (a plugin's) is labelled against its own; a value names the default to compare with
    #: (allgather's backend is labelled against ``mpi``, what ``auto`` resolves to without NCCL).
    report_variants: ClassVar[dict[str, Any]] = {}
    #: whether it can play evaluations on its simulators (``run.eval_on=simulators``): the
    #: synchronous rounds of p2p and star, where simulators wait for the learner each round
    evaluates_on_simulators: ClassVar[bool] = False

    def __init__(self, cfg: TopologySettings | Mapping[str, Any]) -> None:
        #: this topology's settings, typed: ``self.cfg.sync_every`` is an int
        self.cfg = self.settings_of(cfg)

    @classmethod
    def settings_of(cls, cfg: TopologySettings | Mapping[str, Any]) -> Any:
        """``cfg`` as this topology's settings: the settings themselves, or built from a checked
        config node, a saved run's config or a plain mapping (an option it lacks - a run written
        before the option existed - takes its default)."""
        return cls.settings_class.coerce(cfg)

    @classmethod
    def hints(cls, plan: RunPlan) -> tuple[str, ...]:
        """Advice for a job this topology accepts, one line each: rank 0 prints them before
        training (``drlmpi: hint: ...``); never a refusal. None by default."""
        return ()

    @classmethod
    def report_label(cls, topo_cfg: TopologySettings | Mapping[str, Any] | None) -> str:
        """The label of a run with this topology config in reports (``async[free]``): its settings,
        or a saved run's config (an option it lacks was not there to set: the run is labelled as
        the variant's default, ``mpi`` for a run before ``backend``)."""
        settings, options = cls.settings_of(topo_cfg or {}), options_of(cls.settings_class)
        given = options.keys() if isinstance(topo_cfg, TopologySettings) else (topo_cfg or {}).keys()
        parts = []
        for key, default in cls.report_variants.items():
            if key not in options or key not in given:
                continue  # a subclass without the option (a plugin's), or a run before it: not its variant
            default = options[key].default if default is None else default
            value = getattr(settings, key)
            if value != default:
                parts.append(str(value) if isinstance(value, str) else f"{key}={value}")
        return f"{cls.name}[{','.join(parts)}]" if parts else cls.name

    @classmethod
    def paper_label(cls, world_size: int) -> str | None:
        """This topology's column name in the DQN paper's runtime table, if it has one."""
        return None

    @classmethod
    def fixed_world_size(cls) -> int | None:
        """The only world size this topology accepts, if there is just one."""
        return cls.min_ranks if cls.max_ranks == cls.min_ranks else None

    @classmethod
    def smallest_world(cls, cfg_topology: TopologySettings | Mapping[str, Any]) -> int:
        """The fewest ranks this topology runs with under ``cfg_topology``."""
        return cls.min_ranks

    @classmethod
    def sizes_text(cls) -> str:
        """Human text of the accepted world sizes."""
        if cls.max_ranks == cls.min_ranks:
            return f"exactly {cls.min_ranks} rank{'s' if cls.min_ranks > 1 else ''}"
        if cls.max_ranks is None:
            return f"at least {cls.min_ranks} rank{'s' if cls.min_ranks > 1 else ''}"
        return f"{cls.min_ranks} to {cls.max_ranks} ranks"

    @classmethod
    def env_ranks(cls, world_size: int, topo_cfg: TopologySettings | Mapping[str, Any]) -> int:
        """The ranks of a ``world_size``-rank job that step environments (each steps
        ``env.num_envs``): by default every rank but one learner (sequential: its one rank).
        PPO's ``algo.rollout_steps_per_env`` counts the job's environments with it."""
        return max(1, world_size - 1)

    @classmethod
    def check(cls, plan: RunPlan) -> None:
        """Raise :class:`ConfigError` if this topology cannot run ``plan`` (called once, by
        :func:`~drlmpi.run.preflight.make_plan`, before any rank talks): :meth:`check_world`,
        then what a subclass refuses of its settings (``cls.settings_of(plan.cfg.topology)``)."""
        cls.check_world(plan)

    @classmethod
    def check_world(cls, plan: RunPlan) -> None:
        """Refuse a world size this topology does not accept, or ``run.eval_on=simulators`` where
        its simulators cannot evaluate (what a group of ``topology=groups`` wired by this
        topology passes too)."""
        world_size = plan.world_size
        if world_size < cls.min_ranks or (cls.max_ranks is not None and world_size > cls.max_ranks):
            raise ConfigError(size_refusal(f"topology={cls.name} needs {cls.sizes_text()}", world_size,
                                           max(cls.min_ranks, 1), f"topology={cls.name}",
                                           more=cls.max_ranks != cls.min_ranks))
        if plan.cfg.run.eval_on == "simulators" and not cls.evaluates_on_simulators:
            raise ConfigError(f"run.eval_on=simulators needs the rounds of topology=p2p or topology=star; "
                              f"topology={cls.name} evaluates on its learner: use run.eval_on=learner")

    @abstractmethod
    def run(self, ctx: RunContext) -> RankReport:
        """Run the experiment on this rank and report what it did."""


def control_message(stop: bool, learner: Learner, n_updates: int = 0,
                    checkpoint: bool = False) -> np.ndarray:
    """The learner's :class:`~drlmpi.mpi.wire.Control` message for this round."""
    return int64_message(Control, stop=stop, env_steps=learner.env_steps, updates=learner.updates,
                         n_updates=n_updates, checkpoint=checkpoint)


def empty_control() -> np.ndarray:
    """A receive buffer for a :class:`~drlmpi.mpi.wire.Control` message."""
    return int64_message(Control)
