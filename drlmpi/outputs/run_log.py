"""``metrics.csv`` and the progress lines, written by the learner rank.

Rows reach the disk at every progress interval (``run.progress_every_s``, else every 5 s) and at
each evaluation, so a job killed at any moment loses at most the rows of the last interval.

``metrics.csv`` has one row per finished training episode (``kind=episode``, ``rank`` = the
simulator that ran it) and one per greedy evaluation (``kind=eval``, ``rank=-1``, ``return`` =
the mean over ``run.eval_episodes`` episodes). Columns: ``kind, train_seconds, wall_seconds,
env_steps, updates, return, return_std, length, rank``. ``train_seconds`` excludes evaluation.
"""

from __future__ import annotations

import csv
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from drlmpi.outputs.summary import figure
from drlmpi.outputs.tensorboard_log import TensorBoardLog

logger = logging.getLogger("drlmpi")

#: seconds between flushes of metrics.csv when progress lines are off (run.progress_every_s=0)
FLUSH_EVERY_S = 5.0
METRIC_COLUMNS = ("kind", "train_seconds", "wall_seconds", "env_steps", "updates", "return",
                  "return_std", "length", "rank")


def duration(seconds: float) -> str:
    """Seconds for people: ``45s``, ``12m05s``, ``3h20m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """Re-raise an ``OSError`` of writing ``path`` (a full disk fails at a flush, with no file
    name) with the path in it, so the job's one line can name it."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


class RunLog:
    """Appends metric rows to ``metrics.csv`` and logs throttled progress lines.

    Args:
        run_dir: the run directory.
        learner: the :class:`drlmpi.roles.learner.Learner` whose counters are logged (set later with
            :meth:`attach` because the learner needs the log's callback at construction).
        progress_every_s: seconds between progress lines (0 disables them; evaluations are
            still logged).
    """

    def __init__(self, run_dir: Path, progress_every_s: float = 5.0,
                 tensorboard_every_s: float | None = None, keep_rows: int | None = None):
        self.path = Path(run_dir) / "metrics.csv"
        kept: list[list[str]] = []
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
        self.progress_every_s = progress_every_s
        self._last_progress = time.perf_counter()
        #: rows reach the disk at least this often, whatever later ends the job
        self.flush_every_s = progress_every_s if progress_every_s > 0 else FLUSH_EVERY_S
        self._last_flush = self._last_progress
        self.learner: Any = None
        self.tensorboard = (TensorBoardLog(run_dir, tensorboard_every_s)
                            if tensorboard_every_s is not None else None)

    def flush(self) -> int:
        """Write buffered rows to disk; returns the number of rows written so far."""
        with naming(self.path):
            self._file.flush()
        return self.rows

    def attach(self, learner: Any) -> None:
        """Bind the learner whose counters each row records."""
        self.learner = learner
        if self.tensorboard is not None:
            self.tensorboard.attach(learner)

    def __call__(self, kind: str, return_: float, length: int, rank: int,
                 return_std: float | None = None, at: Any = None) -> None:
        """One row, stamped with the learner's counters and clocks now, or with ``at`` (a
        :class:`~drlmpi.roles.stopping.Moment`: an evaluation the simulators played, stamped
        with the moment its weights were sent)."""
        learner = self.learner
        at = at or learner.moment()
        self.rows += 1
        with naming(self.path):
            self._write_row(kind, return_, length, rank, return_std, at)
        if self.tensorboard is not None:
            if kind == "eval":
                self.tensorboard.evaluation(return_, return_std, at.env_steps)
            else:
                self.tensorboard.episode(return_, length, rank)
        if kind == "eval":
            self.flush()
            self._print(f"eval: mean return {figure(return_)}"
                        + (f" (threshold {figure(learner.reward_threshold, None)})"
                           if learner.reward_threshold is not None else ""))

    def _write_row(self, kind: str, return_: float, length: int, rank: int,
                   return_std: float | None, at: Any) -> None:
        self._writer.writerow([
            kind,
            f"{at.train_seconds:.4f}",
            f"{at.wall_seconds:.4f}",
            at.env_steps,
            at.updates,
            f"{return_:.4f}",
            "" if return_std is None else f"{return_std:.4f}",
            length,
            rank,
        ])

    def progress(self, force: bool = False) -> None:
        """Print one progress line if ``progress_every_s`` has passed since the last one (and
        let the TensorBoard log sample the update metrics and write its interval, when due)."""
        if self.tensorboard is not None:
            self.tensorboard.poll()
        now = time.perf_counter()
        if now - self._last_flush >= self.flush_every_s:
            self._last_flush = now
            self.flush()
        if not force and (self.progress_every_s <= 0 or now - self._last_progress < self.progress_every_s):
            return
        self._last_progress = now
        learner = self.learner
        recent = learner.recent_returns
        recent_txt = f"{figure(sum(recent) / len(recent)) if recent else 'none yet':>8}"
        elapsed = learner.clock.elapsed()
        share = learner.budget_used()
        where = f" {100 * share:3.0f}% ETA {duration(elapsed * (1 - share) / share):>6}" if share > 0 else ""
        rate = f" | {learner.env_steps / elapsed:7,.0f} steps/s" if elapsed > 0 else ""
        self._print(f"steps {learner.env_steps:>9,d}{where}{rate} | updates {learner.updates:>8,d} | "
                    f"recent return {recent_txt} | episodes {learner.episodes:>6,d}")

    def _print(self, text: str) -> None:
        elapsed = self.learner.clock.elapsed() if self.learner else 0.0
        logger.info(f"[{elapsed:7.1f}s] {text}")

    def close(self) -> None:
        """Flush and close ``metrics.csv``; write the last TensorBoard interval (the event
        file stays open for :meth:`finish`)."""
        with naming(self.path):
            self._file.close()
        if self.tensorboard is not None:
            self.tensorboard.flush()

    def finish(self, summary: dict[str, Any]) -> None:
        """After the summary: add its figures to the event file and close it."""
        if self.tensorboard is not None:
            self.tensorboard.finish(summary)
