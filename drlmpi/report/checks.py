"""Health checks of runs, PASS or FAIL, in report.md's "Health checks" section and, with
``python -m drlmpi.report PATH --check``, as the exit status (the soak preset's verdict:
``+experiment=soak_async``; docs/report.md):

* ``finished``: the run ended by itself with a summary (a budget or the threshold stopped it);
  a failed launcher job or a run directory without a summary fails;
* ``memory flat``: runs that sampled their ranks' resident memory (``run.memory_sample_s``):
  after the warm-up (the first ``WARMUP_SHARE`` of the run, and at least ``WARMUP_S`` seconds or
  half the run, whichever is shorter), no rank grows more than ``RSS_TOLERANCE`` over its first
  sample after it;
* ``lag bound``: async runs: the largest policy lag of any chunk the learner used is within
  ``topology.max_policy_lag`` (older chunks are discarded and counted);
* ``chunks``: async runs: every chunk each simulator sent was received by the learner (used or
  discarded), simulator by simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drlmpi.config.job import JobSettings
from drlmpi.report.discovery import RunSet
from drlmpi.report.runs import Run

WARMUP_SHARE = 0.2
WARMUP_S = 120.0
RSS_TOLERANCE = 0.10
MIN_SAMPLES = 3  # samples after the warm-up that a memory verdict needs


@dataclass(frozen=True)
class Check:
    """One verdict on one run."""

    path: Path
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name:12} {self.detail}  ({self.path})"


def memory_growth(series: list[list[float]], warmup_share: float = WARMUP_SHARE,
                  warmup_s: float = WARMUP_S) -> tuple[float, int] | None:
    """``(growth, samples)``: the largest resident memory after the warm-up over the first
    sample after it, minus 1, and how many samples came after it; ``None`` with too few."""
    if not series:
        return None
    end = series[-1][0]
    warm = max(warmup_share * end, min(warmup_s, end / 2))
    after = [kib for t, kib in series if t >= warm]
    if len(after) < MIN_SAMPLES or after[0] <= 0:
        return None
    return max(after[1:]) / after[0] - 1.0, len(after) - 1


def _memory(run: Run) -> Check | None:
    ranks = [r for r in run.summary.get("per_rank", []) if r.get("rss_kib")]
    if not ranks:
        return None
    worst, samples, short = None, 0, []
    for rank in ranks:
        found = memory_growth(rank["rss_kib"])
        if found is None:
            short.append(str(rank["rank"]))
            continue
        if worst is None or found[0] > worst[0]:
            worst = (found[0], rank["rank"])
        samples = max(samples, found[1])
    if short:
        return Check(run.path, "memory flat", False,
                     f"fewer than {MIN_SAMPLES} memory samples after the warm-up on rank(s) "
                     f"{', '.join(short)}: run longer or sample more often (run.memory_sample_s)")
    return Check(run.path, "memory flat", worst[0] <= RSS_TOLERANCE,
                 f"largest growth after warm-up {100 * worst[0]:+.1f}% (rank {worst[1]}, "
                 f"{samples} samples; tolerance {100 * RSS_TOLERANCE:.0f}%)")


def _async(run: Run) -> list[Check]:
    stats: dict[str, Any] = run.summary.get("topology_stats") or {}
    if "chunks_received" not in stats:
        return []
    bound = run.settings.topology.max_policy_lag if isinstance(run.settings, JobSettings) else None
    lag = run.summary.get("policy_lag_max")
    out = [Check(run.path, "lag bound", lag is not None and bound is not None and lag <= bound,
                 f"largest lag used {lag} (bound {bound}), discarded chunks {stats.get('discarded_chunks')}")]
    received = stats["chunks_received"]
    sent = {str(r["rank"]): r.get("chunks_sent") for r in run.summary.get("per_rank", [])
            if r.get("role") == "simulator"}
    differ = {rank: (n, received.get(rank)) for rank, n in sent.items() if n != received.get(rank)}
    out.append(Check(run.path, "chunks", bool(sent) and not differ,
                     f"{sum(n or 0 for n in sent.values())} chunks sent by {len(sent)} simulators"
                     + (f"; sent/received differ: {differ}" if differ else ", all received")))
    return out


def run_checks(runset: RunSet) -> list[Check]:
    """Every check that applies to every run and failed job of ``runset``."""
    checks: list[Check] = []
    for run in runset.runs:
        checks.append(Check(run.path, "finished", True,
                            f"stopped by {run.summary.get('stop_reason')} after "
                            f"{run.get('wall_seconds', 0.0):.0f} s"))
        memory = _memory(run)
        checks += [memory] if memory is not None else []
        checks += _async(run)
    for missing in runset.missing:
        checks.append(Check(missing.path, "finished", False, f"no summary: {missing.reason}"))
    missing_dirs = {Path(m.path).resolve() for m in runset.missing}
    for job in runset.failed_jobs:
        where = job.resolved_dir()
        if where not in missing_dirs:
            checks.append(Check(where or Path("?"), "finished", False,
                                f"{job.describe()}: {' '.join(job.overrides)}"))
    return checks


def check_section(checks: list[Check]) -> list[str]:
    """report.md's "Health checks" section (nothing when no check applies)."""
    if not checks:
        return []
    failed = sum(not c.ok for c in checks)
    lines = ["## Health checks", "",
             f"{len(checks) - failed} passed, {failed} failed (see docs/report.md for each check).", "",
             "| run | check | result | detail |", "|---|---|---|---|"]
    lines += [f"| `{c.path.name}` | {c.name} | {'PASS' if c.ok else '**FAIL**'} | "
              f"{c.detail.replace('|', '/')} |" for c in checks]
    return lines + [""]
