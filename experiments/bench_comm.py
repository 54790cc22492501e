"""mpi4py buffer methods (``Bcast``, ``Gatherv``, ``Send``/``Recv``) vs pickled objects, side by side.

    mpiexec -n 2 python experiments/bench_comm.py                 # 30 repeats
    mpiexec -n 4 python experiments/bench_comm.py --sizes dqn 1m 4000000 --rows 256 --json out.json

The buffers are drlmpi's own: a network's parameters in one :class:`drlmpi.algos.params.FlatParams`
buffer, experience as :class:`drlmpi.data.layout.ExperienceLayout` rows (CartPole: 15 float32 columns).
Cases (experiments/README.md describes each): ``weights`` (broadcast from rank 0: ``Bcast`` of
the flat buffer vs ``bcast`` of a state_dict vs ``bcast`` of a list of arrays), ``experience``
(every other rank to rank 0: ``Gather``+``Gatherv`` of rows vs ``gather`` of per-step tuples /
dicts / a pickled array) and ``p2p`` (round trip 0 -> 1 -> 0: ``Send``/``Recv`` vs
``send``/``recv`` of a state_dict). Each method is checked once (receivers must hold rank 0's
data), then timed interleaved (A B C A B C ...), every sample started by a ``Barrier`` and taken
as the slowest rank's time. Rank 0 prints the median and minimum in microseconds and
``pickle/buffer`` = median / the buffer method's median.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import platform
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI
from torch import nn

from drlmpi.algos.params import FlatParams
from drlmpi.data.layout import ExperienceLayout

TAG = 77
LAYOUT = ExperienceLayout(obs_dim=4, action_dim=1)  # CartPole rows: 15 float32 columns
# name -> (description, MLP layer widths per network)
PRESETS: dict[str, tuple[str, list[tuple[int, ...]]]] = {
    "dqn": ("DQN CartPole Q-net 4-256-256-2", [(4, 256, 256, 2)]),
    "td3": ("TD3 Pendulum twin critic 2x 4-400-300-1", [(4, 400, 300, 1), (4, 400, 300, 1)]),
    "1m": ("MLP 4-1000-1000-4", [(4, 1000, 1000, 4)]),
}


def build_model(size: str) -> tuple[str, nn.Module]:
    """A ``--sizes`` entry as one module: a preset, or an MLP 4-h-h-4 with about P parameters."""
    if size in PRESETS:
        description, networks = PRESETS[size]
    else:
        hidden = max(1, round((-10 + math.sqrt(100 - 16 + 4 * int(size))) / 2))  # h^2 + 10h + 4 = P
        description, networks = f"MLP 4-{hidden}-{hidden}-4", [(4, hidden, hidden, 4)]
    mlps = []
    for widths in networks:
        layers: list[nn.Module] = []
        for i in range(len(widths) - 1):
            layers += [nn.Linear(widths[i], widths[i + 1])] + ([nn.ReLU()] if i < len(widths) - 2 else [])
        mlps.append(nn.Sequential(*layers))
    return description, nn.ModuleList(mlps)


def checksum(model: nn.Module) -> float:
    """Order-sensitive fingerprint of a model's parameters (float64)."""
    with torch.no_grad():
        flat = torch.cat([p.reshape(-1) for p in model.parameters()]).double()
        return float((flat * torch.arange(1, flat.numel() + 1, dtype=torch.float64)).sum())


def fill(model: nn.Module, values: np.ndarray | None) -> None:
    """Set the parameters from one flat array (``None``: zeros)."""
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(0.0 if values is None else torch.from_numpy(values[offset:offset + n]).view_as(p))
            offset += n


@dataclass
class Method:
    """One way of moving a payload: ``run`` once on this rank; ``check`` (after ``reset`` and a
    run) says whether this rank holds the right data."""

    name: str
    nbytes: int
    run: Callable[[], None]
    reset: Callable[[], None]
    check: Callable[[], bool]
    is_buffer: bool = False


