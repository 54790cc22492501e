"""``mpiexec -n 2 python -m mpi4py -m drlmpi.planner.pingpong SIZE ...``: one-way seconds of a
message of each SIZE bytes between two ranks (half the round trip of a ping-pong, median of
repeats), printed by rank 0 as one JSON line ``{"SIZE": seconds, ...}``."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI

REPEATS = 200
MAX_SECONDS_PER_SIZE = 0.5


def one_way(comm: MPI.Comm, nbytes: int) -> float:
    """Median one-way seconds of ``nbytes`` sent back and forth between ranks 0 and 1."""
    buf = np.zeros(max(1, nbytes), np.uint8)
    rank = comm.Get_rank()
    times = []
    started = time.perf_counter()
    for i in range(REPEATS + 5):
        comm.Barrier() if i == 0 else None
        t0 = time.perf_counter()
        if rank == 0:
            comm.Send(buf, dest=1)
            comm.Recv(buf, source=1)
        else:
            comm.Recv(buf, source=0)
            comm.Send(buf, dest=0)
        if i >= 5:
            times.append((time.perf_counter() - t0) / 2)
        stop = time.perf_counter() - started > MAX_SECONDS_PER_SIZE
        if comm.bcast(stop if rank == 0 else None, root=0):
            break
    return float(np.median(times)) if times else float("nan")


def main(argv: list[str]) -> None:
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("drlmpi.planner.pingpong: run it on exactly 2 ranks")
    result = {str(int(n)): one_way(comm, int(n)) for n in argv}
    if comm.Get_rank() == 0:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
