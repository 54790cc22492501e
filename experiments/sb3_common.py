"""What the Stable-Baselines3 comparisons (bench_sb3_dqn.py, bench_sb3_td3.py) share.

Both time drlmpi and SB3 to a greedy-evaluation threshold, each run in a cold subprocess with one
BLAS/torch thread, evaluation taken off both clocks, and compare ``ratio = SB3 seconds / drlmpi
seconds``. Here: the options they share, the loop over seeds and the JSON, running a
subprocess, reading a drlmpi run directory, one seed's pair of runs and its ratio, the table and
its aggregates, and the SB3 side's clock (a callback that evaluates at the same cadence as drlmpi
and stops learning at the threshold). Stable-Baselines3 is imported only inside the functions the
SB3 side and the final JSON call, so the rest runs (and is tested) without it.
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

REPO_ROOT = Path(__file__).resolve().parent.parent
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
#: drlmpi evaluates episodes seeded from seed + run.eval_seed_offset (its default); SB3 the same
EVAL_SEED_OFFSET = 1_000_000
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
    interrupt of this script), so an ``mpiexec`` job leaves no rank behind."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env={**os.environ, **ONE_THREAD_ENV}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _, stderr = proc.communicate()
        return {"error": f"timed out after {timeout} s", "stderr_tail": (stderr or "")[-2000:],
                "command": cmd}, timeout
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
    process; what the worker wrote, its process's seconds and the command, or an error record."""
    out = work / f"sb3_{seed}.json"
    cmd = [sys.executable, str(Path(script).resolve()), "--sb3-worker", "--seed", str(seed),
           "--budget", str(args.budget), "--eval-every", str(args.eval_every),
           "--eval-episodes", str(args.eval_episodes), "--threshold", str(args.threshold), "--out", str(out),
           "--device", args.device, *(extra or [])]
    error, seconds = run_command(cmd, args.timeout)
    if error is not None or not out.exists():
        return error or {"error": "no output", "command": cmd}
    return {**json.loads(out.read_text()), "process_seconds": seconds, "command": cmd}


# -- one seed's pair and the table ----------------------------------------------------------------
def pair(seed: int, order: list[str], drlmpi: dict[str, Any], sb3: dict[str, Any]) -> dict[str, Any]:
    """One seed's row: both results, ``ratio_sb3_over_drlmpi`` (``None`` if a side failed) and
    ``censored`` (a side failed or did not solve: its seconds are the budget's, the ratio a
    bound)."""
    ok = "error" not in drlmpi and "error" not in sb3
    return {"seed": seed, "order": order, "drlmpi": drlmpi, "sb3": sb3,
            "ratio_sb3_over_drlmpi": sb3["train_seconds"] / drlmpi["train_seconds"] if ok else None,
            "censored": not (ok and drlmpi["solved"] and sb3["solved"])}


