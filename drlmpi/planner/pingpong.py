"""``mpiexec -n N python -m mpi4py -m drlmpi.planner.pingpong --sizes B ... --allreduce G``: the
message costs the planner's model needs, measured with the machine's own MPI:

* ``p2p``: one-way seconds of a message of each size B between ranks 0 and 1 (half the round
  trip of a ping-pong, median of repeats);
* ``allreduce``: seconds of an ``Allreduce`` of G bytes of float32 over the first n ranks, for
  n = 2, 4, ... up to N (median of repeats; every other rank waits in a barrier meanwhile).

Rank 0 prints one JSON line: ``{"p2p": {"B": s, ...}, "allreduce": {"n": s, ...}}``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

REPEATS = 200
MAX_SECONDS = 0.2  # per measured size or group


def _timed(comm: MPI.Comm, once) -> float:
    """Median seconds of ``once()`` on every rank of ``comm`` (rank 0 decides when to stop)."""
    times = []
    started = time.perf_counter()
    comm.Barrier()
    for i in range(REPEATS + 5):
        t0 = time.perf_counter()
        once()
        if i >= 5:
            times.append(time.perf_counter() - t0)
        stop = comm.bcast(time.perf_counter() - started > MAX_SECONDS if comm.Get_rank() == 0 else None)
        if stop:
            break
    return float(np.median(times)) if times else float("nan")


def one_way(comm: MPI.Comm, nbytes: int) -> float | None:
    """One-way seconds of ``nbytes`` between ranks 0 and 1 (``None`` on the other ranks)."""
    pair = comm.Split(0 if comm.Get_rank() < 2 else MPI.UNDEFINED, comm.Get_rank())
    result = None
    if pair != MPI.COMM_NULL:
        buf = np.zeros(max(1, nbytes), np.uint8)

        def once() -> None:
            if pair.Get_rank() == 0:
                pair.Send(buf, dest=1)
                pair.Recv(buf, source=1)
            else:
                pair.Recv(buf, source=0)
                pair.Send(buf, dest=0)

        result = _timed(pair, once) / 2
        pair.Free()
    comm.Barrier()
    return result


def allreduce(comm: MPI.Comm, nbytes: int, n: int) -> float | None:
    """Seconds of an ``Allreduce`` of ``nbytes`` over ranks ``0..n-1`` of ``comm``."""
    group = comm.Split(0 if comm.Get_rank() < n else MPI.UNDEFINED, comm.Get_rank())
    result = None
    if group != MPI.COMM_NULL:
        send = np.ones(max(1, nbytes // 4), np.float32)
        out = np.empty_like(send)
        result = _timed(group, lambda: group.Allreduce(send, out, op=MPI.SUM))
        group.Free()
    comm.Barrier()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 65536])
    parser.add_argument("--allreduce", type=int, default=0, help="bytes of the all-reduce (0: none)")
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise SystemExit("drlmpi.planner.pingpong: run it on at least 2 ranks")
    result: dict[str, dict[str, float | None]] = {"p2p": {}, "allreduce": {}}
    for size in args.sizes:
        result["p2p"][str(size)] = one_way(comm, size)
    n = 2
    while args.allreduce and n <= comm.Get_size():
        result["allreduce"][str(n)] = allreduce(comm, args.allreduce, n)
        n *= 2
    if args.allreduce and comm.Get_size() not in (int(k) for k in result["allreduce"]):
        result["allreduce"][str(comm.Get_size())] = allreduce(comm, args.allreduce, comm.Get_size())
    if comm.Get_rank() == 0:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
