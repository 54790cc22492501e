"""How much memory a learner's storage may take: the host's available memory (the device's own is
asked of CUDA where the storage lives).
"""

from __future__ import annotations


def host_available_bytes() -> int | None:
    """The host memory available to new allocations (``MemAvailable`` of /proc/meminfo;
    ``None`` where that file does not exist)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
