"""Wall-clock to CartPole-v1's reward threshold: drlmpi's sequential DQN vs Stable-Baselines3 DQN.

    pip install -e ".[bench]"                      # stable-baselines3
    python experiments/bench_sb3_dqn.py            # seeds 0 1 2, budget 1e5 env steps

For each seed, each in a cold subprocess with ONE torch thread: drlmpi (``python -m drlmpi
seed=S ...``, sequential DQN with conf/tuned/dqn_cartpole.yaml, read from summary.json) and SB3's
``DQN`` with rl-baselines3-zoo's CartPole-v1 hyperparameters (this script re-invoked with
``--sb3-worker``, timed by a callback). The frameworks alternate seed by seed (the order too).
Both use the same threshold, budget and evaluation points: after the 256-step chunk and its 128
updates that pass each multiple of ``--eval-every``; evaluation is taken off both clocks.
``ratio = SB3 seconds / drlmpi seconds`` to the threshold (> 1: drlmpi faster); a run that does
not solve counts with its whole budget's seconds (marked ``*``: the ratio is then a bound).
experiments/README.md describes the output (a table and ``--out``, a JSON of every field).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_ID = "CartPole-v1"
# rl-baselines3-zoo, hyperparams/dqn.yml, "CartPole-v1": exploration over 16% of its 5e4 steps.
ZOO_N_TIMESTEPS, ZOO_EXPLORATION_FRACTION = 50_000, 0.16
ZOO_DQN_CARTPOLE: dict[str, Any] = {
    "policy": "MlpPolicy", "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000,
    "learning_starts": 1000, "gamma": 0.99, "target_update_interval": 10, "train_freq": 256,
    "gradient_steps": 128, "exploration_final_eps": 0.04, "policy_kwargs": {"net_arch": [256, 256]},
}
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def sb3_worker(args: argparse.Namespace) -> None:
    """Train SB3 DQN with the zoo hyperparameters until solved or out of budget; write JSON."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)

    class ThresholdTimer(BaseCallback):
        """Training clock with evaluation taken out; stops learning at the threshold."""

        def __init__(self) -> None:
            super().__init__(verbose=0)
            self.eval_env = gym.make(ENV_ID)
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
                first = args.seed + 1_000_000 + self.evaluations * args.eval_episodes
                obs, _ = self.eval_env.reset(seed=first + k)
                total, done = 0.0, False
                while not done:
                    action, _ = self.model.predict(obs, deterministic=True)
                    obs, reward, terminated, truncated, _ = self.eval_env.step(int(action))
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
            # After the previous rollout's burst of gradient steps: where drlmpi's sequential
            # loop evaluates.
            self.maybe_evaluate()

        def _on_step(self) -> bool:
            return self.solved_at is None

        def _on_training_end(self) -> None:
            self.maybe_evaluate()  # the budget ran out right after a training burst

    model = DQN(env=gym.make(ENV_ID), seed=args.seed, device=args.device, verbose=0,
                exploration_fraction=ZOO_EXPLORATION_FRACTION * ZOO_N_TIMESTEPS / args.budget,
                **ZOO_DQN_CARTPOLE)
    timer = ThresholdTimer()
    inner_train = model.train

    def timed_train(*a: Any, **kw: Any) -> None:
        t0 = time.perf_counter()
        inner_train(*a, **kw)
        timer.learn_s += time.perf_counter() - t0

    model.train = timed_train  # type: ignore[method-assign]
    model.learn(total_timesteps=args.budget, callback=timer)
    solved = timer.solved_at or {}
    result = {
        "solved": timer.solved_at is not None,
        **{f"{k}_to_threshold": solved.get(k)
           for k in ("train_seconds", "env_steps", "updates", "learn_seconds")},
        "train_seconds": solved.get("train_seconds", time.perf_counter() - timer.start - timer.paused_s),
        "env_steps": model.num_timesteps, "updates": model._n_updates, "learn_seconds": timer.learn_s,
        "eval_seconds": timer.paused_s, "evaluations": timer.evaluations,
        "best_eval_return": timer.best_eval, "last_eval_return": timer.last_eval,
        "eval_history": timer.history, "exploration_fraction": model.exploration_fraction,
        "hyperparameters": ZOO_DQN_CARTPOLE, "seed": args.seed,
        "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
                     "gymnasium": gym.__version__, "numpy": np.__version__},
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")