@dataclass
class Case:
    kind: str
    payload: str
    methods: list[Method]
    detail: dict[str, Any] = field(default_factory=dict)


def measure(comm: Any, case: Case, repeats: int, warmup: int) -> dict[str, np.ndarray]:
    """Check every method, then time warm-up + repeats interleaved rounds; rank 0 gets the
    slowest rank's seconds per repeat for each method."""
    for m in case.methods:
        m.reset()
        comm.Barrier()
        m.run()
        if not comm.allreduce(int(m.check()), op=MPI.MIN):
            raise RuntimeError(f"{case.kind} {case.payload}: {m.name} delivered wrong data")
    local = {m.name: np.zeros(repeats) for m in case.methods}
    for round_ in range(warmup + repeats):
        for m in case.methods:
            comm.Barrier()
            t0 = time.perf_counter()
            m.run()
            if round_ >= warmup:
                local[m.name][round_ - warmup] = time.perf_counter() - t0
    out = {}
    for m in case.methods:
        slowest = np.zeros(repeats) if comm.Get_rank() == 0 else None
        comm.Reduce(local[m.name], slowest, op=MPI.MAX, root=0)
        if slowest is not None:
            out[m.name] = slowest
    return out


def pickled_len(obj: Any) -> int:
    return len(pickle.dumps(obj, protocol=MPI.pickle.PROTOCOL))


def network_case(comm: Any, size: str, rng: np.random.Generator, p2p: bool) -> Case:
    """A network's weights: broadcast from rank 0, or (``p2p``) a round trip 0 -> 1 -> 0."""
    rank, receivers = comm.Get_rank(), comm.Get_size() - 1
    description, flat_model = build_model(size)
    flat = FlatParams(flat_model)
    buffer = flat.params_numpy()
    plain = build_model(size)[1]
    reference = [0.0]

    def reset() -> None:  # rank 0: fresh random weights in both models; receivers: zeros
        values = rng.standard_normal(flat.numel).astype(np.float32) if rank == 0 else None
        fill(flat_model, values)
        fill(plain, values)
        reference[0] = comm.bcast(checksum(plain) if rank == 0 else None, root=0)

    def check(model: nn.Module) -> Callable[[], bool]:
        return lambda: (p2p and rank > 1) or checksum(model) == reference[0]

    if p2p:
        def send_recv_buffer() -> None:
            if rank < 2:
                other = 1 - rank
                for step in ((comm.Send, comm.Recv) if rank == 0 else (comm.Recv, comm.Send)):
                    step(buffer, other, tag=TAG)

        def send_recv_state_dict() -> None:
            if rank == 0:
                comm.send(plain.state_dict(), dest=1, tag=TAG)
                plain.load_state_dict(comm.recv(source=1, tag=TAG))
            elif rank == 1:
                plain.load_state_dict(comm.recv(source=0, tag=TAG))
                comm.send(plain.state_dict(), dest=0, tag=TAG)

        methods = [Method("Send/Recv flat buffer", 2 * buffer.nbytes, send_recv_buffer, reset,
                          check(flat_model), is_buffer=True),
                   Method("send/recv state_dict", 2 * pickled_len(plain.state_dict()),
                          send_recv_state_dict, reset, check(plain))]
        return Case("p2p", f"{size}: {flat.numel:,} params", methods,
                    {"description": f"{description}, round trip ranks 0 -> 1 -> 0", "params": flat.numel})

    def bcast_state_dict() -> None:
        state = comm.bcast(plain.state_dict() if rank == 0 else None, root=0)
        if rank != 0:
            plain.load_state_dict(state)

    def bcast_arrays() -> None:
        arrays = comm.bcast([p.detach().numpy() for p in plain.parameters()] if rank == 0 else None, root=0)
        if rank != 0:
            with torch.no_grad():
                for p, a in zip(plain.parameters(), arrays):
                    p.copy_(torch.from_numpy(a))

    arrays = [p.detach().numpy() for p in plain.parameters()]
    methods = [Method("Bcast flat buffer", buffer.nbytes * receivers, lambda: comm.Bcast(buffer, root=0),
                      reset, check(flat_model), is_buffer=True),
               Method("bcast state_dict", pickled_len(plain.state_dict()) * receivers, bcast_state_dict,
                      reset, check(plain)),
               Method("bcast list[ndarray]", pickled_len(arrays) * receivers, bcast_arrays, reset,
                      check(plain))]
    return Case("weights", f"{size}: {flat.numel:,} params", methods,
                {"description": description, "params": flat.numel})


