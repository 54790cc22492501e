"""mpi4py buffer methods (``Bcast``, ``Gatherv``, ``Send``/``Recv``) vs pickled objects, side by side.

Run under MPI from the repository root (2 ranks or more; only numpy, torch and mpi4py are used)::

    mpiexec -n 2 python experiments/bench_comm.py                       # 30 repeats
    mpiexec -n 4 python experiments/bench_comm.py --repeats 50 --json outputs/bench_comm_n4.json
    mpiexec -n 2 python experiments/bench_comm.py --sizes dqn 1m 4000000 --rows 256
    # Open MPI as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
    #     mpirun --oversubscribe -n 4 python experiments/bench_comm.py

Payloads are shaped like drlmpi's messages; every case ends with the receiver holding usable
data, and that last step is inside the timed region:

* ``weights``: broadcast of a network from rank 0 to every rank, for each ``--sizes`` entry
  (``dqn``: DQN CartPole Q-network, MLP 4-256-256-2, 67,586 parameters; ``td3``: TD3 Pendulum twin
  critic at rl-baselines3-zoo sizes, two MLPs 4-400-300-1, 245,202; ``1m``: MLP 4-1000-1000-4,
  1,010,004; an integer P: an MLP 4-h-h-4 with about P parameters).
  ``Bcast flat buffer`` = ``comm.Bcast`` into one float32 numpy buffer whose
  ``torch.from_numpy`` view backs every parameter of the receiver's model (no copy after the
  receive, as drlmpi's ``FlatParams``); ``bcast state_dict`` = ``comm.bcast(model.state_dict())``
  then ``load_state_dict`` on receivers (the TD3 slides' way); ``bcast list[ndarray]`` =
  ``comm.bcast`` of one numpy array per parameter, copied into the model on receivers.
* ``experience``: every rank but 0 sends ``--rows`` steps (default 256 and 2048) to rank 0, which
  sends nothing (the star learner). ``Gather+Gatherv rows`` = ``Gather`` of the row counts then
  ``Gatherv`` of 2-D float32 rows, 15 columns (drlmpi's CartPole rows); ``gather list[tuple]`` /
  ``gather list[dict]`` = ``comm.gather`` of one Python ``(obs, action, reward, next_obs, done)``
  tuple / dict per step (numpy obs, Python scalars: what pickled RL code sends), stacked into
  numpy arrays on rank 0; ``gather ndarray`` = ``comm.gather`` of the same float32 rows (pickled),
  concatenated on rank 0.
* ``p2p round trip``: rank 0 -> rank 1 -> rank 0 with the weights of each ``--sizes`` entry:
  ``Send/Recv flat buffer`` vs ``send/recv state_dict`` (each side ``load_state_dict``s what it
  receives). Other ranks idle.

Method: every rank builds the payloads first; for each case one check round verifies every
receiver got rank 0's data (fresh random weights, receivers zeroed), then ``--warmup`` rounds,
then ``--repeats`` rounds, all interleaved method by method (A B C A B C ...), each sample
started by a ``Barrier`` and timed as the slowest rank's ``perf_counter`` interval (so a
broadcast counts until the last receiver holds its data). Reported: median and minimum over the
repeats in microseconds, and ``pickle/buffer`` = a method's median / the buffer method's median
of the same payload (above 1: the buffer method is faster). ``bytes``: what reaches the
receivers in total (buffers: exact; pickled methods: the pickle's length, protocol as mpi4py
uses it, times the number of receivers/senders).

mpi4py 4 pickles with protocol 5 and sends buffers of at least ``MPI.pickle.THRESHOLD`` bytes
(printed) out of band, so large numpy arrays skip the pickle copy; torch tensors do not.
Only rank 0 prints; ``--json`` (default ``outputs/bench_comm.json``) gets every sample.
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
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI
from torch import nn

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = REPO_ROOT / "outputs" / "bench_comm.json"
ROW_WIDTH = 15  # drlmpi's CartPole experience row: obs 4, action, reward, next_obs 4, 5 flags
OBS_DIM = 4
TAG = 77

# name -> (description, MLP layer widths per network)
PRESETS: dict[str, tuple[str, list[tuple[int, ...]]]] = {
    "dqn": ("DQN CartPole Q-net 4-256-256-2", [(4, 256, 256, 2)]),
    "td3": ("TD3 Pendulum twin critic 2x 4-400-300-1", [(4, 400, 300, 1), (4, 400, 300, 1)]),
    "1m": ("MLP 4-1000-1000-4", [(4, 1000, 1000, 4)]),
}


# ---------------------------------------------------------------------------------------------
# Models


def mlp(widths: tuple[int, ...]) -> nn.Sequential:
    """A ReLU MLP with the given layer widths (input first)."""
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def preset_shapes(size: str) -> tuple[str, list[tuple[int, ...]]]:
    """``(description, networks)`` of a ``--sizes`` entry (a preset name or a parameter count)."""
    if size in PRESETS:
        return PRESETS[size]
    target = int(size)
    hidden = max(1, round((-10 + math.sqrt(100 - 16 + 4 * target)) / 2))  # h^2 + 10h + 4 = P
    return f"MLP 4-{hidden}-{hidden}-4", [(4, hidden, hidden, 4)]


def build_model(networks: list[tuple[int, ...]]) -> nn.Module:
    """One module holding every network of a preset."""
    return nn.ModuleList([mlp(widths) for widths in networks])


def seat_in_flat_buffer(model: nn.Module) -> np.ndarray:
    """Re-seat every parameter of ``model`` as a view into one float32 numpy buffer (through
    ``torch.from_numpy``); return the buffer. Writing into it (an MPI receive) updates the model."""
    params = list(model.parameters())
    buffer = np.zeros(sum(p.numel() for p in params), dtype=np.float32)
    flat = torch.from_numpy(buffer)
    offset = 0
    for p in params:
        n = p.numel()
        flat[offset : offset + n].copy_(p.data.reshape(-1))
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    return buffer


def checksum(model: nn.Module) -> float:
    """Order-sensitive fingerprint of a model's parameters (float64)."""
    with torch.no_grad():
        flat = torch.cat([p.reshape(-1) for p in model.parameters()]).double()
        weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64)
        return float((flat * weights).sum())


