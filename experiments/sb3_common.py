"""What bench_sb3_dqn.py and bench_sb3_td3.py share (experiments/README.md). Stable-Baselines3 is
imported only inside what its worker and the final JSON call: the rest runs, and is tested, without."""

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
DRLMPI_SUMMARY_FIELDS = ("solved", "train_seconds_to_threshold", "env_steps_to_threshold",
                         "updates_to_threshold", "env_steps", "updates", "eval_seconds", "evaluations",
                         "best_eval_return", "stop_reason")
AT_THRESHOLD = ("train_seconds", "env_steps", "updates", "learn_seconds")
#: drlmpi evaluates episodes seeded from seed + run.eval_seed_offset (its default); SB3 the same
EVAL_SEED_OFFSET = 1_000_000


def parser(description: str, *, budget: int, eval_every: int, eval_episodes: int, threshold: float,
           out: str, timeout: float, extra_help: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--device", default="cpu", help="where both learners run: cpu (default) or cuda")
    p.add_argument("--budget", type=int, default=budget,
                   help=f"env steps per run (default {budget:.0e})".replace("e+0", "e"))
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
    if importlib.util.find_spec("stable_baselines3") is None:
        sys.exit(f'{script}: stable-baselines3 is not installed: pip install -e ".[bench]"')
    if args.sb3_worker:
        worker(args)
    return bool(args.sb3_worker)


def compare(script: str, args: argparse.Namespace, run_drlmpi: Callable[[int, Path], dict[str, Any]],
            run_sb3: Callable[[int, Path], dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix=f"{script}_"))
    load_before, started = os.getloadavg(), time.time()
    try:
        rows = run_seeds(args.seeds, {"drlmpi": lambda seed: run_drlmpi(seed, work),
                                      "sb3": lambda seed: run_sb3(seed, work)})
    finally:
        if not args.keep_runs:
            shutil.rmtree(work, ignore_errors=True)
    return rows, {"machine": machine(load_before, started), "run_dirs": str(work) if args.keep_runs else None}


def finish(args: argparse.Namespace, benchmark: str, settings: dict[str, Any], rows: list[dict[str, Any]],
           host: dict[str, Any], **more: Any) -> int:
    """Print the table and write the whole comparison's JSON (``--out``)."""
    print()
    result = {"benchmark": f"{benchmark}, training seconds to threshold (evaluation excluded)",
              "ratio_definition": "sb3 train_seconds / drlmpi train_seconds (>1: drlmpi faster)",
              "settings": settings, "aggregate": report(rows), "runs": rows, **host, **more}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"results: {args.out}")
    return 0


def run_command(cmd: list[str], timeout: float) -> tuple[dict[str, Any] | None, float]:
    """``(error record or None, seconds)`` of ``cmd`` with one thread, killed whole on a timeout."""
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
        if proc.poll() is None:
            _kill_group(proc)
    if proc.returncode != 0:
        return ({"error": f"exit code {proc.returncode}", "stderr_tail": stderr[-2000:], "command": cmd},
                time.perf_counter() - t0)
    return None, time.perf_counter() - t0


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def drlmpi_overrides(seed: int, run_dir: Path, args: argparse.Namespace) -> list[str]:
    return [f"seed={seed}", f"hydra.run.dir={run_dir}", "run.progress_every_s=0",
            f"run.max_env_steps={args.budget}", f"run.eval_every={args.eval_every}",
            f"run.eval_episodes={args.eval_episodes}", f"env.reward_threshold={args.threshold}",
            "threads_per_rank=1", f"device={args.device}"]


def read_drlmpi_run(run_dir: Path) -> dict[str, Any]:
    """A finished run's fields; ``train_seconds``: to the threshold, else the whole budget's."""
    s = json.loads((run_dir / "summary.json").read_text())
    with open(run_dir / "metrics.csv", newline="") as fh:
        evals = [row for row in csv.DictReader(fh) if row["kind"] == "eval"]
    return {**{k: s[k] for k in DRLMPI_SUMMARY_FIELDS},
            "train_seconds": s["train_seconds_to_threshold"] if s["solved"] else s["train_seconds"],
            "learn_seconds": s["per_rank"][0].get("learn_s"),
            "eval_history": [[int(r["env_steps"]), float(r["train_seconds"]), float(r["return"])]
                             for r in evals], "versions": s.get("versions")}


