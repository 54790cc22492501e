"""``summary.json`` (built by :func:`drlmpi.run.summary.build_summary`; docs/configuration.md
explains every field), written by rank 0, and the short summary it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drlmpi.outputs.files import atomic_write_json


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    """Write ``summary.json`` (indented, keys in insertion order)."""
    path = Path(run_dir) / "summary.json"
    atomic_write_json(summary, path)  # whole or not at all: the sweep launcher reuses a run that has one
    return path


def figure(value: float | None, digits: int | None = 1, missing: str = "none yet") -> str:
    """A number as the run's lines print it: thousands separated, ``digits`` decimals
    (``-1,467.3``; ``None``: as written, ``475``, ``9,000.5``), ``missing`` for ``None``."""
    if value is None:
        return missing
    if digits is None:
        return f"{int(value):,}" if float(value).is_integer() else f"{float(value):,}"
    return f"{float(value):,.{digits}f}"


def verdict(summary: dict[str, Any]) -> str:
    """``SOLVED (threshold 475, best eval 500.0)``, ``NOT SOLVED (threshold 200, no evaluation
    yet)``, ``no reward threshold (best eval -1,467.3)``."""
    best = summary.get("best_eval_return")
    told = f"best eval {figure(best)}" if best is not None else "no evaluation yet"
    threshold = summary.get("reward_threshold")
    if threshold is None:
        return f"no reward threshold ({told})"
    return f"{'SOLVED' if summary['solved'] else 'NOT SOLVED'} (threshold {figure(threshold, None)}, {told})"


def format_summary(summary: dict[str, Any]) -> str:
    """A short human summary of a finished run (printed by rank 0)."""
    lines = [
        f"{summary['algo']} on {summary['env_id']} | topology {summary['topology']} | "
        f"{summary['world_size']} rank(s)",
        verdict(summary),
    ]
    if summary["solved"]:
        lines.append(
            f"  to threshold: {summary['train_seconds_to_threshold']:,.1f} s training, "
            f"{summary['env_steps_to_threshold']:,} env steps, "
            f"{summary['updates_to_threshold']:,} updates"
        )
    lines += [
        f"  total: {summary['env_steps']:,} env steps, {summary['updates']:,} updates, "
        f"{summary['train_seconds']:,.1f} s training ({summary['wall_seconds']:,.1f} s wall), "
        f"stopped by {summary['stop_reason']}",
        f"  throughput: {summary['env_steps_per_s']:,.0f} env steps/s, "
        f"{summary['updates_per_s']:,.0f} updates/s, MPI wait share "
        f"{summary['mpi_wait_share']:.1%}",
        *round_line(summary.get("topology_stats") or {}),
        f"  outputs: {summary['run_dir']}",
    ]
    if summary.get("idle_ranks"):
        lines.append(f"  warning: rank(s) {', '.join(map(str, summary['idle_ranks']))} were busy less than "
                     f"{summary.get('idle_busy_share', 0.2):.0%} of the time "
                     f"(see per_rank busy_share and mpi_wait_share in summary.json)")
    return "\n".join(lines)


def round_line(stats: dict[str, Any]) -> list[str]:
    """p2p and star: one line of the learner's round clock (``topology_stats``), saying which side
    set the pace: the learner waits for rows (simulators) or finds them ready (learner)."""
    if "train_s_median" not in stats:
        return []
    gather, train = stats["gather_s_median"], stats["train_s_median"]
    share = gather / (gather + train) if gather + train > 0 else 0.0
    pace = ("the learner set the pace" if share < 0.1 else "the simulators set the pace" if share > 0.5
            else "learner and simulators about even")
    return [f"  rounds: {stats['rounds']:,}; a round's median on the learner: {gather:.3f} s waiting for "
            f"and storing rows, {train:.3f} s training ({pace}); the first round's wait "
            f"{stats['first_gather_s']:.2f} s"]
