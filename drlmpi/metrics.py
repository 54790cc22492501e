"""Run outputs written by the learner rank: ``metrics.csv``, progress lines, ``summary.json``.

``metrics.csv`` has one row per finished training episode (``kind=episode``, ``rank`` = the
simulator that ran it) and one per greedy evaluation (``kind=eval``, ``rank=-1``, ``return`` =
the mean over ``run.eval_episodes`` episodes). Columns: ``kind, train_seconds, wall_seconds,
env_steps, updates, return, return_std, length, rank``. ``train_seconds`` excludes evaluation.
"""

from __future__ import annotations

import csv
import json
import logging
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("drlmpi")

METRIC_COLUMNS = ("kind", "train_seconds", "wall_seconds", "env_steps", "updates", "return",
                  "return_std", "length", "rank")


class RunLog:
    """Appends metric rows to ``metrics.csv`` and logs throttled progress lines.

    Args:
        run_dir: the run directory.
        learner: the :class:`drlmpi.roles.Learner` whose counters are logged (set later with
            :meth:`attach` because the learner needs the log's callback at construction).
        progress_every_s: seconds between progress lines (0 disables them; evaluations are
            still logged).
    """

    def __init__(self, run_dir: Path, progress_every_s: float = 5.0, keep_rows: int | None = None):
        self.path = Path(run_dir) / "metrics.csv"
        self.rows = 0
        if keep_rows is not None and self.path.exists():
            # Resuming: keep the rows the checkpoint counted, drop any written after it (their
            # episodes are not in the restored state), and append from there.
            with open(self.path, newline="") as fh:
                kept = list(csv.reader(fh))[1 : 1 + keep_rows]
            self._file = open(self.path, "w", newline="")  # noqa: SIM115 (closed in close())
            self._writer = csv.writer(self._file)
            self._writer.writerow(METRIC_COLUMNS)
            self._writer.writerows(kept)
            self.rows = len(kept)
        else:
            self._file = open(self.path, "w", newline="")  # noqa: SIM115 (closed in close())
            self._writer = csv.writer(self._file)
            self._writer.writerow(METRIC_COLUMNS)
        self.progress_every_s = progress_every_s
        self._last_progress = time.perf_counter()
        self.learner: Any = None

    def flush(self) -> int:
        """Write buffered rows to disk; returns the number of rows written so far."""
        self._file.flush()
        return self.rows

    def attach(self, learner: Any) -> None:
        """Bind the learner whose counters each row records."""
        self.learner = learner

    def __call__(self, kind: str, return_: float, length: int, rank: int,
                 return_std: float | None = None) -> None:
        learner = self.learner
        self.rows += 1
        self._writer.writerow([
            kind,
            f"{learner.clock.elapsed():.4f}",
            f"{learner.clock.wall():.4f}",
            learner.env_steps,
            learner.updates,
            f"{return_:.4f}",
            "" if return_std is None else f"{return_std:.4f}",
            length,
            rank,
        ])
        if kind == "eval":
            self._file.flush()
            self._print(f"eval: mean return {return_:.1f}"
                        + (f" (threshold {learner.reward_threshold:g})"
                           if learner.reward_threshold is not None else ""))

    def progress(self, force: bool = False) -> None:
        """Print one progress line if ``progress_every_s`` has passed since the last one."""
        now = time.perf_counter()
        if not force and (self.progress_every_s <= 0 or now - self._last_progress < self.progress_every_s):
            return
        self._last_progress = now
        recent = self.learner.recent_returns
        recent_txt = f"{sum(recent) / len(recent):8.1f}" if recent else "     n/a"
        self._print(f"steps {self.learner.env_steps:>9,d} | updates {self.learner.updates:>8,d} | "
                    f"recent return {recent_txt} | episodes {self.learner.episodes:>6,d}")

    def _print(self, text: str) -> None:
        elapsed = self.learner.clock.elapsed() if self.learner else 0.0
        logger.info(f"[{elapsed:7.1f}s] {text}")

    def close(self) -> None:
        """Flush and close ``metrics.csv``."""
        self._file.close()


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    """Write ``summary.json`` (indented, keys in insertion order)."""
    path = Path(run_dir) / "summary.json"
    path.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return path


def format_summary(summary: dict[str, Any]) -> str:
    """A short human summary of a finished run (printed by rank 0)."""
    solved = summary["solved"]
    lines = [
        f"{summary['algo']} on {summary['env_id']} | topology {summary['topology']} | "
        f"{summary['world_size']} rank(s)",
        ("SOLVED" if solved else "NOT SOLVED")
        + f" (threshold {summary['reward_threshold']}, best eval {summary['best_eval_return']})",
    ]
    if solved:
        lines.append(
            f"  to threshold: {summary['train_seconds_to_threshold']:.1f} s training, "
            f"{summary['env_steps_to_threshold']:,} env steps, "
            f"{summary['updates_to_threshold']:,} updates"
        )
    lines += [
        f"  total: {summary['env_steps']:,} env steps, {summary['updates']:,} updates, "
        f"{summary['train_seconds']:.1f} s training ({summary['wall_seconds']:.1f} s wall), "
        f"stopped by {summary['stop_reason']}",
        f"  throughput: {summary['env_steps_per_s']:,.0f} env steps/s, "
        f"{summary['updates_per_s']:,.0f} updates/s, MPI wait share "
        f"{summary['mpi_wait_share']:.1%}",
        f"  outputs: {summary['run_dir']}",
    ]
    if summary.get("idle_ranks"):
        lines.append(f"  warning: rank(s) {summary['idle_ranks']} were busy less than "
                     f"{summary.get('idle_busy_share', 0.2):.0%} of the time "
                     f"(see per_rank busy_share and mpi_wait_share in summary.json)")
    return "\n".join(lines)