def run_drlmpi(cmd: list[str], run_dir: Path, timeout: float) -> dict[str, Any]:
    error, seconds = run_command(cmd, timeout)
    if error is not None or not (run_dir / "summary.json").exists():
        return error or {"error": "no summary.json", "command": cmd}
    return {**read_drlmpi_run(run_dir), "process_seconds": seconds, "command": cmd}


def run_sb3(script: str, seed: int, args: argparse.Namespace, work: Path,
            extra: list[str] | None = None) -> dict[str, Any]:
    """``script --sb3-worker``'s JSON, or - cut or failed - :func:`cut_result`'s, or the error."""
    out = work / f"sb3_{seed}.json"
    cmd = [sys.executable, str(Path(script).resolve()), "--sb3-worker", "--seed", str(seed),
           "--budget", str(args.budget), "--eval-every", str(args.eval_every),
           "--eval-episodes", str(args.eval_episodes), "--threshold", str(args.threshold), "--out", str(out),
           "--device", args.device, *(extra or [])]
    error, seconds = run_command(cmd, args.timeout)
    if error is None and out.exists():
        return {**json.loads(out.read_text()), "process_seconds": seconds, "command": cmd}
    error = error or {"error": "no output", "command": cmd}
    return cut_result(progress_path(out), error, seconds) or error


def pair(seed: int, order: list[str], drlmpi: dict[str, Any], sb3: dict[str, Any]) -> dict[str, Any]:
    """One seed's row: the ratio (``None``: a side failed), ``censored`` (then a bound), ``ratio_is``."""
    ok = "error" not in drlmpi and "error" not in sb3
    row = {"seed": seed, "order": order, "drlmpi": drlmpi, "sb3": sb3,
           "ratio_sb3_over_drlmpi": sb3["train_seconds"] / drlmpi["train_seconds"] if ok else None,
           "censored": not (ok and drlmpi["solved"] and sb3["solved"])}
    return {**row, "ratio_is": ratio_kind(row)}


def ratio_kind(row: dict[str, Any]) -> str:
    if row["ratio_sb3_over_drlmpi"] is None:
        return "none"
    kinds = {(True, True): "exact", (True, False): "lower bound", (False, True): "upper bound"}
    return kinds.get((bool(row["drlmpi"]["solved"]), bool(row["sb3"]["solved"])), "unknown")


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["ratio_sb3_over_drlmpi"] for r in rows if r["ratio_sb3_over_drlmpi"] is not None]
    return {"median_ratio": statistics.median(ratios) if ratios else None,
            "mean_ratio": statistics.fmean(ratios) if ratios else None,
            "drlmpi_solved": sum(bool(r["drlmpi"].get("solved")) for r in rows),
            "sb3_solved": sum(bool(r["sb3"].get("solved")) for r in rows), "seeds": len(rows)}


def mark(r: dict[str, Any]) -> str:
    return "" if r["solved"] else "+" if r.get("partial") else "*"


def table(rows: list[dict[str, Any]]) -> list[str]:
    def secs(r: dict) -> str:
        return "ERROR" if "error" in r else f"{r['train_seconds']:.1f}" + mark(r)

    def steps(r: dict) -> str:
        key = "env_steps_to_threshold" if r.get("solved") else "env_steps"
        return "-" if "error" in r else f"{r[key]:,}{mark(r)}"

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
    rows = []
    for i, seed in enumerate(seeds):
        order = ["drlmpi", "sb3"] if i % 2 == 0 else ["sb3", "drlmpi"]
        results = {}
        for name in order:
            results[name] = r = runners[name](seed)
            outcome = r.get("error") or f"{'' if r['solved'] else 'NOT '}solved in {r['train_seconds']:.1f} s"
            if r.get("partial"):
                outcome += (f" ({r['cut_by']}: at its last of {r['evaluations']} evaluation(s), "
                            "from its progress file)")
            print(f"  seed {seed}: {name}: {outcome}", flush=True)
        rows.append(pair(seed, order, results["drlmpi"], results["sb3"]))
    return rows


def machine(load_before: tuple[float, ...], started: float) -> dict[str, Any]:
    import stable_baselines3
    import torch
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "stable_baselines3": stable_baselines3.__version__, "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(), "elapsed_s": time.time() - started}


def progress_path(out: Path) -> Path:
    return Path(f"{out}.progress.jsonl")