def fill(model: nn.Module, values: np.ndarray | None) -> None:
    """Set the parameters from one flat array (``None``: zeros)."""
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            if values is None:
                p.zero_()
            else:
                p.copy_(torch.from_numpy(values[offset : offset + n]).view_as(p))
            offset += n


# ---------------------------------------------------------------------------------------------
# Measurement


@dataclass
class Method:
    """One way of moving one payload: ``run`` does it once on this rank; ``check`` (after a run
    preceded by ``reset``) says whether this rank holds the right data."""

    name: str
    nbytes: int
    run: Callable[[], None]
    reset: Callable[[], None]
    check: Callable[[], bool]
    is_buffer: bool = False


@dataclass
class Case:
    """A payload and the methods compared on it."""

    kind: str  # weights | experience | p2p round trip
    payload: str
    methods: list[Method]
    detail: dict[str, Any] = field(default_factory=dict)


def measure(comm: Any, case: Case, repeats: int, warmup: int) -> dict[str, np.ndarray]:
    """Check every method once, then time warm-up + repeats rounds, interleaved; returns the
    seconds per repeat (the slowest rank's) for each method, on rank 0 (empty elsewhere)."""
    for method in case.methods:
        method.reset()
        comm.Barrier()
        method.run()
        ok = comm.allreduce(int(method.check()), op=MPI.MIN)
        if not ok:
            raise RuntimeError(f"{case.kind} {case.payload}: {method.name} delivered wrong data")
    local = {m.name: np.zeros(repeats) for m in case.methods}
    for round_ in range(warmup + repeats):
        for method in case.methods:
            comm.Barrier()
            t0 = time.perf_counter()
            method.run()
            elapsed = time.perf_counter() - t0
            if round_ >= warmup:
                local[method.name][round_ - warmup] = elapsed
    out: dict[str, np.ndarray] = {}
    for method in case.methods:
        slowest = np.zeros(repeats) if comm.Get_rank() == 0 else None
        comm.Reduce(local[method.name], slowest, op=MPI.MAX, root=0)
        if slowest is not None:
            out[method.name] = slowest
    return out


def pickled_len(obj: Any) -> int:
    """Bytes of ``obj`` pickled the way mpi4py pickles it (protocol ``MPI.pickle.PROTOCOL``)."""
    return len(pickle.dumps(obj, protocol=MPI.pickle.PROTOCOL))


# ---------------------------------------------------------------------------------------------
# Cases


