"""``tb/events.out.tfevents.*`` (:class:`TensorBoardLog`, with ``run.tensorboard=true``): per-interval
means of the update metrics, episode returns per simulator rank, evaluations, throughput and, at
the end, the MPI wait share and policy lag; docs/report.md lists the tags.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drlmpi.device.metrics import non_finite_metrics, read_metrics, table_means
from drlmpi.outputs.event_file import EventWriter

TB_DIR = "tb"


class TensorBoardLog:
    """What the learner rank writes to ``<run_dir>/tb/`` (x axis: job-wide env steps).

    Every ``every_s`` seconds (checked when the topology's loop asks for a progress line, so
    between batches of updates, never inside one) it writes one record:

    * ``train/<metric>``: each update metric of the algorithm (``loss``, ``q_mean``,
      ``policy_loss``, ``entropy``, ``approx_kl``, ``grad_norm``...) averaged over the
      interval, from at most :attr:`SAMPLES` samples of ``learner.last_metrics`` (the last
      update of a batch of updates), held as device tensors and read together at the end of
      the interval: one host synchronisation per interval, none per update;
    * ``train/<value>``: the algorithm's :meth:`~drlmpi.algos.base.Algorithm.schedule_values`
      (learning rates, DQN's ``epsilon``) at the current step;
    * ``episode/return``, ``episode/length``: means over the training episodes finished in
      the interval, and ``episode/return/rank<r>``, ``episode/length/rank<r>`` per simulator
      rank ``r``;
    * ``perf/env_steps_per_s``, ``perf/updates_per_s``: over the interval's training time
      (evaluation excluded), ``perf/updates`` (the update counter) and, where the topology
      measures it (async), ``perf/policy_lag_mean`` / ``perf/policy_lag_max`` of the chunks
      ingested in the interval.

    Evaluations are written when they happen (``eval/return``, ``eval/return_std``), and
    :meth:`finish` adds the run's ``summary/*`` figures. tensorboardX's ``SummaryWriter``
    writes the records and flushes the file every ``flush_every_s`` seconds and at the end.
    """

    SAMPLES = 20  # update-metric samples kept per interval at most

    def __init__(self, run_dir: Path, every_s: float, flush_every_s: float = 10.0) -> None:
        self.every_s = float(every_s)
        self.writer = EventWriter(Path(run_dir) / TB_DIR, flush_every_s=flush_every_s)
        self.learner: Any = None
        self._samples: list[Mapping[str, float]] = []
        self._last_seen: object = None
        self._last_sample = float("-inf")
        self._episodes: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
        self._last_write = time.perf_counter()
        self._mark = (0.0, 0, 0)  # training clock, env steps, updates at the last write
        self._lags_seen = 0  # learner.policy_lags already written

    def attach(self, learner: Any) -> None:
        """Bind the learner whose counters and metrics are written."""
        self.learner = learner

    def episode(self, episode_return: float, length: int, rank: int) -> None:
        """Count one finished training episode of simulator ``rank`` into the interval."""
        acc = self._episodes[rank]
        acc[0] += episode_return
        acc[1] += length
        acc[2] += 1

    def evaluation(self, mean: float, std: float | None, step: int | None = None) -> None:
        """Write one greedy evaluation at ``step`` (the step its weights were sent; default: now)."""
        values = {"eval/return": mean}
        if std is not None:
            values["eval/return_std"] = std
        self.writer.add_scalars(values, self.learner.env_steps if step is None else step)

    def poll(self) -> None:
        """Between batches of updates: keep the latest update metrics as a sample (a
        reference, no device read) at most :attr:`SAMPLES` times per interval, and write the
        interval when ``every_s`` has passed."""
        now = time.perf_counter()
        self._sample(now)
        if now - self._last_write >= self.every_s:
            self.write_interval(now)

    def _sample(self, now: float) -> None:
        metrics = self.learner.last_metrics
        if metrics is not self._last_seen and now - self._last_sample >= self.every_s / self.SAMPLES:
            self._last_seen = metrics
            self._last_sample = now
            if len(metrics):
                self._samples.append(metrics)

    def write_interval(self, now: float | None = None) -> None:
        """Write the interval's record (if anything happened in it) and start the next one."""
        learner = self.learner
        now = time.perf_counter() if now is None else now
        self._last_write = now
        clock, steps, updates = learner.clock.elapsed(), learner.env_steps, learner.updates
        last_clock, last_steps, last_updates = self._mark
        if steps == last_steps and updates == last_updates and not self._samples:
            return
        tables = read_metrics(self._samples)
        # Where the update metrics are read is where a loss gone NaN or infinite shows (no other
        # host read of them): the run stops here, before it writes or checkpoints a NaN policy.
        for name, value in non_finite_metrics(tables, learner.algo.loss_metrics).items():
            learner.stop_non_finite(f"non-finite loss ({name} = {value}) after {updates:,} updates "
                                    f"at env step {steps:,}")
        values: dict[str, float] = {}
        values.update({f"train/{k}": v for k, v in table_means(tables).items()})
        values.update({f"train/{k}": v for k, v in learner.algo.schedule_values(steps).items()})
        self._samples.clear()
        total = [0.0, 0.0, 0]
        for rank, (ret, length, count) in sorted(self._episodes.items()):
            values[f"episode/return/rank{rank}"] = ret / count
            values[f"episode/length/rank{rank}"] = length / count
            total = [total[0] + ret, total[1] + length, total[2] + count]
        if total[2]:
            values["episode/return"] = total[0] / total[2]
            values["episode/length"] = total[1] / total[2]
        self._episodes.clear()
        elapsed = clock - last_clock
        if elapsed > 0:
            values["perf/env_steps_per_s"] = (steps - last_steps) / elapsed
            values["perf/updates_per_s"] = (updates - last_updates) / elapsed
        values["perf/updates"] = float(updates)
        lags = learner.policy_lags[self._lags_seen:]
        if lags:
            values["perf/policy_lag_mean"] = sum(lags) / len(lags)
            values["perf/policy_lag_max"] = float(max(lags))
            self._lags_seen = len(learner.policy_lags)
        self._mark = (clock, steps, updates)
        self.writer.add_scalars(values, steps)

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Write the run's ``summary/*`` figures at the final step and close the file."""
        values = {"summary/mpi_wait_share": summary.get("mpi_wait_share"),
                  "summary/env_steps_per_s": summary.get("env_steps_per_s"),
                  "summary/updates_per_s": summary.get("updates_per_s"),
                  "summary/policy_lag_mean": summary.get("policy_lag_mean"),
                  "summary/policy_lag_max": summary.get("policy_lag_max")}
        for rank in summary.get("per_rank") or []:
            values[f"summary/mpi_wait_share/rank{rank['rank']}"] = rank.get("mpi_wait_share")
        values = {k: float(v) for k, v in values.items() if v is not None}
        if not self.writer.closed:
            self.writer.add_scalars(values, int(summary.get("env_steps") or 0))
        self.close()

    def flush(self) -> None:
        """Write the last (partial) interval and flush what the writer has written (the file
        stays open for :meth:`finish`, which writes everything to disk)."""
        if self.learner is not None and not self.writer.closed:
            self._sample(float("inf"))
            self.write_interval()
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
