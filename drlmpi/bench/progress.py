"""Whether this MPI moves a large message while its sender computes.

``mpirun -n 2 python -m mpi4py -m drlmpi.bench.progress`` (``--kb 113 --work-ms 3 --push-ms 0.5``)

Rank 1 sends a small message, then posts an ``Isend`` of ``--kb`` KB (a step message of 4 Atari
games is about 113 KB) and computes ``--work-ms`` without an MPI call (a central simulator stepping
its other group); rank 0, waiting in its receives, times from the small message's arrival to the
large one's. Once with the sender going straight to its work, once with it first testing its send
for up to ``--push-ms`` (central's simulators do: drlmpi/topologies/central/simulator.py). A delay
near the work's length means the library moved the message only at the sender's next MPI call;
rank 0 prints the median delay of each, in ms.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from drlmpi.config.inputs import ArgumentParser, positive_float, positive_int

SMALL, LARGE = 1, 2  # tags


def delays(comm: Any, nbytes: int, work_s: float, push_s: float, repeats: int) -> list[float] | None:
    """Rank 0 of a 2-rank ``comm`` (an mpi4py communicator): seconds from the small message's
    arrival to the large one's, once a repeat; ``None`` on rank 1, which sends them."""
    from drlmpi.topologies.central.simulator import push

    buf = np.ones(max(1, nbytes // 4), dtype=np.float32)
    small = np.zeros(1, dtype=np.float32)
    out = []
    for _ in range(repeats):
        comm.Barrier()
        if comm.rank == 0:
            large = comm.Irecv(buf, source=1, tag=LARGE)
            comm.Recv(small, source=1, tag=SMALL)
            began = time.perf_counter()
            large.Wait()
            out.append(time.perf_counter() - began)
        else:
            comm.Send(small, dest=0, tag=SMALL)
            request = comm.Isend(buf, dest=0, tag=LARGE)
            if push_s:
                push(request.Test, push_s)  # as central's simulators do
            until = time.perf_counter() + work_s
            while time.perf_counter() < until:  # work without an MPI call
                pass
            request.Wait()
    return out if comm.rank == 0 else None


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m drlmpi.bench.progress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=positive_int, default=113, help="the large message's kilobytes")
    parser.add_argument("--work-ms", type=positive_float, default=3.0,
                        help="the sender's work without an MPI call after posting it")
    parser.add_argument("--push-ms", type=positive_float, default=0.5,
                        help="how long the sender tests its send first, in the second measurement")
    parser.add_argument("--repeats", type=positive_int, default=30, help="messages a measurement")
    args = parser.parse_args(argv)  # before MPI starts: a bad argument is refused by every rank alike

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size != 2:
        if comm.rank == 0:
            print("python -m drlmpi.bench.progress: error: run it on 2 ranks (mpirun -n 2 ...)", flush=True)
        raise SystemExit(2)
    lines = []
    for push_s in (0.0, args.push_ms / 1e3):
        got = delays(comm, args.kb * 1000, args.work_ms / 1e3, push_s, args.repeats)
        if got is not None:
            lines.append(f"push {push_s * 1e3:.1f} ms: the {args.kb} KB message arrived "
                         f"{statistics.median(got) * 1e3:.3f} ms after the sender posted it (median of "
                         f"{len(got)}; the sender then worked {args.work_ms:g} ms without MPI calls)")
    if comm.rank == 0:
        print(f"{MPI.Get_library_version().splitlines()[0].strip()}", *lines, sep="\n", flush=True)


if __name__ == "__main__":
    main()
