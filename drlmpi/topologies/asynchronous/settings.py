"""The options of ``topology=async`` (:class:`AsyncSettings`) and of its chunks, credits, lag bound
and publications wherever they run (:class:`AsyncChunkFields`: async's, and each async group's of
``topology=groups``, whose settings derive from it too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from drlmpi.config.scopes import TopologySettings, label, target
from drlmpi.config.settings import choice, integer
from drlmpi.topologies.core.base import SyncFields


@dataclass(frozen=True)
class AsyncChunkFields(SyncFields):
    """What the async simulator and learner read (:mod:`drlmpi.topologies.asynchronous`): chunks
    of ``sync_every`` steps, ``slots`` in flight per simulator, the learner's publications, lag
    bound and credit limit."""

    publish_every: int = integer(32, "the learner publishes weights every this many updates")
    max_policy_lag: int | None = integer(
        None, "discard chunks acted with weights older than this many updates (null: on-policy algorithms "
              "one rollout's updates + publish_every, others keep all)", low=0, nullable=True)
    max_pending_updates: int | None = integer(
        None, "ratio mode: owed updates above which credits are withheld (null: the most one chunk "
              "entitled, twice that for replay-based algorithms)", nullable=True)
    slots: int = integer(2, "experience buffers in flight per simulator")


@dataclass(frozen=True)
class AsyncSettings(AsyncChunkFields, TopologySettings):
    scope: ClassVar[str] = "topology/async"
    _target_: str = target("drlmpi.topologies.asynchronous.Asynchronous")
    name: str = label("async", "topology")
    sync_every: int = integer(64, "steps (per environment) per experience chunk")
    utd_mode: str = choice("ratio", "ratio: algo.updates_per_step per received step; free: train flat out",
                           "ratio", "free")