def weights_case(comm: Any, size: str, rng: np.random.Generator) -> Case:
    """Broadcast of one network's weights from rank 0 (three methods)."""
    rank, world = comm.Get_rank(), comm.Get_size()
    description, networks = preset_shapes(size)
    flat_model = build_model(networks)
    buffer = seat_in_flat_buffer(flat_model)
    plain = build_model(networks)
    n_params = buffer.size
    reference = [0.0]

    def reset() -> None:  # rank 0: fresh random weights in both models; receivers: zeros
        values = rng.standard_normal(n_params).astype(np.float32) if rank == 0 else None
        fill(flat_model, values)
        fill(plain, values)
        reference[0] = comm.bcast(checksum(plain) if rank == 0 else None, root=0)

    def bcast_buffer() -> None:
        comm.Bcast(buffer, root=0)

    def bcast_state_dict() -> None:
        state = comm.bcast(plain.state_dict() if rank == 0 else None, root=0)
        if rank != 0:
            plain.load_state_dict(state)

    def bcast_arrays() -> None:
        arrays = comm.bcast([p.detach().numpy() for p in plain.parameters()] if rank == 0 else None,
                            root=0)
        if rank != 0:
            with torch.no_grad():
                for p, a in zip(plain.parameters(), arrays):
                    p.copy_(torch.from_numpy(a))

    receivers = world - 1
    arrays = [p.detach().numpy() for p in plain.parameters()]
    methods = [
        Method("Bcast flat buffer", buffer.nbytes * receivers, bcast_buffer, reset,
               lambda: checksum(flat_model) == reference[0], is_buffer=True),
        Method("bcast state_dict", pickled_len(plain.state_dict()) * receivers, bcast_state_dict,
               reset, lambda: checksum(plain) == reference[0]),
        Method("bcast list[ndarray]", pickled_len(arrays) * receivers, bcast_arrays, reset,
               lambda: checksum(plain) == reference[0]),
    ]
    return Case("weights", f"{size}: {n_params:,} params", methods,
                {"description": description, "size": size, "params": n_params,
                 "networks": [list(w) for w in networks]})


def experience_case(comm: Any, rows: int, rng: np.random.Generator) -> Case:
    """Every rank but 0 sends ``rows`` steps to rank 0 (four methods)."""
    rank, world = comm.Get_rank(), comm.Get_size()
    senders = world - 1
    local_rows = (rng.standard_normal((rows, ROW_WIDTH)).astype(np.float32) if rank != 0
                  else np.zeros((0, ROW_WIDTH), np.float32))
    if rank != 0:
        local_rows[:, OBS_DIM] = rng.integers(0, 2, rows)  # action index
        local_rows[:, 2 * OBS_DIM + 2] = rng.random(rows) < 0.02  # terminated
    tuples = [(r[:OBS_DIM].copy(), int(r[OBS_DIM]), float(r[OBS_DIM + 1]),
               r[OBS_DIM + 2 : 2 * OBS_DIM + 2].copy(), bool(r[2 * OBS_DIM + 2])) for r in local_rows]
    dicts = [{"obs": t[0], "action": t[1], "reward": t[2], "next_obs": t[3], "done": t[4]} for t in tuples]
    expected_rows = rows * senders
    expected_obs_sum = comm.allreduce(float(local_rows[:, :OBS_DIM].astype(np.float64).sum()), op=MPI.SUM)
    result: dict[str, Any] = {}

    def reset() -> None:
        result.clear()

    def gatherv_rows() -> None:
        counts = np.zeros(world, dtype=np.int64) if rank == 0 else None
        comm.Gather(np.array([len(local_rows)], dtype=np.int64), counts, root=0)
        if rank == 0:
            received = np.empty((int(counts.sum()), ROW_WIDTH), dtype=np.float32)
            sizes = counts * ROW_WIDTH
            displacements = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            comm.Gatherv(local_rows, [received, sizes, displacements, MPI.FLOAT], root=0)
            result["obs"] = received[:, :OBS_DIM]
        else:
            comm.Gatherv(local_rows, None, root=0)

    def gather_steps(payload: list[Any], keys: tuple[Any, ...]) -> None:
        parts = comm.gather(payload, root=0)
        if rank == 0:
            steps = [step for part in parts for step in part]
            obs_key, action_key, reward_key, next_key, done_key = keys
            result["obs"] = np.array([s[obs_key] for s in steps], dtype=np.float32)
            result["action"] = np.array([s[action_key] for s in steps], dtype=np.int64)
            result["reward"] = np.array([s[reward_key] for s in steps], dtype=np.float32)
            result["next_obs"] = np.array([s[next_key] for s in steps], dtype=np.float32)
            result["done"] = np.array([s[done_key] for s in steps], dtype=np.float32)

    def gather_array() -> None:
        parts = comm.gather(local_rows, root=0)
        if rank == 0:
            result["obs"] = np.concatenate(parts)[:, :OBS_DIM]

    def check() -> bool:
        if rank != 0:
            return True
        obs = result.get("obs")
        return (obs is not None and len(obs) == expected_rows
                and math.isclose(float(obs.astype(np.float64).sum()), expected_obs_sum,
                                 rel_tol=1e-9, abs_tol=1e-6))

    def sent_bytes(payload: Any, pickled: bool) -> int:  # total over the senders
        mine = 0 if rank == 0 else (pickled_len(payload) if pickled else payload.nbytes)
        return comm.allreduce(mine, op=MPI.SUM)

    methods = [
        Method("Gather+Gatherv rows", sent_bytes(local_rows, False), gatherv_rows, reset, check,
               is_buffer=True),
        Method("gather list[tuple]", sent_bytes(tuples, True),
               lambda: gather_steps(tuples, (0, 1, 2, 3, 4)), reset, check),
        Method("gather list[dict]", sent_bytes(dicts, True),
               lambda: gather_steps(dicts, ("obs", "action", "reward", "next_obs", "done")), reset, check),
        Method("gather ndarray", sent_bytes(local_rows, True), gather_array, reset, check),
    ]
    return Case("experience", f"{rows} rows x {senders} sender(s)", methods,
                {"description": f"{rows} rows x {ROW_WIDTH} float32 per sender to rank 0",
                 "rows_per_sender": rows, "senders": senders})


