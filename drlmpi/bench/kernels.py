"""Device operations per update: what a captured graph of that update replays.

A captured update replays the kernels its body launched while it was captured; the body's eager
warm-up calls launch the same ones (with ``algo.capture=fused``, the compiled kernels), so counting
the device operations of one warm-up call counts the graph's nodes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def device_ops_per_call(step: Callable[[], object], device: torch.device, cycle: int = 1) -> float | None:
    """Kernels, copies and fills on ``device`` per call of ``step``, counted by ``torch.profiler``
    over ``cycle`` calls after ``cycle`` calls that compile and allocate (``cycle``: calls until
    the updates repeat, TD3's ``policy_delay``; the first three calls of each captured sequence
    run eagerly, so ``cycle`` up to 3 counts eager calls); ``None`` off CUDA."""
    if device.type != "cuda":
        return None
    for _ in range(cycle):
        step()
    torch.cuda.synchronize(device)
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(cycle):
            step()
        torch.cuda.synchronize(device)
    ops = sum(1 for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA)
    return ops / cycle
