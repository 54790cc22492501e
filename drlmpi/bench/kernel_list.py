"""One update's device kernels, each with its device time, in launch order:

    python -m drlmpi.bench.kernel_list --algo dqn --batch 64 --capture fused --precision high

then their count and summed device time per update: what a graph of 8 updates
(``algo.updates_per_graph=8``) approaches per update once launches are paid for. It profiles
the sixth call of a fresh learner of :mod:`drlmpi.bench.learner` (random transitions): the
first calls compile and capture, so a captured update's listed call is a graph replay, led by
the host's fills before a replay (the block's update counter, paid once a block);
``bench.learner --kernels`` counts an eager warm-up call's compiled kernels, without them.
"""

from __future__ import annotations

import torch

from drlmpi.bench.kernels import device_ops
from drlmpi.bench.learner import drlmpi_step
from drlmpi.config.inputs import ArgumentParser, positive_int
from drlmpi.device.determinism import PRECISION_LABELS


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m drlmpi.bench.kernel_list",
                            description="List one update's device kernels and their time.")
    parser.add_argument("--algo", default="dqn", choices=("dqn", "td3", "ppo"))
    parser.add_argument("--batch", type=positive_int, default=64)
    parser.add_argument("--capture", default="fused", choices=("off", "graph", "fused"),
                        help="algo.capture of the update")
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
