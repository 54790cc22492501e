"""Microseconds to average one network's gradients across the learners, per backend.

``mpirun -n 2 python -m mpi4py -m drlmpi.bench.allreduce --algo dqn --device cuda``
(``--algo ppo --obs atari_impala``: the Breakout presets' network)

Every rank builds the algorithm's learner networks (its defaults, e.g. DQN's 256x256 Q-network)
on its device (``cuda``: GPU local rank mod GPUs) and times drlmpi's own gradient exchanges on
their flat gradient buffers, in ONE invocation:

* ``mpi``: :class:`~drlmpi.topologies.core.data_parallel.exchanges.AllreduceExchange` - device-to-host copy,
  ``Allreduce`` of host memory, host-to-device copy;
* ``nccl`` (CUDA) or ``gloo`` (CPU): :class:`~drlmpi.topologies.core.data_parallel.backend.DistExchange` - one
  ``torch.distributed`` all-reduce where the gradients live.

Each exchange is followed by a device synchronisation, so the time is the whole latency an
update waits for. Rank 0 prints microseconds per exchange (median of ``--repeats`` timed blocks)
and the ratio mpi / backend.
"""

from __future__ import annotations

import statistics
import time

from drlmpi.config.inputs import ArgumentParser, positive_int


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m drlmpi.bench.allreduce", description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", default="dqn", choices=("dqn", "td3", "ppo"))
    parser.add_argument("--obs", choices=("vector", "atari", "atari_impala"), default="vector",
                        help="the learner networks of --algo on flat vectors, or on 4x84x84 frames with the "
                             "Nature CNN (atari) or IMPALA's stack into 256 units (atari_impala: the "
                             "Breakout presets'); as python -m drlmpi.bench.learner --obs")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cpu, or cuda (a rank's GPU: its local rank mod the node's GPUs)")
    parser.add_argument("--iters", type=positive_int, default=500, help="exchanges per timed block")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed blocks (their median is shown)")
    args = parser.parse_args(argv)  # before MPI starts: a bad argument is refused by every rank alike
    if args.obs != "vector" and args.algo == "td3":
        parser.error("--obs atari and atari_impala take --algo dqn or ppo (TD3 has no image networks)")

    from hydra.utils import get_class
    from mpi4py import MPI

    from drlmpi.bench.learner import ATARI_CFG, ATARI_SPEC, IMPALA, SPECS, algo_settings
    from drlmpi.device.staging import synchronize
    from drlmpi.mpi.timed import TimedComm
    from drlmpi.topologies.core.data_parallel.backend import DistExchange, DistGroup, learner_device, place
    from drlmpi.topologies.core.data_parallel.exchanges import AllreduceExchange

    comm = TimedComm(MPI.COMM_WORLD.Dup())
    placement = place(comm)
    device = learner_device(args.device, placement)
    atari = args.obs != "vector"
    images = {**ATARI_CFG[args.algo], **(IMPALA if args.obs == "atari_impala" else {})} if atari else {}
    settings = algo_settings(args.algo, 64, **images)
    spec = ATARI_SPEC if atari else SPECS[args.algo]
    algo = get_class(settings._target_)(spec, settings, device=device, seed=0, learner=True)
    groups = list(algo.groups.items())
    for _, group in groups:
        group.flat.grads.normal_()
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist_group = DistGroup(comm, backend, algo.device, placement)
    exchanges = {"mpi": AllreduceExchange(comm), backend: DistExchange(dist_group)}
    results: dict[str, float] = {}
    for name, exchange in exchanges.items():
        for _ in range(20):  # warm-up (NCCL builds its rings on the first calls)
            for gname, group in groups:
                exchange.exchange(gname, group)
        synchronize(algo.device)
        blocks = []
        for _ in range(args.repeats):
            comm.comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                for gname, group in groups:
                    exchange.exchange(gname, group)
                synchronize(algo.device)
            blocks.append((time.perf_counter() - t0) / args.iters)
        results[name] = statistics.median(blocks) * 1e6
    dist_group.close()
    if comm.rank == 0:
        numel = sum(g.flat.numel for _, g in groups)
        print(f"{args.algo} ({args.obs}) learner networks {[n for n, _ in groups]}: {numel:,} parameters "
              f"({numel * 4:,} bytes) per update, {comm.size} ranks, device {args.device}")
        print("| exchange | us per update |")
        print("|---|---|")
        for name, us in results.items():
            print(f"| {name} | {us:,.1f} |")
        print(f"ratio mpi / {backend}: {results['mpi'] / results[backend]:.2f}x")
    comm.free()


if __name__ == "__main__":
    main()
