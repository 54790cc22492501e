"""``run.deterministic``: CUDA learners that repeat bit for bit; ``run.matmul_precision``.

A CPU run of drlmpi is already reproducible where its topology fixes the data order
(docs/runs.md, "Reproducibility"). On CUDA three things vary from run to run: kernels
that accumulate with atomics (scatter-adds, some backward passes), cuBLAS's choice of
reduction split when its workspace is not fixed, and cuDNN's autotuning (on for image
learners), which may pick a different convolution algorithm each time. The switch turns all
three off; what it costs, and the command that measures it: docs/results/h200host_device_check/README.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from drlmpi.config.scopes import RunSettings

#: cuBLAS's documented setting for reproducible results (must be set before its first use)
CUBLAS_WORKSPACE = ":4096:8"

#: ``run.matmul_precision`` values below ``highest``, as labels name them (a run's report label,
#: a learner benchmark's rows)
PRECISION_LABELS = {"high": "tf32", "medium": "bf16"}


def set_deterministic(on: bool) -> None:
    """Deterministic kernels (``torch.use_deterministic_algorithms``; an operation without a
    deterministic CUDA kernel then raises instead of varying), a fixed cuBLAS workspace and no
    cuDNN autotuning - or, ``on=False``, PyTorch's defaults again (the workspace setting stays:
    cuBLAS reads it once).

    The switch is flipped only when it changes: ``torch.use_deterministic_algorithms`` imports
    the compiler stack (``torch._inductor`` and ``torch._dynamo``, about a second of CPU), which a
    rank that never compiles nor builds an optimizer - a simulator - otherwise never loads."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    if torch.are_deterministic_algorithms_enabled() != on:
        torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
    if on:
        torch.backends.cudnn.benchmark = False


def apply_run_settings(run: RunSettings | Mapping[str, Any]) -> None:
    """The process-wide numerics of a run's ``run`` settings: :func:`set_deterministic` and
    ``run.matmul_precision`` (``torch.set_float32_matmul_precision``: ``high`` lets float32 matrix
    products use TF32 tensor cores)."""
    run = RunSettings.coerce(run)
    set_deterministic(run.deterministic)
    torch.set_float32_matmul_precision(run.matmul_precision)
