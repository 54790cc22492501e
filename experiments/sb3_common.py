"""What the Stable-Baselines3 comparisons (bench_sb3_dqn.py, bench_sb3_td3.py) share.

Both time drlmpi and SB3 to a greedy-evaluation threshold, each run in a cold subprocess with one
BLAS/torch thread, evaluation taken off both clocks, and compare ``ratio = SB3 seconds / drlmpi
seconds``. Here: the options they share, the loop over seeds and the JSON, running a
subprocess, reading a drlmpi run directory, running the SB3 worker (and, when it is cut by
``--timeout`` or fails, reading back the evaluations it had reached from its progress file:
sb3_clock.py), one seed's pair of runs and its ratio, the table and its aggregates. The SB3
side's clock (a callback that evaluates at the same cadence as drlmpi and stops learning at the
threshold) is in sb3_clock.py. Stable-Baselines3 is imported only inside the functions the SB3
side and the final JSON call, so the rest runs (and is tested) without it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sb3_clock  # experiments/sb3_clock.py, beside this module

REPO_ROOT = Path(__file__).resolve().parent.parent
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
DRLMPI_SUMMARY_FIELDS = ("solved", "train_seconds_to_threshold", "env_steps_to_threshold",
                         "updates_to_threshold", "env_steps", "updates", "eval_seconds", "evaluations",
                         "best_eval_return", "stop_reason")


# -- the command line and the whole comparison ---------------------------------------------------
def parser(description: str, *, budget: int, eval_every: int, eval_episodes: int, threshold: float,
           out: str, timeout: float, extra_help: str) -> argparse.ArgumentParser:
    """The options every comparison takes, with its own defaults (a script adds its own after)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--device", default="cpu",
                   help="where both learners run: cpu (default) or cuda (drlmpi's device learner, "
                        "SB3's GPU policy)")
    budget_text = f"{budget:.0e}".replace("e+0", "e")
    p.add_argument("--budget", type=int, default=budget, help=f"env steps per run (default {budget_text})")
    p.add_argument("--eval-every", type=int, default=eval_every, help="env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, default=eval_episodes, help="greedy episodes per evaluation")
    p.add_argument("--threshold", type=float, default=threshold, help="greedy mean return that solves")
    p.add_argument("--out", type=Path, default=Path(out), help="JSON results file")
    p.add_argument("--timeout", type=float, default=timeout, help="seconds per run before it is killed")
    p.add_argument("--keep-runs", action="store_true", help="keep the drlmpi run directories")
    p.add_argument("--drlmpi-extra", nargs="*", default=[], metavar="KEY=VALUE", help=extra_help)
    p.add_argument("--sb3-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p


def worker_ran(script: str, args: argparse.Namespace, worker: Callable[[argparse.Namespace], None]) -> bool:
    """Exit with the install hint when Stable-Baselines3 is missing; when this process is the
    SB3 side (``--sb3-worker``), run ``worker(args)`` and return True."""
    if importlib.util.find_spec("stable_baselines3") is None:
        sys.exit(f'{script}: stable-baselines3 is not installed: pip install -e ".[bench]"')
    if args.sb3_worker:
        worker(args)
    return bool(args.sb3_worker)


def compare(script: str, args: argparse.Namespace, run_drlmpi: Callable[[int, Path], dict[str, Any]],
            run_sb3: Callable[[int, Path], dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every seed's pair of runs (:func:`run_seeds`) in a fresh work folder, removed afterwards
    unless ``--keep-runs``; ``(rows, {"machine": ..., "run_dirs": the folder or None})``."""
    work = Path(tempfile.mkdtemp(prefix=f"{script}_"))
    load_before, started = os.getloadavg(), time.time()
    try:
        rows = run_seeds(args.seeds, {"drlmpi": lambda seed: run_drlmpi(seed, work),
                                      "sb3": lambda seed: run_sb3(seed, work)})
    finally:
        if not args.keep_runs:
            shutil.rmtree(work, ignore_errors=True)
    return rows, {"machine": machine(load_before, started), "run_dirs": str(work) if args.keep_runs else None}


def write_result(out: Path, result: dict[str, Any]) -> None:
    """Write the comparison's JSON to ``out`` and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"results: {out}")


# -- running the two sides ------------------------------------------------------------------------
def run_command(cmd: list[str], timeout: float) -> tuple[dict[str, Any] | None, float]:
    """Run ``cmd`` from the repository root with one BLAS/torch thread; ``(error record or None,
    seconds)``. It runs in a process group of its own, killed whole on a timeout (or on an
    interrupt of this script), so an ``mpiexec`` job leaves no rank behind; the record of a
    timeout has ``timed_out: true``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env={**os.environ, **ONE_THREAD_ENV}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _, stderr = proc.communicate()
        return {"error": f"timed out after {timeout} s", "timed_out": True,
                "stderr_tail": (stderr or "")[-2000:], "command": cmd}, timeout
    finally:
        if proc.poll() is None:  # interrupted: take the job's whole group down with this script
            _kill_group(proc)
    if proc.returncode != 0:
        return ({"error": f"exit code {proc.returncode}", "stderr_tail": stderr[-2000:], "command": cmd},
                time.perf_counter() - t0)
    return None, time.perf_counter() - t0


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(proc.pid, signal.SIGKILL)


def drlmpi_overrides(seed: int, run_dir: Path, args: argparse.Namespace) -> list[str]:
    """The overrides every drlmpi side gets: seed, run directory, budget, the evaluation
    cadence and threshold shared with the SB3 side, one thread, the device."""
    return [f"seed={seed}", f"hydra.run.dir={run_dir}", "run.progress_every_s=0",
            f"run.max_env_steps={args.budget}", f"run.eval_every={args.eval_every}",
            f"run.eval_episodes={args.eval_episodes}", f"env.reward_threshold={args.threshold}",
            "threads_per_rank=1", f"device={args.device}"]


def read_drlmpi_run(run_dir: Path) -> dict[str, Any]:
    """The fields of a finished drlmpi run this comparison needs, from its summary.json and
    metrics.csv; ``train_seconds`` is the time to the threshold when solved, else the whole
    run's (the budget's) training seconds."""
    s = json.loads((run_dir / "summary.json").read_text())
    with open(run_dir / "metrics.csv", newline="") as fh:
        evals = [row for row in csv.DictReader(fh) if row["kind"] == "eval"]
    return {**{k: s[k] for k in DRLMPI_SUMMARY_FIELDS},
            "train_seconds": s["train_seconds_to_threshold"] if s["solved"] else s["train_seconds"],
            "learn_seconds": s["per_rank"][0].get("learn_s"),
            "eval_history": [[int(r["env_steps"]), float(r["train_seconds"]), float(r["return"])]
                             for r in evals],
            "versions": s.get("versions")}


def run_drlmpi(cmd: list[str], run_dir: Path, timeout: float) -> dict[str, Any]:
    """One drlmpi run of ``cmd`` into ``run_dir``: :func:`read_drlmpi_run`'s fields, the
    process's seconds and the command, or an error record."""
    error, seconds = run_command(cmd, timeout)
    if error is not None or not (run_dir / "summary.json").exists():
        return error or {"error": "no summary.json", "command": cmd}
    result = read_drlmpi_run(run_dir)
    versions = result.pop("versions")
    return {**result, "process_seconds": seconds, "versions": versions, "command": cmd}


def run_sb3(script: str, seed: int, args: argparse.Namespace, work: Path,
            extra: list[str] | None = None) -> dict[str, Any]:
    """One SB3 run: ``script`` re-invoked with ``--sb3-worker`` (and ``extra`` flags) in a fresh
    process; what the worker wrote, its process's seconds and the command. A worker cut by the
    timeout, or failed, before writing it leaves a partial record read from its progress file
    (:func:`sb3_clock.cut_result`: not solved, the seconds and steps of its last evaluation,
    ``timed_out``, ``cut_by``); one cut before its first evaluation, the error record."""
    out = work / f"sb3_{seed}.json"
    cmd = [sys.executable, str(Path(script).resolve()), "--sb3-worker", "--seed", str(seed),
           "--budget", str(args.budget), "--eval-every", str(args.eval_every),
           "--eval-episodes", str(args.eval_episodes), "--threshold", str(args.threshold), "--out", str(out),
           "--device", args.device, *(extra or [])]
    error, seconds = run_command(cmd, args.timeout)
    if error is None and out.exists():
        return {**json.loads(out.read_text()), "process_seconds": seconds, "command": cmd}
    error = error or {"error": "no output", "command": cmd}
    return sb3_clock.cut_result(sb3_clock.progress_path(out), error, seconds) or error


# -- one seed's pair and the table ----------------------------------------------------------------
def pair(seed: int, order: list[str], drlmpi: dict[str, Any], sb3: dict[str, Any]) -> dict[str, Any]:
    """One seed's row: both results, ``ratio_sb3_over_drlmpi`` (``None`` if a side failed),
    ``censored`` (a side failed or did not solve: its seconds are the budget's, or, for a run
    cut by the timeout, those it had reached at its last evaluation; the ratio a bound) and
    ``ratio_is`` (:func:`ratio_kind`)."""
    ok = "error" not in drlmpi and "error" not in sb3
    row = {"seed": seed, "order": order, "drlmpi": drlmpi, "sb3": sb3,
           "ratio_sb3_over_drlmpi": sb3["train_seconds"] / drlmpi["train_seconds"] if ok else None,
           "censored": not (ok and drlmpi["solved"] and sb3["solved"])}
    return {**row, "ratio_is": ratio_kind(row)}


def ratio_kind(row: dict[str, Any]) -> str:
    """What a row's ratio is: ``exact`` (both solved), ``lower bound`` (only drlmpi solved: SB3
    would have needed more than its budget's seconds, or, cut by the timeout before solving, more
    than the training seconds of its last evaluation), ``upper bound`` (only SB3 solved),
    ``unknown`` (neither solved) or ``none`` (a side failed and left no evaluation)."""
    if row["ratio_sb3_over_drlmpi"] is None:
        return "none"
    solved = (bool(row["drlmpi"]["solved"]), bool(row["sb3"]["solved"]))
    return {(True, True): "exact", (True, False): "lower bound", (False, True): "upper bound",
            (False, False): "unknown"}[solved]


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and mean ratio over the seeds with one (censored rows included, as bounds), and
    how many seeds each side solved."""
    ratios = [r["ratio_sb3_over_drlmpi"] for r in rows if r["ratio_sb3_over_drlmpi"] is not None]
    return {"median_ratio": statistics.median(ratios) if ratios else None,
            "mean_ratio": statistics.fmean(ratios) if ratios else None,
            "drlmpi_solved": sum(bool(r["drlmpi"].get("solved")) for r in rows),
            "sb3_solved": sum(bool(r["sb3"].get("solved")) for r in rows), "seeds": len(rows)}


def mark(r: dict[str, Any]) -> str:
    """A side's mark in the table: none when solved, ``+`` when cut by the timeout (or failed)
    before solving (the seconds and steps of its last evaluation), else ``*`` (not solved: the
    budget's)."""
    return "" if r["solved"] else "+" if r.get("partial") else "*"


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The table's lines: per seed, each side's seconds and env steps to the threshold (marked as
    :func:`mark` says when not solved), the ratio (``*``: a bound, ``>=`` before a lower bound,
    ``<=`` before an upper one), and gradient updates per second of update time."""
    def secs(r: dict) -> str:
        return "ERROR" if "error" in r else f"{r['train_seconds']:.1f}" + mark(r)

    def steps(r: dict) -> str:
        if "error" in r:
            return "-"
        return f"{r['env_steps_to_threshold' if r['solved'] else 'env_steps']:,}{mark(r)}"

    def ups(r: dict) -> str:
        ok = "error" not in r and r.get("learn_seconds") and r.get("updates")
        return f"{r['updates'] / r['learn_seconds']:.0f}" if ok else "-"

    header = (f"{'seed':>4} | {'drlmpi s':>9} {'steps':>8} | {'SB3 s':>9} {'steps':>8} | "
              f"{'SB3/drlmpi':>10} | {'upd/s dl':>8} {'sb3':>6}")
    lines = [header, "-" * len(header)]
    for row in rows:
        d, s, ratio = row["drlmpi"], row["sb3"], row["ratio_sb3_over_drlmpi"]
        sign = {"lower bound": ">=", "upper bound": "<="}.get(ratio_kind(row), "")
        text = "-" if ratio is None else sign + f"{ratio:.2f}" + ("*" if row["censored"] else "")
        lines.append(f"{row['seed']:>4} | {secs(d):>9} {steps(d):>8} | {secs(s):>9} {steps(s):>8} | "
                     f"{text:>10} | {ups(d):>8} {ups(s):>6}")
    return lines


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Print the table, the median ratio, what the marks mean and which seeds' ratios are
    bounds (and why: a side not solved, or cut); return :func:`aggregate`'s aggregates."""
    print("\n".join(table(rows)))
    agg = aggregate(rows)
    counted = sum(r["ratio_sb3_over_drlmpi"] is not None for r in rows)
    fmt = "-" if agg["median_ratio"] is None else f"{agg['median_ratio']:.2f} (mean {agg['mean_ratio']:.2f})"
    sides = [r[name] for r in rows for name in ("drlmpi", "sb3") if "error" not in r[name]]
    notes = [note for m, note in (("*", "* = not solved: the budget's seconds/steps"),
                                  ("+", "+ = cut by --timeout (or failed) before solving: the seconds/steps "
                                        "at its last evaluation"))
             if any(mark(r) == m for r in sides)]
    if any(r["censored"] and r["ratio_sb3_over_drlmpi"] is not None for r in rows):
        notes.append("the ratio a bound (>= lower, <= upper)")
    print(f"ratio SB3/drlmpi seconds to threshold: median {fmt} over {counted} seed(s) (>1: drlmpi "
          f"faster); solved: drlmpi {agg['drlmpi_solved']}/{len(rows)}, SB3 {agg['sb3_solved']}/{len(rows)}"
          + "".join(f"; {note}" for note in notes))
    for row in rows:
        kind = ratio_kind(row)
        if kind in ("lower bound", "upper bound", "unknown"):
            cut = [f"{name} {r['cut_by']} at {r['train_seconds']:.1f} training s, {r['env_steps']:,} steps"
                   for name, r in (("drlmpi", row["drlmpi"]), ("SB3", row["sb3"])) if mark(r) == "+"]
            print(f"  seed {row['seed']}: the ratio is {kind}" + "".join(f" ({c})" for c in cut))
    return agg


def run_seeds(seeds: list[int], runners: dict[str, Callable[[int], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Run ``runners["drlmpi"]`` and ``runners["sb3"]`` for each seed, alternating which goes
    first seed by seed (so background load hits both alike); one :func:`pair` row a seed."""
    rows = []
    for i, seed in enumerate(seeds):
        order = ["drlmpi", "sb3"] if i % 2 == 0 else ["sb3", "drlmpi"]
        results = {}
        for name in order:
            results[name] = r = runners[name](seed)
            outcome = r.get("error") or (f"{'solved' if r['solved'] else 'NOT solved'} in "
                                         f"{r['train_seconds']:.1f} s")
            if r.get("partial"):
                outcome += (f" ({r['cut_by']}: at its last of {r['evaluations']} evaluation(s), "
                            "from its progress file)")
            print(f"  seed {seed}: {name}: {outcome}", flush=True)
        rows.append(pair(seed, order, results["drlmpi"], results["sb3"]))
    return rows


def machine(load_before: tuple[float, ...], started: float) -> dict[str, Any]:
    """The host, the versions that decide the SB3 side's speed, the load average around the
    runs and the elapsed seconds."""
    import stable_baselines3
    import torch

    return {"cpu_count": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "stable_baselines3": stable_baselines3.__version__, "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(), "elapsed_s": time.time() - started}
