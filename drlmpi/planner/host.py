"""Whether the host was idle and steady while the planner measured it: other work keeping its
cores busy when planning starts, and the drift of the probe's first figure by the end. The probe
and the calibration measure the machine as it is, so a plan made beside another job predicts for
a machine shared with it (a launch left running by an earlier command made a probe measure the
slowdown of 16 busy processes at x2.7 where it was x1.0-x1.2 on that host idle)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

#: other work, in cores, from which the planner warns
BUSY_WARNING = 1.0
#: the probe's first figure measured again at the end: a change beyond this is reported as drift
DRIFT_TOLERANCE = 0.10


def cpu_ticks(stat: str, cpus: list[int]) -> tuple[int, int]:
    """(busy, total) clock ticks of ``cpus`` in the text of ``/proc/stat`` (idle and iowait are
    not busy)."""
    busy = total = 0
    for line in stat.splitlines():
        name, *fields = line.split() or [""]
        if not name.startswith("cpu") or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        ticks = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    return busy, total


def busy_cores(cpus: list[int], seconds: float = 0.5, stat: Path = Path("/proc/stat"),
               wait: Callable[[float], None] = time.sleep) -> float | None:
    """How many of ``cpus`` other processes kept busy over ``seconds`` (this one sleeps meanwhile:
    ``wait``); ``None`` where ``/proc/stat`` cannot be read."""
    try:
        busy0, total0 = cpu_ticks(stat.read_text(), cpus)
        wait(seconds)
        busy1, total1 = cpu_ticks(stat.read_text(), cpus)
    except (OSError, ValueError):
        return None
    return len(cpus) * (busy1 - busy0) / (total1 - total0) if total1 > total0 else None


def describe_busy(busy: float | None, cores: int) -> str | None:
    """The warning for a busy host, or ``None``."""
    if busy is None or busy < BUSY_WARNING:
        return None
    return (f"Warning: other work kept {busy:.1f} of {cores} cores busy as planning began: the probe and "
            "the calibration measure the machine with it - plan on an idle machine, or expect its effect.")


def describe_drift(drift: float, tolerance: float) -> str:
    """One line on how far the probe's first figure moved between the start and the end."""
    if abs(drift) > tolerance:
        return (f"Warning: the host drifted {drift:+.0%} during planning (a simulator's step measured "
                f"again at the end; tolerance +-{tolerance:.0%}): predictions are as unsteady as the "
                "host - plan again on a quieter machine or expect errors of that size.")
    return f"Host drift during planning: {drift:+.1%} (a simulator's step measured again at the end)."
