"""Asynchronous topology: 1 learner + N simulators, nonblocking point-to-point messages.

The DQN paper's section III.D, which failed there on pickled weights with nonblocking calls;
here every message is a fixed-layout byte buffer (:class:`~drlmpi.mpi.wire.PackedMessage`).

Simulator (ranks 1..N), in a loop: collect ``sync_every`` steps; ``Isend`` the chunk (a
:class:`~drlmpi.mpi.wire.ChunkHeader`: policy version, rows, sequence number, simulator steps) from
a pool of ``slots`` buffers, re-using a buffer only after its request completed; test the
pre-posted weights and control ``Irecv``s and load whatever arrived (the newest weights win).
A simulator sends a chunk only while it holds a *credit*; it starts with ``slots`` and the
learner grants one back per chunk it has taken in.

Learner (rank 0): ``slots`` ``Irecv`` per simulator, always re-posted, so every chunk in flight
has a receive waiting (no chunk ever blocks the channel behind it); ``Testsome`` between every
update (``Waitany`` only when it has nothing else to do), so it never waits for the slowest
simulator; it publishes weights with ``Isend`` every ``publish_every`` updates to every
simulator whose previous weights send has completed (the others get the next publication).

* ``max_policy_lag`` (learner updates between the weights that acted and the update that would
  learn from the chunk): an older chunk is discarded (counted, its episodes still logged). The
  observed lag (mean, max) is in the summary. ``null``: a replay-based algorithm keeps every
  chunk; an on-policy one (PPO) is bounded by one rollout's worth of updates
  (:meth:`~drlmpi.algos.base.Algorithm.rollout_updates`) plus ``publish_every``.
* ``utd_mode=ratio``: ``algo.updates_per_step`` updates per received step, held by credits:
  while more than ``max_pending_updates`` updates are owed, the learner withholds credits and
  simulators that run out wait. ``utd_mode=free``: credits come back at once and the learner
  trains continuously once its replay is ready; the ratio that results is recorded
  (off-policy algorithms only).
* On-policy algorithms learn from rows at most about one rollout old: by default credits are
  withheld once one whole rollout waits behind the one training (``max_pending_updates`` null:
  once the most one chunk entitled, not twice), and a simulator waits for a credit *before* it
  collects a chunk, so no chunk waits for a credit while its weights age. (PPO corrects for the
  rest: V-trace and the decoupled objective, :mod:`drlmpi.algos.ppo`.)
* Chunks are learned from in each simulator's sending order (``SEQUENCE``): one that completes
  before its predecessor (several receives are posted per simulator) waits for it, so each
  environment stream's rows reach the learner in time order.
* Exploration uses the job-wide step count the learner publishes with the weights.
* Shutdown: the learner sends each simulator a :class:`~drlmpi.mpi.wire.CreditMessage`
  ``[STOP, weights messages sent to it]``; the simulator completes its outstanding chunk sends,
  receives the weights still in flight, reports how many chunks it sent (``DONE``) and stops;
  the learner keeps receiving until every chunk is accounted for, then cancels its remaining
  receives. No request is left pending at ``MPI_Finalize``.
"""

from __future__ import annotations

from drlmpi.config.errors import ConfigError
from drlmpi.topologies.asynchronous.learner import AsyncLearner
from drlmpi.topologies.asynchronous.settings import AsyncSettings
from drlmpi.topologies.asynchronous.simulator import LEARNER_RANK, AsyncSimulator
from drlmpi.topologies.core.base import SyncFields, Topology
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.pace import Pace, Probe, first_round, learner_side, sync_rows
from drlmpi.topologies.core.reports import RankReport


class Asynchronous(Topology):
    """Learner and simulators never wait for each other (within bounded lag and buffering)."""

    name = "async"
    settings_class = AsyncSettings
    cfg: AsyncSettings
    min_ranks = 2
    max_ranks = None
    report_order = 40
    report_variants = {"utd_mode": "ratio"}

    @classmethod
    def check(cls, plan) -> None:
        super().check(plan)
        settings = cls.settings_of(plan.cfg.topology)
        check_chunks(settings)
        if plan.algo_cls.kind == "on_policy" and settings.utd_mode == "free":
            raise ConfigError(f"topology.utd_mode=free is for off-policy algorithms, not "
                              f"{plan.cfg.algo.name}")

    @classmethod
    def pace(cls, ranks: int, p: Probe, settings: AsyncSettings) -> Pace:
        """No rounds: max(s/(N-1), c + rho u + a chunk's receive per row + rho (N-1) weight
        sends per publish_every updates)."""
        sims, rows, f = ranks - 1, sync_rows(p, settings.sync_every), p.slowdown_at(ranks)
        publish = max(1, settings.publish_every)
        per_step = (p.message_s(rows * p.row_bytes) / rows
                    + p.updates_per_step * sims * p.message_s(p.weight_bytes) / publish)
        learn, warm = learner_side(p, f, per_step)
        return Pace(sim=p.sim_step_s * f / sims, learn=learn, learn_warm=warm,
                    start=first_round(p, settings.sync_every, f))

    def run(self, ctx: RunContext) -> RankReport:
        if ctx.comm.rank == LEARNER_RANK:
            return AsyncLearner(ctx, self.cfg, free=self.cfg.utd_mode == "free").run()
        return AsyncSimulator(ctx, self.cfg).run()


def check_chunks(settings: SyncFields) -> None:
    """Refuse rounds counted in episodes: async's chunks (a group's of topology=groups too) are
    fixed-size buffers of ``sync_every`` steps."""
    if settings.sync_unit != "steps":
        raise ConfigError("topology=async sends fixed-size chunks: use topology.sync_unit=steps")
