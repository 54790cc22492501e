"""Star topology with ``payload=gradients``: a parameter server (the TD3 slides' design).

Ranks 1..N are workers: each simulates into its own replay/rollout storage, samples, computes
gradients and sends them to rank 0 with ONE ``Reduce(SUM)`` per network per update. Rank 0 is
the server: it averages the gradients, steps the only optimizer that ever steps, and broadcasts
the network's parameters (``Bcast``), which the workers act and compute with from then on.
The server computes no gradients: it follows ``algo.sync_schedule`` to take part in the same
collectives as the workers (for TD3, the actor only every ``policy_delay`` updates).

Each round: workers collect ``sync_every`` steps; one ``Allgather`` of ``[steps, updates due,
episodes]`` tells the server the job-wide step count and the number of updates every worker can
run (the minimum); finished episodes' returns go to the server with ``Gatherv``; the server
evaluates, decides whether to stop, and broadcasts ``[stop, env steps, updates, n updates]``.
"""

from __future__ import annotations

import time

import numpy as np

from drlmpi.roles import episode_stats
from drlmpi.topologies.base import RankReport, RunContext, learner_report, sync_amount
from drlmpi.topologies.gradients import (
    ParameterServerSync,
    broadcast_all_params,
    exchange_round_counts,
    gather_episodes,
    serve_updates,
)

SERVER = 0


def _control(stop: bool, env_steps: int, updates: int, n_updates: int) -> np.ndarray:
    return np.array([int(stop), env_steps, updates, n_updates], dtype=np.int64)


def serve(ctx: RunContext) -> RankReport:
    """Rank 0: average gradients, step, broadcast parameters; evaluate; decide when to stop."""
    comm = ctx.comm
    workers = comm.size - 1
    algo = ctx.make_algo(learner=True, shared_init=True)
    learner = ctx.make_learner(algo)
    broadcast_all_params(comm, algo, root=SERVER)
    rounds = 0
    while True:
        table = exchange_round_counts(comm, 0, 0, 0)
        gather_episodes(comm, None, algo.layout, table[:, 2], SERVER, learner)
        learner.env_steps += int(table[1:, 0].sum())
        rounds += 1
        learner.maybe_evaluate()
        stop = learner.stop_reason() is not None
        n_updates = 0 if stop else int(table[1:, 1].min())
        comm.Bcast(_control(stop, learner.env_steps, algo.updates, n_updates), root=SERVER,
                   kind="control")
        if stop:
            break
        t0, mpi0 = time.perf_counter(), comm.wait_s
        serve_updates(comm, algo, n_updates, workers)
        learner.learn_s += (time.perf_counter() - t0) - (comm.wait_s - mpi0)
        ctx.progress()
    learner.topology_stats.update({"payload": "gradients", "rounds": rounds})
    return learner_report(comm.rank, learner, role="server")


def work(ctx: RunContext) -> RankReport:
    """Ranks 1..N: simulate, store, compute gradients, receive the server's parameters."""
    comm = ctx.comm
    every, unit = sync_amount(ctx.cfg.topology)
    workers = comm.size - 1
    algo = ctx.make_algo(learner=True, shared_init=True)
    learner = ctx.make_learner(algo, log=False)
    actor = ctx.make_actor(simulator_index=comm.rank - 1)
    sync = ParameterServerSync(comm, SERVER)
    broadcast_all_params(comm, algo, root=SERVER)
    actor.algo.policy.flat.load_params(algo.policy.flat.params_numpy())
    control = np.zeros(4, dtype=np.int64)
    while True:
        actor.set_global_steps(int(control[1]), workers)
        rows = actor.collect(every, unit)
        algo.observe(rows)
        learner.pending_updates += algo.updates_due(len(rows))
        table = exchange_round_counts(comm, len(rows), learner.pending_updates,
                                      len(episode_stats(rows, algo.layout)))
        gather_episodes(comm, rows, algo.layout, table[:, 2], SERVER, None)
        comm.Bcast(control, root=SERVER, kind="control")
        if control[0]:
            break
        learner.train(sync, max_updates=int(control[3]))
        actor.algo.policy.flat.load_params(algo.policy.flat.params_numpy())
        actor.algo.on_policy_loaded()
    actor.close()
    report = learner_report(comm.rank, learner, role="worker", actor=actor)
    return report
