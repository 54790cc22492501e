"""Device operations per update: what a captured graph of that update replays.

A captured update replays the kernels its body launched while it was captured; the body's eager
warm-up calls launch the same ones (with ``algo.capture=fused``, the compiled kernels), so counting
the device operations of one warm-up call counts the graph's nodes. ``bench.learner --kernels``
counts them per row; :mod:`drlmpi.bench.kernel_list` lists them, each with its device time.
"""

from __future__ import annotations

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