def run(cmd: list[str], timeout: float) -> tuple[dict[str, Any] | None, float]:
    """Run a subprocess with one BLAS/torch thread; ``(error record or None, seconds)``."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env={**os.environ, **ONE_THREAD_ENV}, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return {"error": f"timed out after {timeout} s", "stderr_tail": err[-2000:], "command": cmd}, timeout
    if proc.returncode != 0:
        error = {"error": f"exit code {proc.returncode}", "stderr_tail": proc.stderr[-2000:], "command": cmd}
        return error, time.perf_counter() - t0
    return None, time.perf_counter() - t0


def run_drlmpi(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One drlmpi run; the summary fields this benchmark needs."""
    run_dir = work / f"drlmpi_{seed}"
    cmd = [sys.executable, "-m", "drlmpi", f"seed={seed}", f"hydra.run.dir={run_dir}",
           "run.progress_every_s=0", f"run.max_env_steps={args.budget}", f"run.eval_every={args.eval_every}",
           f"run.eval_episodes={args.eval_episodes}", f"env.reward_threshold={args.threshold}",
           "threads_per_rank=1", f"device={args.device}", *args.drlmpi_extra]
    error, seconds = run(cmd, args.timeout)
    if error is not None or not (run_dir / "summary.json").exists():
        return error or {"error": "no summary.json", "command": cmd}
    s = json.loads((run_dir / "summary.json").read_text())
    with open(run_dir / "metrics.csv", newline="") as fh:
        evals = [row for row in csv.DictReader(fh) if row["kind"] == "eval"]
    return {**{k: s[k] for k in ("solved", "train_seconds_to_threshold", "env_steps_to_threshold",
                                 "updates_to_threshold", "env_steps", "updates", "eval_seconds",
                                 "evaluations", "best_eval_return", "stop_reason")},
            "train_seconds": s["train_seconds_to_threshold"] if s["solved"] else s["train_seconds"],
            "learn_seconds": s["per_rank"][0].get("learn_s"),
            "eval_history": [[int(r["env_steps"]), float(r["train_seconds"]), float(r["return"])]
                             for r in evals],
            "process_seconds": seconds, "versions": s.get("versions"), "command": cmd}


