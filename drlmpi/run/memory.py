"""A rank's resident memory over a run (``run.memory_sample_s``): a daemon thread reads the
process's ``VmRSS`` from ``/proc/self/status`` every few seconds; the samples reach
``summary.json`` (``per_rank[i].rss_kib``: ``[seconds since the start, KiB]`` pairs), where the
report's "memory flat" check reads them (docs/report.md). Linux only: elsewhere nothing is
sampled.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

STATUS = Path("/proc/self/status")


def rss_kib() -> int | None:
    """This process's resident memory in KiB, or ``None`` where ``/proc`` does not tell."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class MemorySampler:
    """Samples :func:`rss_kib` every ``every_s`` seconds (the first at once) until :meth:`stop`."""

    def __init__(self, every_s: float) -> None:
        self.every_s = float(every_s)
        self.samples: list[list[float]] = []
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="drlmpi-memory", daemon=True)
        self._thread.start()

    @classmethod
    def start_if(cls, every_s: float | None) -> MemorySampler | None:
        """A running sampler when ``every_s`` > 0 and ``/proc`` tells the memory, else ``None``."""
        if not every_s or every_s <= 0 or rss_kib() is None:
            return None
        return cls(every_s)

    def _sample(self) -> None:
        kib = rss_kib()
        if kib is not None:
            self.samples.append([round(time.monotonic() - self._start, 2), kib])

    def _loop(self) -> None:
        self._sample()
        while not self._stop.wait(self.every_s):
            self._sample()

    def stop(self) -> list[list[float]]:
        """End the sampling (one last sample) and return every ``[seconds, KiB]`` pair."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._sample()
        return self.samples