def experience_case(comm: Any, rows: int, rng: np.random.Generator) -> Case:
    """Every rank but 0 sends ``rows`` steps to rank 0 (four methods)."""
    rank, world = comm.Get_rank(), comm.Get_size()
    local = LAYOUT.empty(rows if rank else 0)
    if rank:
        local[:] = rng.standard_normal(local.shape)
        LAYOUT.column(local, "action")[:, 0] = rng.integers(0, 2, rows)
        LAYOUT.column(local, "terminated")[:, 0] = rng.random(rows) < 0.02
    col = {name: LAYOUT.slices[name] for name in ("obs", "action", "reward", "next_obs", "terminated")}
    tuples = [(r[col["obs"]].copy(), int(r[col["action"]][0]), float(r[col["reward"]][0]),
               r[col["next_obs"]].copy(), bool(r[col["terminated"]][0])) for r in local]
    dicts = [dict(zip(("obs", "action", "reward", "next_obs", "done"), t)) for t in tuples]
    expected = comm.allreduce(float(LAYOUT.column(local, "obs").astype(np.float64).sum()), op=MPI.SUM)
    result: dict[str, Any] = {}

    def gatherv_rows() -> None:
        counts = np.zeros(world, dtype=np.int64) if rank == 0 else None
        comm.Gather(np.array([len(local)], dtype=np.int64), counts, root=0)
        if rank == 0:
            received = LAYOUT.empty(int(counts.sum()))
            sizes = counts * LAYOUT.width
            comm.Gatherv(local, [received, sizes, np.concatenate(([0], np.cumsum(sizes)[:-1])), MPI.FLOAT],
                         root=0)
            result["obs"] = LAYOUT.column(received, "obs")
        else:
            comm.Gatherv(local, None, root=0)

    def gather_steps(payload: list[Any], keys: tuple[Any, ...]) -> None:
        parts = comm.gather(payload, root=0)
        if rank == 0:
            steps = [step for part in parts for step in part]
            for name, key, dtype in zip(("obs", "action", "reward", "next_obs", "done"), keys,
                                        (np.float32, np.int64, np.float32, np.float32, np.float32)):
                result[name] = np.array([s[key] for s in steps], dtype=dtype)

    def gather_array() -> None:
        parts = comm.gather(local, root=0)
        if rank == 0:
            result["obs"] = LAYOUT.column(np.concatenate(parts), "obs")

    def check() -> bool:
        obs = result.get("obs")
        return rank != 0 or (obs is not None and len(obs) == rows * (world - 1) and math.isclose(
            float(obs.astype(np.float64).sum()), expected, rel_tol=1e-9, abs_tol=1e-6))

    def sent(payload: Any, pickled: bool) -> int:
        return comm.allreduce(0 if rank == 0 else (pickled_len(payload) if pickled else payload.nbytes),
                              op=MPI.SUM)

    methods = [Method("Gather+Gatherv rows", sent(local, False), gatherv_rows, result.clear, check, True),
               Method("gather list[tuple]", sent(tuples, True), lambda: gather_steps(tuples, range(5)),
                      result.clear, check),
               Method("gather list[dict]", sent(dicts, True),
                      lambda: gather_steps(dicts, ("obs", "action", "reward", "next_obs", "done")),
                      result.clear, check),
               Method("gather ndarray", sent(local, True), gather_array, result.clear, check)]
    return Case("experience", f"{rows} rows x {world - 1} sender(s)", methods,
                {"description": f"{rows} rows x {LAYOUT.width} float32 per sender to rank 0", "rows": rows})


