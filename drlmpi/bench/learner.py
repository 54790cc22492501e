"""Learner updates per second: a bare PyTorch loop against drlmpi's learner, on CPU and device.

``python -m drlmpi.bench.learner --algo dqn --batch 64 256 --device cpu cuda --seconds 5``

In ONE invocation, for every algorithm and batch size, it measures updates/s of

* ``bare``: plain PyTorch, no drlmpi class: the same networks, Adam, loss, gradient clipping and
  target updates, the minibatch drawn from a tensor with ``torch.randint``
  (:mod:`drlmpi.bench.bare`);
* ``drlmpi``: :meth:`Algorithm.update` on the CPU, its storage filled with random transitions
  (PPO: one rollout, already on the learner's device, frozen again whenever it is used up, so
  its updates include the values and advantages of every rollout but not the copy of its rows);
* on each accelerator in ``--device``: ``eager`` (device storage, no capture), ``graph`` (the
  whole update captured in CUDA graphs) and ``compile`` (``torch.compile(mode="reduce-overhead")``),
  each when it is available, and ``fused`` (the loss and its gradient compiled by inductor,
  replayed in CUDA graphs); ``--kernels`` adds each row's device operations per update;

and prints a table whose last columns are the ratios to the bare CPU loop and to drlmpi's CPU
path. Timings use ``--threads`` CPU threads (default 1, as a rank with one core) and end with a
device synchronisation, so queued GPU work is counted.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from drlmpi.bench.bare import BARE
from drlmpi.bench.kernels import device_ops_per_call
from drlmpi.bench.table import print_table, write_json
from drlmpi.config.environment import check_environment
from drlmpi.config.errors import ConfigError
from drlmpi.config.inputs import ArgumentParser, check_output_file, device_name, positive_float, positive_int
from drlmpi.config.schema import SETTINGS, group_config
from drlmpi.config.scopes import AlgoSettings
from drlmpi.device.determinism import CUBLAS_WORKSPACE, PRECISION_LABELS, set_deterministic
from drlmpi.envs.spec import EnvSpec

SPECS = {
    "dqn": EnvSpec("CartPole-v1", 4, True, 2, 1, (), ()),
    "td3": EnvSpec("Pendulum-v1", 3, False, 0, 1, (-2.0,), (2.0,)),
    "ppo": EnvSpec("CartPole-v1", 4, True, 2, 1, (), ()),
}
#: ``--obs atari``: 4 stacked 84x84 grayscale frames (uint8) and Breakout's 4 actions, with the
#: Atari configs' networks (the Nature CNN, 512 hidden units) and PPO's Atari rollout.
ATARI_SPEC = EnvSpec("ALE/Breakout-v5", 4 * 84 * 84, True, 4, 1, (), (), obs_shape=(4, 84, 84),
                     obs_dtype="uint8")
ATARI_CFG = {"dqn": {"hidden": [512], "buffer_size": 5_000},
             "ppo": {"hidden": [512], "activation": "relu", "rollout_steps": 1024, "epochs": 4}}
#: ``--obs atari_impala``: the same with IMPALA's residual stack into 256 units (the Breakout preset's)
IMPALA = {"encoder": "impala", "hidden": [256]}


def algo_settings(name: str, batch: int, **overrides: Any) -> AlgoSettings:
    """The algorithm's settings: its defaults (:func:`~drlmpi.config.schema.group_config`) with
    the batch size (and overrides) set; the replay is always ready (``learning_starts`` 0)."""
    values = {"batch_size": batch, **({"learning_starts": 0, "buffer_size": 100_000}
                                      if name in ("dqn", "td3") else {}), **overrides}
    return SETTINGS[f"algo/{name}"].build({**group_config("algo", name), **values})


def random_rows(layout, spec: EnvSpec, n: int, seed: int = 0, terminal_prob: float = 0.1,
                streams: int = 8, log_probs: bool = True) -> np.ndarray:
    """``n`` packed rows of random transitions: valid actions, ``terminal_prob`` of them
    terminal, ``streams`` environments in time order, and (``log_probs``, where the layout has
    the column) behaviour log-probabilities near log(1/2)."""
    rng = np.random.default_rng(seed)
    rows = layout.empty(n)
    for name in ("obs", "next_obs"):
        if spec.image:  # random pixels, packed as the layout stores them
            layout.put_obs(rows, name, rng.integers(0, 256, (n, *spec.obs_shape), dtype=np.uint8))
        else:
            layout.column(rows, name)[:] = rng.normal(size=(n, spec.obs_dim))
    if spec.discrete:
        layout.column(rows, "action")[:, 0] = rng.integers(0, spec.n_actions, n)
    else:
        layout.column(rows, "action")[:] = rng.uniform(spec.action_low, spec.action_high,
                                                       (n, spec.action_dim))
    layout.column(rows, "reward")[:, 0] = rng.normal(size=n)
    layout.column(rows, "terminated")[:, 0] = rng.random(n) < terminal_prob
    layout.column(rows, "stream")[:, 0] = np.arange(n) % streams
    if log_probs and "log_prob" in layout.slices:
        layout.column(rows, "log_prob")[:, 0] = np.log(0.5) + 0.01 * rng.normal(size=n)
    return rows


def timed(step: Callable[[], object], seconds: float, device: torch.device,
          min_updates: int = 20, clock: str = "wall") -> float:
    """Updates/s of ``step`` over about ``seconds`` (after a short warm-up). ``clock="cpu"``
    divides by this process's CPU time instead of wall time (CPU devices only: on a shared
    machine it is the rate one dedicated core would give)."""
    now = time.process_time if clock == "cpu" and device.type == "cpu" else time.perf_counter

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(10):
        step()
    sync()
    n, t0 = 0, now()
    batch_n = 10
    while True:
        for _ in range(batch_n):
            step()
        n += batch_n
        if n >= min_updates and now() - t0 >= seconds:
            break
    sync()
    return n / (now() - t0)


# -- (b)-(e) drlmpi -----------------------------------------------------------------------------
def drlmpi_step(name: str, batch: int, device: str, capture: str | None,
                per_graph: int = 1, obs: str = "vector", **overrides: object) -> Callable[[], object]:
    """An update closure over a drlmpi algorithm whose storage holds random transitions; with
    ``per_graph`` K > 1 (off-policy, captured) one call is ``run_updates(K)``: K updates in one
    graph replay; ``overrides`` set algorithm options (``twin_critics="stacked"``)."""
    from hydra.utils import get_class

    atari = obs in ("atari", "atari_impala")
    if name == "td3":  # rows name their layout: separate unless asked (auto would follow the device)
        overrides.setdefault("twin_critics", "separate")
    if per_graph > 1:
        overrides["updates_per_graph"] = per_graph
    images = {**ATARI_CFG[name], **(IMPALA if obs == "atari_impala" else {})} if atari else {}
    cfg = algo_settings(name, batch, capture=capture, **{**images, **overrides})
    spec = ATARI_SPEC if atari else SPECS[name]
    algo = get_class(cfg._target_)(spec, cfg, device=device, seed=0, learner=True)
    if name == "ppo":
        rows = random_rows(algo.layout, spec, cfg.rollout_steps)
        on_device = algo.store.staging.to_device(rows)  # data arrival is not part of an update

        def step() -> object:
            if not algo.ready_to_update():  # a new rollout: its values and advantages are computed
                algo.store.add_tensor(on_device)
                algo.updates_due(len(rows))
            return algo.update()

        return step
    algo.observe(random_rows(algo.layout, spec, cfg.buffer_size if atari else 50_000))
    if per_graph > 1:
        return lambda: algo.run_updates(per_graph)
    return algo.update


def modes_for(device: str, algo: str = "ppo") -> list[str]:
    if device == "cpu":
        return ["drlmpi"]
    return ["eager", "graph", "compile", "fused"]


def build_parser() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = ArgumentParser(prog="python -m drlmpi.bench.learner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", nargs="+", default=["dqn"], choices=sorted(BARE))
    parser.add_argument("--batch", nargs="+", type=positive_int, default=[64, 256])
    parser.add_argument("--device", nargs="+", type=device_name, default=["cpu"])
    parser.add_argument("--seconds", type=positive_float, default=3.0, help="timed seconds per measurement")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: CPU rows divide by process CPU time (a loaded machine); "
                             "device rows always use wall time")
    parser.add_argument("--repeats", type=positive_int, default=1,
                        help="measure every row this many times, interleaved, and keep the best "
                             "(a shared machine's noise)")
    parser.add_argument("--modes", nargs="+", default=None,
                        help="device modes to run (default: eager graph compile fused)")
    parser.add_argument("--kernels", action="store_true",
                        help="also count each device row's kernels per update (drlmpi/bench/kernels.py)")
    parser.add_argument("--updates-per-graph", nargs="+", type=positive_int, default=[],
                        help="also measure each captured mode with algo.updates_per_graph=K for each K "
                             "(DQN, TD3; rows 'graph xK', 'fused xK')")
    parser.add_argument("--obs", choices=("vector", "atari", "atari_impala"), default="vector",
                        help="atari: 4x84x84 uint8 image observations and the Nature CNN (dqn, ppo; "
                             "no bare rows); atari_impala: with IMPALA's residual stack and 256 "
                             "hidden units (the Breakout preset's network)")
    parser.add_argument("--autocast", action="store_true",
                        help="PPO on images: also measure each row with algo.autocast=bfloat16 "
                             "(rows '<mode> autocast')")
    parser.add_argument("--channels-last", action="store_true",
                        help="PPO on images: also measure each row with algo.channels_last=true "
                             "(rows '<mode> cl', and '<mode> autocast cl' with --autocast)")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the table to this file: the rows (algo, batch, device, mode, "
                             "updates_per_s, note), the arguments, the GPU and torch's version")
    parser.add_argument("--stacked-critics", action="store_true",
                        help="TD3 rows measure separate critics; also measure each with "
                             "algo.twin_critics=stacked (auto's choice on CUDA) "
                             "(rows '<mode> stacked')")
    parser.add_argument("--target-forward", nargs="+", default=[], choices=("paired", "separate"),
                        help="DQN, TD3: also measure each fused row with algo.target_forward set to each "
                             "value other than the algorithm's default (rows 'fused paired', 'fused "
                             "separate'; with --stacked-critics also 'fused stacked paired')")
    parser.add_argument("--separate-target", action="store_true",
                        help="the same as --target-forward separate (DQN's default pairs the online "
                             "and target networks)")
    parser.add_argument("--precision", nargs="+", default=[], choices=sorted(PRECISION_LABELS),
                        help="also measure each fused row with run.matmul_precision set to each value: "
                             "high (TF32 tensor cores for float32 products; rows '<row> tf32'), "
                             "medium (bfloat16; rows '<row> bf16')")
    parser.add_argument("--tf32", action="store_true", help="the same as --precision high")
    parser.add_argument("--deterministic", action="store_true",
                        help="also measure each device mode with run.deterministic's settings "
                             "(rows '<mode> det'; the cuBLAS workspace setting applies to all rows)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_environment()  # DRLMPI_CUDNN_BENCHMARK, read by the algorithms
        if args.json is not None:  # before the measurements, not after
            check_output_file("--json", args.json)
    except ConfigError as exc:
        parser.error(str(exc))
    if args.deterministic:  # cuBLAS reads it once: set before the first device row, for every row
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    if args.obs != "vector" and "td3" in args.algo:
        parser.error(f"--obs {args.obs} takes --algo dqn and/or ppo (TD3 has no image encoder)")
    for flag, given in (("--autocast", args.autocast), ("--channels-last", args.channels_last)):
        if given and (args.obs == "vector" or "ppo" not in args.algo):
            parser.error(f"{flag} measures PPO on images: give --algo ppo and --obs atari or atari_impala")
    torch.set_num_threads(args.threads)
    precisions = precisions_of(args)
    best: dict[tuple[str, int, str, str], tuple[float | None, str]] = {}

    def record(algo: str, batch: int, device: str, mode: str,
               make: Callable[[], Callable[[], object]], per_call: int = 1) -> None:
        measure(algo, batch, device, mode, make, per_call)
        for precision in precisions if mode.startswith("fused") else ():
            torch.set_float32_matmul_precision(precision)
            try:
                measure(algo, batch, device, f"{mode} {PRECISION_LABELS[precision]}", make, per_call)
            finally:
                torch.set_float32_matmul_precision("highest")

    def measure(algo: str, batch: int, device: str, mode: str,
                make: Callable[[], Callable[[], object]], per_call: int = 1) -> None:
        torch.manual_seed(0)
        dev = torch.device(device)
        if dev.type == "cuda":  # each row compiles afresh, as a job's learner does, none reusing
            torch._dynamo.reset()  # what an earlier row compiled
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                rate = timed(make(), args.seconds, dev, clock=args.clock) * per_call
            note = "; ".join(str(w.message).splitlines()[0] for w in caught)[:90]
            if args.kernels and dev.type == "cuda" and per_call == 1:
                ops = device_ops_per_call(make(), dev, 2 if algo == "td3" else 1)
                note = f"{ops:.0f} kernels/update {note}"
        except Exception as exc:  # noqa: BLE001 (a benchmark reports, never stops)
            rate, note = None, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
        key = (algo, batch, device, mode)
        old = best.get(key)
        if old is None or (rate is not None and (old[0] is None or rate > old[0])):
            best[key] = (rate, note)
        shown = "-" if rate is None else f"{rate:,.0f}/s"
        print(f"  {algo} batch {batch} {device} {mode}: {shown} {note}", flush=True)

    for _ in range(args.repeats):
        for algo in args.algo:
            for batch in args.batch:
                if args.obs == "vector":
                    record(algo, batch, "cpu", "bare",
                           lambda a=algo, b=batch: BARE[a](algo_settings(a, b), SPECS[a], b))
                for device in args.device:
                    modes = modes_for(device, algo)
                    for mode in modes if device == "cpu" else [m for m in args.modes or modes if m in modes]:
                        capture = {"drlmpi": "off", "eager": "off"}.get(mode, mode)
                        record(algo, batch, device, mode,
                               lambda a=algo, b=batch, d=device, c=capture: drlmpi_step(a, b, d, c,
                                                                                       obs=args.obs))
                        for name, options in image_variants(args) if algo == "ppo" else ():
                            record(algo, batch, device, f"{mode} {name}",
                                   lambda a=algo, b=batch, d=device, c=capture, o=options: drlmpi_step(
                                       a, b, d, c, obs=args.obs, **o))
                        if args.stacked_critics and algo == "td3":
                            record(algo, batch, device, f"{mode} stacked",
                                   lambda a=algo, b=batch, d=device, c=capture: drlmpi_step(
                                       a, b, d, c, twin_critics="stacked"))
                        for forward in target_forwards(args, algo) if mode == "fused" else ():
                            record(algo, batch, device, f"fused {forward}",
                                   lambda a=algo, b=batch, d=device, c=capture, f=forward: drlmpi_step(
                                       a, b, d, c, obs=args.obs, target_forward=f))
                            if args.stacked_critics and algo == "td3":
                                record(algo, batch, device, f"fused stacked {forward}",
                                       lambda a=algo, b=batch, d=device, c=capture, f=forward: drlmpi_step(
                                           a, b, d, c, twin_critics="stacked", target_forward=f))
                        if args.deterministic and device != "cpu":
                            set_deterministic(True)
                            record(algo, batch, device, f"{mode} det",
                                   lambda a=algo, b=batch, d=device, c=capture: drlmpi_step(
                                       a, b, d, c, obs=args.obs))
                            set_deterministic(False)
                    if device == "cpu" or algo == "ppo":
                        continue
                    blocks = [(k, m) for k in args.updates_per_graph for m in blocked_modes(args, algo)]
                    for k, mode in blocks:
                        record(algo, batch, device, f"{mode} x{k}",
                               lambda a=algo, b=batch, d=device, k=k, c=mode: drlmpi_step(a, b, d, c, k,
                                                                                         obs=args.obs),
                               per_call=k)
    results = [(*key, rate, note) for key, (rate, note) in best.items()]
    print_table(results)
    if args.json is not None:
        write_json(args.json, results, vars(args))


def image_variants(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """PPO's image rows beside each mode, (row suffix, options): --autocast, --channels-last, both."""
    autocast = [("autocast", {"autocast": "bfloat16"})] if args.autocast else []
    layouts = [("cl", {}), *[("autocast cl", o) for _, o in autocast]] if args.channels_last else []
    return autocast + [(name, {**o, "channels_last": True}) for name, o in layouts]


def target_forwards(args: argparse.Namespace, algo: str) -> list[str]:
    """The ``algo.target_forward`` values to measure besides ``algo``'s default (DQN and TD3)."""
    if algo not in ("dqn", "td3"):
        return []
    wanted = [*args.target_forward, *(["separate"] if args.separate_target else [])]
    default = algo_settings(algo, 1).target_forward
    return [value for value in dict.fromkeys(wanted) if value != default]


def blocked_modes(args: argparse.Namespace, algo: str) -> list[str]:
    """The captured modes ``--updates-per-graph`` measures in blocks of K: graph, and fused
    for the replay-based algorithms (DQN, TD3), narrowed to ``--modes`` when given."""
    captured = ("graph",) if algo == "ppo" else ("graph", "fused")
    return [m for m in captured if m in (args.modes or (m,))]


def precisions_of(args: argparse.Namespace) -> list[str]:
    """The ``run.matmul_precision`` values each fused row is measured with besides ``highest``, in
    the order given, once each (``--tf32`` is ``high``)."""
    return list(dict.fromkeys([*(["high"] if args.tf32 else []), *args.precision]))


if __name__ == "__main__":
    main()
