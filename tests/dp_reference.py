"""Data-parallel updates on fixed minibatches, run on MPI pool ranks by tests/test_data_parallel.py.

:func:`main` (``MODE OUT_DIR UPDATES ALGO...``; also ``python -m mpi4py tests/dp_reference.py
MODE OUT_DIR UPDATES ALGO...`` under mpiexec): every rank builds the same
networks, runs ``UPDATES`` updates in which each contributing rank's gradients come from its own
fixed minibatch (:func:`minibatch`), reduced by the real topology code (``MODE``: ``allreduce``
or ``allgather`` - every rank contributes -, ``gloo``: the torch.distributed path of
``topology.backend``, every rank contributes; ``groups``: the world split as ``topology=groups``
with 2 learners, only the learners (ranks 0 and size/2) contribute and save; or ``server``:
rank 0 is a parameter server that contributes nothing and steps, ranks 1.. are workers), and
saves its ``state_dict`` (online AND target networks) as ``OUT_DIR/<algo>_rank<r>.pt``. The test
compares each with one process updating on the concatenated minibatches.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from drlmpi.algos.dqn import DQN
from drlmpi.algos.td3 import TD3
from drlmpi.config.schema import group_config
from drlmpi.envs.make import probe_spec

CONF = Path(__file__).resolve().parent.parent / "conf"
BATCH = 16


def make_algo(name: str):
    """A learner instance, identical on every rank (same seed); TD3 without smoothing noise
    (random per rank) and with an actor step every second update."""
    if name == "dqn":
        cfg = group_config("algo", "dqn")
        cfg.target_update_every = 3
        return DQN(probe_spec("CartPole-v1"), cfg, seed=0, learner=True)
    cfg = group_config("algo", "td3")
    cfg.hidden = [32, 32]
    cfg.policy_noise = 0.0
    cfg.tau = 0.1
    return TD3(probe_spec("Pendulum-v1"), cfg, seed=0, learner=True)


def minibatch(algo, rank: int, k: int) -> dict[str, torch.Tensor]:
    """A fixed minibatch for ``rank``'s ``k``-th update."""
    rng = np.random.default_rng(1000 * rank + k)
    spec = algo.spec
    obs = rng.normal(size=(BATCH, spec.obs_dim)).astype(np.float32)
    next_obs = rng.normal(size=(BATCH, spec.obs_dim)).astype(np.float32)
    if spec.discrete:
        action = rng.integers(0, spec.n_actions, size=(BATCH, 1)).astype(np.float32)
    else:
        shape = (BATCH, spec.action_dim)
        action = rng.uniform(spec.action_low, spec.action_high, size=shape).astype(np.float32)
    return {
        "obs": torch.from_numpy(obs), "next_obs": torch.from_numpy(next_obs),
        "action": torch.from_numpy(action),
        "reward": torch.from_numpy(rng.normal(size=BATCH).astype(np.float32)),
        "terminated": torch.from_numpy((rng.random(BATCH) < 0.2).astype(np.float32)),
    }


def concatenated(algo, ranks: list[int], k: int) -> dict[str, torch.Tensor]:
    parts = [minibatch(algo, r, k) for r in ranks]
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}


def main(mode: str, out_dir: str, updates: int, names: list[str], world=None) -> None:
    """The updates of ``mode`` on ``world`` (COMM_WORLD by default), each rank saving its state."""
    from mpi4py import MPI

    from drlmpi.mpi.timed import TimedComm
    from drlmpi.topologies.core.data_parallel.backend import DistExchange, DistGroup, place
    from drlmpi.topologies.core.data_parallel.exchanges import (
        AllgatherExchange,
        AllreduceExchange,
        ServerExchange,
        WorkerExchange,
    )
    from drlmpi.topologies.groups import split_groups

    comm = TimedComm((world or MPI.COMM_WORLD).Dup())
    dist = None
    if mode == "gloo":
        dist = DistGroup(comm, "gloo", torch.device("cpu"), place(comm))
    if mode == "groups":  # 2 groups: the learners (ranks 0 and size/2) average, simulators idle
        _, _, group_comm, learners = split_groups(comm, 2)
    for name in names:
        algo = make_algo(name)
        if mode == "groups":
            if learners is not None:
                exchange = AllreduceExchange(learners)
                for k in range(updates):
                    algo.update_on(minibatch(algo, comm.rank, k), exchange)
                torch.save(algo.state_dict(), Path(out_dir) / f"{name}_rank{comm.rank}.pt")
            continue
        if mode == "server" and comm.rank == 0:
            algo.run_updates(updates, ServerExchange(comm, workers=comm.size - 1))
        else:
            exchanges = {"allreduce": AllreduceExchange, "allgather": AllgatherExchange}
            exchange = DistExchange(dist) if dist is not None else exchanges.get(mode, WorkerExchange)(comm)
            for k in range(updates):
                algo.update_on(minibatch(algo, comm.rank, k), exchange)  # a fixed minibatch
        torch.save(algo.state_dict(), Path(out_dir) / f"{name}_rank{comm.rank}.pt")
    if dist is not None:
        dist.close()
    comm.free()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:])