def records_of(case: Case, times: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    base = next(float(np.median(times[m.name])) for m in case.methods if m.is_buffer)
    return [{"kind": case.kind, "payload": case.payload, **case.detail, "method": m.name, "bytes": m.nbytes,
             "median_us": float(np.median(times[m.name])) * 1e6, "min_us": float(times[m.name].min()) * 1e6,
             "factor_vs_buffer": float(np.median(times[m.name])) / base if base > 0 else None,
             "is_buffer": m.is_buffer, "samples_us": [round(t * 1e6, 2) for t in times[m.name].tolist()]}
            for m in case.methods]


def print_table(records: list[dict[str, Any]]) -> None:
    headers = ("case", "payload", "bytes", "method", "median us", "min us", "pickle/buffer")
    rows, last = [], None
    for r in records:
        label = (r["kind"], r["payload"])
        factor = "1.00 (ref)" if r["is_buffer"] else f"{r['factor_vs_buffer']:.2f}x"
        rows.append((*(("", "") if label == last else label), f"{r['bytes']:,}", r["method"],
                     f"{r['median_us']:,.1f}", f"{r['min_us']:,.1f}", factor))
        last = label
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    for row in [headers, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) if i in (0, 1, 3) else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["dqn", "td3", "1m"],
                        help="weight payloads: dqn, td3, 1m or a parameter count >= 100")
    parser.add_argument("--rows", type=int, nargs="+", default=[256, 2048], help="experience rows per sender")
    parser.add_argument("--repeats", type=int, default=30, help="timed rounds per case")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=Path("outputs/bench_comm.json"), help="rank 0's results")
    args = parser.parse_args(argv)
    if any(s not in PRESETS and not (s.isdigit() and int(s) >= 100) for s in args.sizes):
        parser.error(f"--sizes: each is one of {sorted(PRESETS)} or an integer >= 100")
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    if world < 2:
        print("bench_comm: needs 2 ranks or more: mpiexec -n 2 python experiments/bench_comm.py",
              file=sys.stderr)
        return 2
    try:
        torch.set_num_threads(1)
        rng = np.random.default_rng(args.seed + 1000 * rank)
        import mpi4py

        meta = {"command_line": " ".join([sys.executable, *sys.argv]), "host": platform.node(),
                "cpu_count": os.cpu_count(), "load_average": os.getloadavg(), "world_size": world,
                "mpi_library": MPI.Get_library_version().strip().splitlines()[0].strip(),
                "mpi4py": mpi4py.__version__, "pickle_protocol": MPI.pickle.PROTOCOL,
                "pickle_oob_threshold": getattr(MPI.pickle, "THRESHOLD", None), "torch": torch.__version__,
                "numpy": np.__version__, "python": platform.python_version(), "repeats": args.repeats}
        if rank == 0:
            print(f"bench_comm: {meta['mpi_library']}, {world} ranks, mpi4py {meta['mpi4py']} (pickle "
                  f"protocol {meta['pickle_protocol']}, out of band from {meta['pickle_oob_threshold']} "
                  f"bytes); {meta['cpu_count']} cores; median of {args.repeats} after {args.warmup} warm-up",
                  flush=True)
        builders = [*(lambda s=s: network_case(comm, s, rng, False) for s in args.sizes),
                    *(lambda r=r: experience_case(comm, r, rng) for r in args.rows),
                    *(lambda s=s: network_case(comm, s, rng, True) for s in args.sizes)]
        records: list[dict[str, Any]] = []
        for build in builders:
            case = build()
            times = measure(comm, case, args.repeats, args.warmup)
            if rank == 0:
                records += records_of(case, times)
                print(f"  done: {case.kind:<10} {case.payload:<24} ({case.detail['description']})",
                      flush=True)
        if rank == 0:
            print()
            print_table(records)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"meta": meta, "results": records}, indent=2) + "\n")
            print(f"\nwrote {args.json}")
    except Exception:  # noqa: BLE001 (any failure must end every rank, not leave them waiting)
        print(f"bench_comm: rank {rank} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