def append_evaluation(path: Path, evaluation: dict[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(evaluation) + "\n")


def read_progress(path: Path) -> list[dict[str, Any]]:
    evaluations = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(json.JSONDecodeError):
            evaluations.append(json.loads(line))
    return evaluations


def cut_result(path: Path, error: dict[str, Any], seconds: float) -> dict[str, Any] | None:
    """A run cut short, from its progress file (``None``: no evaluation): its counts at the last
    evaluation, not solved unless one had reached the threshold; ``partial``, ``cut_by``."""
    evaluations = read_progress(path)
    if not evaluations:
        return None
    last = evaluations[-1]
    at = next((e for e in evaluations if e.get("solved")), None)
    returns = [e["return"] for e in evaluations]
    return {"solved": at is not None, **{f"{k}_to_threshold": (at or {}).get(k) for k in AT_THRESHOLD},
        "train_seconds": (at or last)["train_seconds"], "env_steps": last["env_steps"],
        "updates": last.get("updates"), "learn_seconds": last.get("learn_seconds"),
        "eval_seconds": last.get("eval_seconds"), "evaluations": len(evaluations),
        "best_eval_return": max(returns), "last_eval_return": returns[-1],
        "eval_history": [[e["env_steps"], round(e["train_seconds"], 4), e["return"]] for e in evaluations],
        "partial": True, "timed_out": bool(error.get("timed_out")), "cut_by": error["error"],
        "stderr_tail": error.get("stderr_tail", ""), "process_seconds": seconds,
        "command": error.get("command")}


def threshold_timer(args: argparse.Namespace, env_id: str, env_action: Callable[[Any], Any]) -> Any:
    """An SB3 callback: the clock without evaluation, a greedy evaluation per ``args.eval_every`` env
    steps (seeded as drlmpi's), each appended to the progress file, learning stopped at the threshold."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    class ThresholdTimer(BaseCallback):
        def __init__(self) -> None:
            super().__init__(verbose=0)
            self.eval_env = gym.make(env_id)
            self.start = self.paused_s = self.learn_s = 0.0
            self.next_eval, self.evaluations = args.eval_every, 0
            self.best_eval = self.last_eval = self.solved_at = None
            self.history = []  # [env_steps, train_seconds, mean return]
            self.progress = progress_path(args.out)
            self.progress.unlink(missing_ok=True)  # a rerun into the same --out starts afresh

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
            self.evaluations, mean = self.evaluations + 1, float(np.mean(returns))
            self.last_eval = mean
            self.best_eval = mean if self.best_eval is None else max(self.best_eval, mean)
            self.history.append([self.num_timesteps, round(train_s, 4), mean])
            counts = {"env_steps": self.num_timesteps, "train_seconds": train_s,
                      "updates": getattr(self.model, "_n_updates", None), "learn_seconds": self.learn_s}
            if mean >= args.threshold:
                self.solved_at = dict(counts)
            paused = self.paused_s + time.perf_counter() - t0
            append_evaluation(self.progress, {"evaluation": self.evaluations, **counts,
                                              "eval_seconds": paused, "return": mean,
                                              "solved": self.solved_at is not None})
            self.paused_s += time.perf_counter() - t0  # the line's writing is off the clock too

        def _on_rollout_start(self) -> None:  # after a rollout and its updates: where drlmpi evaluates
            self.maybe_evaluate()

        def _on_step(self) -> bool:
            return self.solved_at is None

        def _on_training_end(self) -> None:
            self.maybe_evaluate()  # the budget ran out right after a training burst

    return ThresholdTimer()


def learn_timed(model: Any, timer: Any, budget: int) -> None:
    inner_train = model.train

    def timed_train(*a: Any, **kw: Any) -> None:
        t0 = time.perf_counter()
        inner_train(*a, **kw)
        timer.learn_s += time.perf_counter() - t0

    model.train = timed_train  # type: ignore[method-assign]
    model.learn(total_timesteps=budget, callback=timer)


def sb3_result(model: Any, timer: Any, seed: int, extra: dict[str, Any]) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch

    solved = timer.solved_at or {}
    return {"solved": bool(solved), **{f"{k}_to_threshold": solved.get(k) for k in AT_THRESHOLD},
        "train_seconds": solved.get("train_seconds", time.perf_counter() - timer.start - timer.paused_s),
        "env_steps": model.num_timesteps, "updates": model._n_updates, "learn_seconds": timer.learn_s,
        "eval_seconds": timer.paused_s, "evaluations": timer.evaluations,
        "best_eval_return": timer.best_eval, "last_eval_return": timer.last_eval,
        "eval_history": timer.history, **extra, "seed": seed,
        "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
                     "gymnasium": gym.__version__, "numpy": np.__version__}}