def p2p_case(comm: Any, size: str, rng: np.random.Generator) -> Case:
    """Round trip of one network's weights between ranks 0 and 1 (two methods)."""
    rank = comm.Get_rank()
    description, networks = preset_shapes(size)
    flat_model = build_model(networks)
    buffer = seat_in_flat_buffer(flat_model)
    plain = build_model(networks)
    n_params = buffer.size
    reference = [0.0]

    def reset() -> None:
        values = rng.standard_normal(n_params).astype(np.float32) if rank == 0 else None
        fill(flat_model, values)
        fill(plain, values)
        reference[0] = comm.bcast(checksum(plain) if rank == 0 else None, root=0)

    def send_recv_buffer() -> None:
        if rank == 0:
            comm.Send(buffer, dest=1, tag=TAG)
            comm.Recv(buffer, source=1, tag=TAG)
        elif rank == 1:
            comm.Recv(buffer, source=0, tag=TAG)
            comm.Send(buffer, dest=0, tag=TAG)

    def send_recv_state_dict() -> None:
        if rank == 0:
            comm.send(plain.state_dict(), dest=1, tag=TAG)
            plain.load_state_dict(comm.recv(source=1, tag=TAG))
        elif rank == 1:
            plain.load_state_dict(comm.recv(source=0, tag=TAG))
            comm.send(plain.state_dict(), dest=0, tag=TAG)

    def check(model: nn.Module) -> Callable[[], bool]:
        return lambda: rank > 1 or checksum(model) == reference[0]

    methods = [
        Method("Send/Recv flat buffer", 2 * buffer.nbytes, send_recv_buffer, reset, check(flat_model),
               is_buffer=True),
        Method("send/recv state_dict", 2 * pickled_len(plain.state_dict()), send_recv_state_dict, reset,
               check(plain)),
    ]
    return Case("p2p", f"{size}: {n_params:,} params", methods,
                {"description": f"{description}, round trip ranks 0 -> 1 -> 0", "size": size,
                 "params": n_params})


# ---------------------------------------------------------------------------------------------
# Reporting (rank 0)


