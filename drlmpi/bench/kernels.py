"""Device operations per update: what a captured graph of that update replays.

A captured update replays the kernels its body launched while it was captured; the body's eager
warm-up calls launch the same ones (with ``algo.capture=fused``, the compiled kernels), so counting
the device operations of one warm-up call counts the graph's nodes. ``bench.learner --kernels``
counts them per row; this module's command lists them, each with its device time:

    python -m drlmpi.bench.kernels --algo dqn --batch 64 --capture fused --precision high

(one update's kernels in launch order and their summed device time: what a graph of 8 updates,
``algo.updates_per_graph=8``, approaches per update once launches are paid for).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch


def device_ops(step: Callable[[], object], device: torch.device, cycle: int = 1) -> list[tuple[str, float]]:
    """``(name, device microseconds)`` of each kernel, copy and fill on ``device`` over ``cycle``
    calls of ``step``, in launch order, after ``cycle`` calls that compile and allocate (``cycle``:
    calls until the updates repeat, TD3's ``policy_delay``); empty off CUDA."""
    if device.type != "cuda":
        return []
    for _ in range(cycle):
        step()
    torch.cuda.synchronize(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(cycle):
            step()
        torch.cuda.synchronize(device)
    return [(event.name, event.device_time) for event in prof.events()
            if event.device_type == torch.autograd.DeviceType.CUDA]


def device_ops_per_call(step: Callable[[], object], device: torch.device, cycle: int = 1) -> float | None:
    """Kernels, copies and fills on ``device`` per call of ``step``, counted by ``torch.profiler``
    over ``cycle`` calls after ``cycle`` calls that compile and allocate (``cycle``: calls until
    the updates repeat, TD3's ``policy_delay``; the first three calls of each captured sequence
    run eagerly, so ``cycle`` up to 3 counts eager calls); ``None`` off CUDA."""
    if device.type != "cuda":
        return None
    return len(device_ops(step, device, cycle)) / cycle


def main(argv: list[str] | None = None) -> None:
    from drlmpi.bench.learner import drlmpi_step  # the learner benchmark's update closures
    from drlmpi.device.determinism import PRECISION_LABELS

    parser = argparse.ArgumentParser(description="List one update's device kernels and their time.")
    parser.add_argument("--algo", default="dqn", choices=("dqn", "td3", "ppo"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--capture", default="fused", choices=("off", "graph", "fused"),
                        help="algo.capture of the update (fused: DQN and TD3 only)")
    parser.add_argument("--precision", default="highest", choices=("highest", *sorted(PRECISION_LABELS)),
                        help="run.matmul_precision: highest (float32), high (TF32), medium (bfloat16)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device: the kernels listed are a GPU's")
    torch.set_float32_matmul_precision(args.precision)
    step = drlmpi_step(args.algo, args.batch, "cuda", args.capture)
    for _ in range(5):  # compile, allocate and leave the eager warm-up calls of a capture behind
        step()
    cycle = 2 if args.algo == "td3" else 1
    ops = device_ops(step, torch.device("cuda"), cycle)
    for name, micros in ops:
        print(f"{micros:8.2f} us  {name[:150]}")
    total = sum(micros for _, micros in ops) / cycle
    print(f"{len(ops) / cycle:.0f} kernels per update, {total:.1f} us of device time per update")


if __name__ == "__main__":
    main()