def run_sb3(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One SB3 run: this script re-invoked with ``--sb3-worker`` in a fresh process."""
    out = work / f"sb3_{seed}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--sb3-worker", "--seed", str(seed),
           "--budget", str(args.budget), "--eval-every", str(args.eval_every),
           "--eval-episodes", str(args.eval_episodes), "--threshold", str(args.threshold), "--out", str(out),
           "--device", args.device]
    error, seconds = run(cmd, args.timeout)
    if error is not None or not out.exists():
        return error or {"error": "no output", "command": cmd}
    return {**json.loads(out.read_text()), "process_seconds": seconds, "command": cmd}


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Print the table; return the aggregates."""
    def secs(r: dict) -> str:
        return "ERROR" if "error" in r else f"{r['train_seconds']:.1f}" + ("" if r["solved"] else "*")

    def steps(r: dict) -> str:
        return "-" if "error" in r else f"{r['env_steps_to_threshold' if r['solved'] else 'env_steps']:,}" + (
            "" if r["solved"] else "*")

    def ups(r: dict) -> str:  # gradient updates per second spent updating
        ok = "error" not in r and r.get("learn_seconds") and r.get("updates")
        return f"{r['updates'] / r['learn_seconds']:.0f}" if ok else "-"

    header = (f"{'seed':>4} | {'drlmpi s':>9} {'steps':>8} | {'SB3 s':>9} {'steps':>8} | "
              f"{'SB3/drlmpi':>10} | {'upd/s dl':>8} {'sb3':>6}")
    print(header + "\n" + "-" * len(header))
    ratios = []
    for row in rows:
        d, s, ratio = row["drlmpi"], row["sb3"], row["ratio_sb3_over_drlmpi"]
        if ratio is not None:
            ratios.append(ratio)
        text = "-" if ratio is None else f"{ratio:.2f}" + ("*" if row["censored"] else "")
        print(f"{row['seed']:>4} | {secs(d):>9} {steps(d):>8} | {secs(s):>9} {steps(s):>8} | {text:>10} | "
              f"{ups(d):>8} {ups(s):>6}")
    agg = {"median_ratio": statistics.median(ratios) if ratios else None,
           "mean_ratio": statistics.fmean(ratios) if ratios else None,
           "drlmpi_solved": sum(bool(r["drlmpi"].get("solved")) for r in rows),
           "sb3_solved": sum(bool(r["sb3"].get("solved")) for r in rows), "seeds": len(rows)}
    fmt = "-" if agg["median_ratio"] is None else f"{agg['median_ratio']:.2f} (mean {agg['mean_ratio']:.2f})"
    censored = any(r["censored"] for r in rows)
    print(f"ratio SB3/drlmpi seconds to threshold: median {fmt} over {len(ratios)} seed(s) (>1: drlmpi "
          f"faster); solved: drlmpi {agg['drlmpi_solved']}/{len(rows)}, SB3 {agg['sb3_solved']}/{len(rows)}"
          + ("; * = not solved: the budget's seconds/steps, the ratio a bound" if censored else ""))
    return agg


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--device", default="cpu",
                   help="where both learners run: cpu (default) or cuda (drlmpi's device learner, "
                        "SB3's GPU policy)")
    p.add_argument("--budget", type=int, default=100_000, help="env steps per run (default 1e5)")
    p.add_argument("--eval-every", type=int, default=2000, help="env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, default=10, help="greedy episodes per evaluation")
    p.add_argument("--threshold", type=float, default=475.0, help="greedy mean return that solves")
    p.add_argument("--out", type=Path, default=Path("outputs/bench_sb3_dqn.json"), help="JSON results file")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run before it is killed")
    p.add_argument("--keep-runs", action="store_true", help="keep the drlmpi run directories")
    p.add_argument("--drlmpi-extra", nargs="*", default=[], metavar="KEY=VALUE",
                   help="extra drlmpi overrides, e.g. algo.double_q=false for SB3's plain DQN target")
    p.add_argument("--sb3-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if importlib.util.find_spec("stable_baselines3") is None:
        sys.exit('bench_sb3_dqn: stable-baselines3 is not installed: pip install -e ".[bench]"')
    if args.sb3_worker:
        sb3_worker(args)
        return 0
    import stable_baselines3
    import torch

    work = Path(tempfile.mkdtemp(prefix="bench_sb3_dqn_"))
    print(f"drlmpi sequential DQN vs SB3 DQN (zoo) on {ENV_ID}: seeds {args.seeds}, budget "
          f"{args.budget:,} steps, eval every {args.eval_every} ({args.eval_episodes} episodes), "
          f"threshold {args.threshold:g}", flush=True)
    load_before, started = os.getloadavg(), time.time()
    rows = []
    try:
        for i, seed in enumerate(args.seeds):
            order = ["drlmpi", "sb3"] if i % 2 == 0 else ["sb3", "drlmpi"]
            results = {}
            for name in order:
                results[name] = r = (run_drlmpi if name == "drlmpi" else run_sb3)(seed, args, work)
                outcome = r.get("error") or (f"{'solved' if r['solved'] else 'NOT solved'} in "
                                             f"{r['train_seconds']:.1f} s")
                print(f"  seed {seed}: {name}: {outcome}", flush=True)
            d, s = results["drlmpi"], results["sb3"]
            ok = "error" not in d and "error" not in s
            rows.append({"seed": seed, "order": order, "drlmpi": d, "sb3": s,
                         "ratio_sb3_over_drlmpi": s["train_seconds"] / d["train_seconds"] if ok else None,
                         "censored": not (ok and d["solved"] and s["solved"])})
    finally:
        if not args.keep_runs:
            shutil.rmtree(work, ignore_errors=True)
    print()
    result = {
        "benchmark": f"drlmpi sequential DQN vs stable-baselines3 DQN (rl-baselines3-zoo), {ENV_ID}, "
                     "training seconds to threshold (evaluation excluded)",
        "ratio_definition": "sb3 train_seconds / drlmpi train_seconds (>1: drlmpi faster)",
        "settings": {**{k: getattr(args, k) for k in ("seeds", "device", "budget", "eval_every",
                                                      "eval_episodes", "threshold", "drlmpi_extra")},
                     "sb3_hyperparameters": ZOO_DQN_CARTPOLE},
        "aggregate": report(rows), "runs": rows,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "stable_baselines3": stable_baselines3.__version__, "loadavg_before": load_before,
                    "loadavg_after": os.getloadavg(), "elapsed_s": time.time() - started},
        "run_dirs": str(work) if args.keep_runs else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