def results_rows(case: Case, times: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """One result record per method of a measured case."""
    buffer_median = next(float(np.median(times[m.name])) for m in case.methods if m.is_buffer)
    records = []
    for m in case.methods:
        samples = times[m.name]
        median = float(np.median(samples))
        records.append({
            "kind": case.kind, "payload": case.payload, **case.detail, "method": m.name,
            "bytes": m.nbytes, "median_us": median * 1e6, "min_us": float(samples.min()) * 1e6,
            "mean_us": float(samples.mean()) * 1e6,
            "factor_vs_buffer": median / buffer_median if buffer_median > 0 else None,
            "is_buffer": m.is_buffer, "samples_us": [round(s * 1e6, 2) for s in samples.tolist()],
        })
    return records


def print_table(records: list[dict[str, Any]]) -> None:
    """The side-by-side table, grouped by payload."""
    headers = ("case", "payload", "bytes", "method", "median us", "min us", "pickle/buffer")
    rows = []
    last = None
    for r in records:
        label = (r["kind"], r["payload"])
        factor = "1.00 (ref)" if r["is_buffer"] else f"{r['factor_vs_buffer']:.2f}x"
        rows.append((*(("", "") if label == last else label), f"{r['bytes']:,}", r["method"],
                     f"{r['median_us']:,.1f}", f"{r['min_us']:,.1f}", factor))
        last = label
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    left = {0, 1, 3}

    def fmt(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    print(fmt(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        if row[0] and row is not rows[0]:
            print()
        print(fmt(row))


def metadata(args: argparse.Namespace, world: int) -> dict[str, Any]:
    """What ran where."""
    import mpi4py

    return {
        "command_line": " ".join([sys.executable, *sys.argv]),
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a",
        "world_size": world,
        "mpi_library": MPI.Get_library_version().strip().splitlines()[0].strip(),
        "mpi_version": "{}.{}".format(*MPI.Get_version()),
        "mpi4py": mpi4py.__version__,
        "pickle_protocol": MPI.pickle.PROTOCOL,
        "pickle_oob_threshold": getattr(MPI.pickle, "THRESHOLD", None),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "numpy": np.__version__,
        "repeats": args.repeats,
        "warmup": args.warmup,
    }


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["dqn", "td3", "1m"],
                        help="weight payloads: dqn, td3, 1m or a parameter count (default dqn td3 1m)")
    parser.add_argument("--rows", type=int, nargs="+", default=[256, 2048],
                        help="experience rows per sender (default 256 2048)")
    parser.add_argument("--repeats", type=int, default=30, help="timed rounds per case (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON,
                        help="results file written by rank 0 (default outputs/bench_comm.json)")
    args = parser.parse_args(argv)
    for size in args.sizes:
        if size not in PRESETS and not (size.isdigit() and int(size) >= 100):
            parser.error(f"--sizes: {size!r} is neither one of {sorted(PRESETS)} nor an integer >= 100")
    if args.repeats < 1 or args.warmup < 0 or any(r < 1 for r in args.rows):
        parser.error("--repeats and --rows must be >= 1, --warmup >= 0")
    return args


def run(args: argparse.Namespace, comm: Any) -> None:
    rank, world = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed + 1000 * rank)
    meta = metadata(args, world)
    if rank == 0:
        print(f"bench_comm: {meta['mpi_library']} (MPI {meta['mpi_version']}), world size {world}, "
              f"mpi4py {meta['mpi4py']} (pickle protocol {meta['pickle_protocol']}, out-of-band from "
              f"{meta['pickle_oob_threshold']} bytes), torch {meta['torch']}, numpy {meta['numpy']}, "
              f"Python {meta['python']}; {meta['cpu_count']} cores, load {meta['load_average']}; "
              f"median of {args.repeats} after {args.warmup} warm-up", flush=True)
    builders: list[Callable[[], Case]] = [
        *(lambda s=s: weights_case(comm, s, rng) for s in args.sizes),
        *(lambda r=r: experience_case(comm, r, rng) for r in args.rows),
        *(lambda s=s: p2p_case(comm, s, rng) for s in args.sizes),
    ]
    records: list[dict[str, Any]] = []
    for build in builders:
        case = build()
        times = measure(comm, case, args.repeats, args.warmup)
        if rank == 0:
            records.extend(results_rows(case, times))
            print(f"  done: {case.kind:<10} {case.payload:<24} ({case.detail['description']})", flush=True)
    if rank == 0:
        print()
        print_table(records)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "results": records}, indent=2) + "\n")
        print(f"\nwrote {args.json}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        if comm.Get_rank() == 0:
            print("bench_comm: needs 2 ranks or more: mpiexec -n 2 python experiments/bench_comm.py",
                  file=sys.stderr)
        return 2
    try:
        run(args, comm)
    except Exception:  # noqa: BLE001 (any failure must end every rank, not leave them waiting)
        print(f"bench_comm: rank {comm.Get_rank()} failed:\n{traceback.format_exc()}", file=sys.stderr,
              flush=True)
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
