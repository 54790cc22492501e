"""One round of a data-parallel job, the same on every rank (allgather, parameter_server, the
learners of groups): collect and store, agree on the counts (one ``Allgather``), log every
rank's episodes on one rank, count the job-wide steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from drlmpi.mpi.timed import TimedComm
from drlmpi.mpi.wire import RoundCounts, int64_message
from drlmpi.roles.actor import Actor, episode_stats
from drlmpi.roles.learner import Learner


def exchange_round_counts(comm: TimedComm, new_steps: int, due: int, episodes: int) -> np.ndarray:
    """``Allgather`` of every rank's :class:`~drlmpi.mpi.wire.RoundCounts`: ``(size, 3)`` int64."""
    local = int64_message(RoundCounts, new_steps=new_steps, updates_due=due, episodes=episodes)
    table = np.empty((comm.size, len(RoundCounts)), dtype=np.int64)
    comm.Allgather(local, table, kind="counts")
    return table


def gather_episodes(comm: TimedComm, rows: np.ndarray, layout: Any, counts: np.ndarray,
                    root: int, learner: Learner | None, names: Sequence[int] | None = None,
                    log_own: bool = True) -> None:
    """Log every rank's finished episodes on ``root`` with the rank that ran them: ``root``'s own
    from its ``rows`` (unless ``log_own``: the caller logged them), the others' ``[return,
    length]`` pairs with one ``Gatherv``. ``counts[r]`` = episodes rank r finished this round;
    ``learner`` is used on ``root`` only; ``names[r]``: the rank logged for ``comm``'s rank r
    (default r)."""
    from mpi4py import MPI

    name = (lambda r: r) if names is None else (lambda r: int(names[r]))
    if comm.rank == root and learner is not None and log_own:
        learner.log_episodes(rows, name(root))
    sizes = counts.astype(np.int64) * 2
    sizes[root] = 0
    if sizes.sum() == 0:
        return
    if comm.rank != root:
        comm.Gatherv(episode_stats(rows, layout), None, root=root, kind="episodes")
        return
    stats = np.empty((int(sizes.sum()) // 2, 2), dtype=np.float32)
    displacements = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    comm.Gatherv(np.empty((0, 2), np.float32), [stats, sizes, displacements, MPI.FLOAT], root=root,
                 kind="episodes")
    start = 0
    for rank, size in enumerate(sizes // 2):
        for ret, length in stats[start : start + size]:
            learner.record_episode(float(ret), int(length), name(rank))
        start += size


def data_parallel_round(comm: TimedComm, learner: Learner, actor: Actor | None, every: int,
                        unit: str, root: int) -> np.ndarray:
    """One round on every rank of a data-parallel job.

    A rank with an ``actor`` collects ``every`` steps (or episodes) and stores them in its own
    learner (accruing updates); a rank without one (the parameter server) contributes nothing.
    All ranks then ``Allgather`` their :class:`~drlmpi.mpi.wire.RoundCounts`, ``root`` logs every
    rank's finished episodes, and every learner counts the job-wide steps. Returns the counts
    table: ranks run ``table[:, RoundCounts.UPDATES_DUE].min()`` updates (or what ``root``
    decides) so that all of them take part in the same number of gradient collectives.
    """
    rows = actor.collect(every, unit) if actor is not None else learner.layout.empty(0)
    learner.store(rows)
    episodes = len(episode_stats(rows, learner.layout)) if len(rows) else 0
    table = exchange_round_counts(comm, len(rows), learner.pending_updates, episodes)
    gather_episodes(comm, rows, learner.layout, table[:, RoundCounts.EPISODES], root,
                    learner if comm.rank == root else None)
    learner.count_steps(int(table[:, RoundCounts.NEW_STEPS].sum()))
    return table