def ratio_kind(row: dict[str, Any]) -> str:
    """What a row's ratio is: ``exact`` (both solved), ``lower bound`` (only drlmpi solved: SB3
    would have needed more than its budget's seconds), ``upper bound`` (only SB3 solved),
    ``unknown`` (neither solved) or ``none`` (a side failed)."""
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


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The table's lines: per seed, each side's seconds and env steps to the threshold (``*``:
    not solved, the budget's), the ratio, and gradient updates per second of update time."""
    def secs(r: dict) -> str:
        return "ERROR" if "error" in r else f"{r['train_seconds']:.1f}" + ("" if r["solved"] else "*")

    def steps(r: dict) -> str:
        return "-" if "error" in r else f"{r['env_steps_to_threshold' if r['solved'] else 'env_steps']:,}" + (
            "" if r["solved"] else "*")

    def ups(r: dict) -> str:
        ok = "error" not in r and r.get("learn_seconds") and r.get("updates")
        return f"{r['updates'] / r['learn_seconds']:.0f}" if ok else "-"

    header = (f"{'seed':>4} | {'drlmpi s':>9} {'steps':>8} | {'SB3 s':>9} {'steps':>8} | "
              f"{'SB3/drlmpi':>10} | {'upd/s dl':>8} {'sb3':>6}")
    lines = [header, "-" * len(header)]
    for row in rows:
        d, s, ratio = row["drlmpi"], row["sb3"], row["ratio_sb3_over_drlmpi"]
        text = "-" if ratio is None else f"{ratio:.2f}" + ("*" if row["censored"] else "")
        lines.append(f"{row['seed']:>4} | {secs(d):>9} {steps(d):>8} | {secs(s):>9} {steps(s):>8} | "
                     f"{text:>10} | {ups(d):>8} {ups(s):>6}")
    return lines


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Print the table and the median ratio; return :func:`aggregate`'s aggregates."""
    print("\n".join(table(rows)))
    agg = aggregate(rows)
    counted = sum(r["ratio_sb3_over_drlmpi"] is not None for r in rows)
    fmt = "-" if agg["median_ratio"] is None else f"{agg['median_ratio']:.2f} (mean {agg['mean_ratio']:.2f})"
    censored = any(r["censored"] for r in rows)
    print(f"ratio SB3/drlmpi seconds to threshold: median {fmt} over {counted} seed(s) (>1: drlmpi "
          f"faster); solved: drlmpi {agg['drlmpi_solved']}/{len(rows)}, SB3 {agg['sb3_solved']}/{len(rows)}"
          + ("; * = not solved: the budget's seconds/steps, the ratio a bound" if censored else ""))
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


# -- the SB3 worker's clock ------------------------------------------------------------------------
def threshold_timer(args: argparse.Namespace, env_id: str, env_action: Callable[[Any], Any]) -> Any:
    """An SB3 callback: the training clock with evaluation taken out, a greedy evaluation of
    ``args.eval_episodes`` episodes once per ``args.eval_every`` env steps (seeded as drlmpi
    seeds its own), and learning stopped once the mean reaches ``args.threshold``.
    ``env_action`` turns ``model.predict``'s action into the environment's."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    class ThresholdTimer(BaseCallback):
        """Training clock with evaluation taken out; stops learning at the threshold."""

        def __init__(self) -> None:
            super().__init__(verbose=0)
            self.eval_env = gym.make(env_id)
            self.start = self.paused_s = self.learn_s = 0.0
            self.next_eval, self.evaluations = args.eval_every, 0
            self.best_eval: float | None = None
            self.last_eval: float | None = None
            self.solved_at: dict[str, float] | None = None
            self.history: list[list[float]] = []  # [env_steps, train_seconds, mean return]

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def maybe_evaluate(self) -> None:
            if self.num_timesteps < self.next_eval or self.solved_at is not None:
                return
            while self.next_eval <= self.num_timesteps:
                self.next_eval += args.eval_every
            t0 = time.perf_counter()
            train_s = t0 - self.start - self.paused_s  # the clock stops before evaluating
            returns = []
            for k in range(args.eval_episodes):
                first = args.seed + EVAL_SEED_OFFSET + self.evaluations * args.eval_episodes
                obs, _ = self.eval_env.reset(seed=first + k)
                total, done = 0.0, False
                while not done:
                    action, _ = self.model.predict(obs, deterministic=True)
                    obs, reward, terminated, truncated, _ = self.eval_env.step(env_action(action))
                    total, done = total + float(reward), terminated or truncated
                returns.append(total)
            self.evaluations += 1
            mean = float(np.mean(returns))
            self.last_eval = mean
            self.best_eval = mean if self.best_eval is None else max(self.best_eval, mean)
            self.history.append([self.num_timesteps, round(train_s, 4), mean])
            if mean >= args.threshold:
                self.solved_at = {"train_seconds": train_s, "env_steps": self.num_timesteps,
                                  "updates": self.model._n_updates, "learn_seconds": self.learn_s}
            self.paused_s += time.perf_counter() - t0

        def _on_rollout_start(self) -> None:
            # After the previous rollout and its gradient steps: where drlmpi's loop evaluates.
            self.maybe_evaluate()

        def _on_step(self) -> bool:
            return self.solved_at is None

        def _on_training_end(self) -> None:
            self.maybe_evaluate()  # the budget ran out right after a training burst

    return ThresholdTimer()


def learn_timed(model: Any, timer: Any, budget: int) -> None:
    """``model.learn`` for ``budget`` env steps under ``timer``, which also sums the seconds
    spent in gradient steps (``timer.learn_s``)."""
    inner_train = model.train

    def timed_train(*a: Any, **kw: Any) -> None:
        t0 = time.perf_counter()
        inner_train(*a, **kw)
        timer.learn_s += time.perf_counter() - t0

    model.train = timed_train  # type: ignore[method-assign]
    model.learn(total_timesteps=budget, callback=timer)


def sb3_result(model: Any, timer: Any, seed: int, extra: dict[str, Any]) -> dict[str, Any]:
    """The SB3 worker's JSON: the time to the threshold (or the whole budget's time), counts,
    the evaluation history, ``extra`` (the hyperparameters...), the seed and the versions."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch

    solved = timer.solved_at or {}
    return {
        "solved": timer.solved_at is not None,
        **{f"{k}_to_threshold": solved.get(k)
           for k in ("train_seconds", "env_steps", "updates", "learn_seconds")},
        "train_seconds": solved.get("train_seconds", time.perf_counter() - timer.start - timer.paused_s),
        "env_steps": model.num_timesteps, "updates": model._n_updates, "learn_seconds": timer.learn_s,
        "eval_seconds": timer.paused_s, "evaluations": timer.evaluations,
        "best_eval_return": timer.best_eval, "last_eval_return": timer.last_eval,
        "eval_history": timer.history, **extra, "seed": seed,
        "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
                     "gymnasium": gym.__version__, "numpy": np.__version__},
    }
