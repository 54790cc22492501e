"""Wall-clock to CartPole-v1's reward threshold: drlmpi's sequential DQN vs Stable-Baselines3 DQN.

Run from the repository root (needs the ``bench`` extra: ``pip install -e ".[bench]"``)::

    python experiments/bench_sb3_dqn.py                    # seeds 0 1 2, budget 1e5 env steps
    python experiments/bench_sb3_dqn.py --seeds 0 1 2 3 4 --out experiments/results/my.json

For every seed it runs, each in its own cold subprocess with ONE torch thread,

* drlmpi: ``python -m drlmpi seed=S hydra.run.dir=<tmp>/drlmpi_S run.progress_every_s=0``
  (sequential topology, DQN with ``conf/tuned/dqn_cartpole.yaml``), reading ``summary.json``;
* SB3: ``stable_baselines3.DQN`` with rl-baselines3-zoo's ``hyperparams/dqn.yml`` entry for
  CartPole-v1 (MlpPolicy net_arch [256, 256], lr 2.3e-3, batch 64, buffer 100000,
  learning_starts 1000, gamma 0.99, target_update_interval 10, train_freq 256,
  gradient_steps 128, exploration_fraction 0.16 of the zoo's n_timesteps 5e4 = 8000 steps,
  exploration_final_eps 0.04), timed by a callback (this script re-invoked with
  ``--sb3-worker``).

The two frameworks alternate seed by seed (and which goes first alternates too), so load from
other work on the machine hits both alike. Both use the same threshold (greedy mean of
``--eval-episodes`` episodes >= ``--threshold``), the same evaluation points and the same budget,
and both take evaluation time off the training clock.

Evaluation points: drlmpi's sequential loop collects 256-step chunks, trains on them, then
evaluates once the step count has passed the next multiple of ``--eval-every`` (2048, 4096, ...
for 2000). The SB3 callback evaluates at the same place - at the start of the first rollout
whose step count has passed the next multiple, i.e. after that burst of 128 gradient steps - so
both judge a policy that has seen the same data and the same number of updates.

``ratio = SB3 seconds / drlmpi seconds`` (training wall-clock to threshold, evaluation
excluded): above 1 means drlmpi reached the threshold faster, below 1 means SB3 did. A run that
does not solve within the budget counts with the seconds it spent on the whole budget and is
flagged ``(unsolved)``; the ratio of such a seed is a bound, not a measurement.

Results: a table on stdout and a JSON (``--out``, default
``experiments/results/bench_sb3_dqn.json``) with every per-seed field.
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
DEFAULT_OUT = REPO_ROOT / "experiments" / "results" / "bench_sb3_dqn.json"
ENV_ID = "CartPole-v1"

# rl-baselines3-zoo, hyperparams/dqn.yml, "CartPole-v1" (the "Almost Tuned" entry).
ZOO_N_TIMESTEPS = 50_000
ZOO_EXPLORATION_FRACTION = 0.16
ZOO_DQN_CARTPOLE: dict[str, Any] = {
    "policy": "MlpPolicy",
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}

ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------------------------
# SB3 side (runs in a subprocess: ``--sb3-worker``)
# ---------------------------------------------------------------------------------------------
def sb3_worker(seed: int, budget: int, eval_every: int, eval_episodes: int, threshold: float,
               out: Path) -> None:
    """Train SB3 DQN with the zoo hyperparameters until solved or out of budget; write JSON."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)

    def greedy_returns(model: DQN, env: gym.Env, episodes: int, first_seed: int) -> np.ndarray:
        returns = []
        for k in range(episodes):
            obs, _ = env.reset(seed=first_seed + k)
            total, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = env.step(int(action))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
        return np.asarray(returns)

    class ThresholdTimer(BaseCallback):
        """Training clock with evaluation taken out; stops learning at the threshold."""

        def __init__(self) -> None:
            super().__init__(verbose=0)
            self.eval_env = gym.make(ENV_ID)
            self.start = 0.0
            self.paused_s = 0.0
            self.next_eval = eval_every
            self.evaluations = 0
            self.best_eval: float | None = None
            self.last_eval: float | None = None
            self.solved_at: dict[str, float] | None = None
            self.stop = False
            self.history: list[list[float]] = []  # [env_steps, train_seconds, mean return]
            self.learn_s = 0.0  # time inside DQN.train (gradient updates)

        def elapsed(self) -> float:
            return time.perf_counter() - self.start - self.paused_s

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def maybe_evaluate(self) -> None:
            if self.num_timesteps < self.next_eval or self.solved_at is not None:
                return
            while self.next_eval <= self.num_timesteps:
                self.next_eval += eval_every
            t0 = time.perf_counter()
            train_s = t0 - self.start - self.paused_s  # clock stopped before evaluating
            returns = greedy_returns(self.model, self.eval_env, eval_episodes,
                                     seed + 1_000_000 + self.evaluations * eval_episodes)
            self.evaluations += 1
            mean = float(returns.mean())
            self.last_eval = mean
            self.best_eval = mean if self.best_eval is None else max(self.best_eval, mean)
            self.history.append([self.num_timesteps, round(train_s, 4), mean])
            if mean >= threshold:
                self.solved_at = {"train_seconds": train_s, "env_steps": self.num_timesteps,
                                  "updates": self.model._n_updates, "learn_seconds": self.learn_s}
                self.stop = True
            self.paused_s += time.perf_counter() - t0

        def _on_rollout_start(self) -> None:
            # Called after the previous rollout's burst of gradient steps: the same point in the
            # collect/train cycle where drlmpi's sequential loop evaluates.
            self.maybe_evaluate()

        def _on_step(self) -> bool:
            return not self.stop

        def _on_training_end(self) -> None:
            self.maybe_evaluate()  # the budget ran out right after a training burst

    env = gym.make(ENV_ID)
    model = DQN(env=env, seed=seed, device="cpu", verbose=0,
                exploration_fraction=ZOO_EXPLORATION_FRACTION * ZOO_N_TIMESTEPS / budget,
                **ZOO_DQN_CARTPOLE)
    timer = ThresholdTimer()
    inner_train = model.train

    def timed_train(*args: Any, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        inner_train(*args, **kwargs)
        timer.learn_s += time.perf_counter() - t0

    model.train = timed_train  # type: ignore[method-assign]
    model.learn(total_timesteps=budget, callback=timer)
    total_train_s = timer.elapsed()
    solved = timer.solved_at
    result = {
        "solved": solved is not None,
        "train_seconds_to_threshold": solved["train_seconds"] if solved else None,
        "env_steps_to_threshold": solved["env_steps"] if solved else None,
        "updates_to_threshold": solved["updates"] if solved else None,
        "learn_seconds_to_threshold": solved["learn_seconds"] if solved else None,
        "train_seconds": solved["train_seconds"] if solved else total_train_s,
        "env_steps": model.num_timesteps,
        "updates": model._n_updates,
        "learn_seconds": timer.learn_s,
        "eval_seconds": timer.paused_s,
        "evaluations": timer.evaluations,
        "best_eval_return": timer.best_eval,
        "last_eval_return": timer.last_eval,
        "eval_history": timer.history,
        "exploration_fraction": model.exploration_fraction,
        "hyperparameters": ZOO_DQN_CARTPOLE,
        "seed": seed,
        "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
                     "gymnasium": gym.__version__, "numpy": np.__version__},
        "torch_threads": torch.get_num_threads(),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# Orchestration
# ---------------------------------------------------------------------------------------------
def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(ONE_THREAD_ENV)
    return env


def _tail(text: str | bytes | None, n: int = 2000) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return text[-n:]


def drlmpi_eval_rows(run_dir: Path) -> list[dict[str, str]]:
    """The ``kind=eval`` rows of a drlmpi run's ``metrics.csv`` (empty if it is missing)."""
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return [row for row in csv.DictReader(fh) if row["kind"] == "eval"]


def drlmpi_eval_leak(eval_rows: list[dict[str, str]], summary: dict[str, Any]) -> float | None:
    """Seconds of the solving evaluation that drlmpi's ``train_seconds_to_threshold`` includes.

    ``Learner.maybe_evaluate`` reads the clock for ``solved_at`` before adding that
    evaluation's own duration to the paused time. From ``metrics.csv``'s last eval row
    (``wall - train`` = pauses before it) and ``summary.eval_seconds`` (all pauses) the
    duration of that last evaluation is recovered.
    """
    if not summary.get("solved") or not eval_rows:
        return None
    last = eval_rows[-1]
    paused_before = float(last["wall_seconds"]) - float(last["train_seconds"])
    return max(0.0, float(summary["eval_seconds"]) - paused_before)


def run_drlmpi(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One drlmpi run in a subprocess; the fields of its summary this benchmark needs."""
    run_dir = work / f"drlmpi_{seed}"
    cmd = [sys.executable, "-m", "drlmpi", f"seed={seed}", f"hydra.run.dir={run_dir}",
           "run.progress_every_s=0", f"run.max_env_steps={args.budget}",
           f"run.eval_every={args.eval_every}", f"run.eval_episodes={args.eval_episodes}",
           f"env.reward_threshold={args.threshold}", "threads_per_rank=1", "device=cpu",
           *args.drlmpi_extra]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_child_env(), capture_output=True, text=True,
                              timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        return {"error": f"timed out after {args.timeout} s", "stderr_tail": _tail(exc.stderr),
                "process_seconds": time.perf_counter() - t0, "command": cmd}
    process_s = time.perf_counter() - t0
    summary_path = run_dir / "summary.json"
    if proc.returncode != 0 or not summary_path.exists():
        return {"error": f"exit code {proc.returncode}", "stderr_tail": _tail(proc.stderr),
                "process_seconds": process_s, "command": cmd}
    s = json.loads(summary_path.read_text())
    per_rank = s.get("per_rank") or [{}]
    solved = bool(s["solved"])
    eval_rows = drlmpi_eval_rows(run_dir)
    leak = drlmpi_eval_leak(eval_rows, s)
    # train_seconds of an eval row includes that evaluation (see drlmpi_eval_leak)
    history = [[int(r["env_steps"]), float(r["train_seconds"]), float(r["return"])] for r in eval_rows]
    return {
        "solved": solved,
        "train_seconds_to_threshold": s["train_seconds_to_threshold"],
        "env_steps_to_threshold": s["env_steps_to_threshold"],
        "updates_to_threshold": s["updates_to_threshold"],
        # budget-exhausted runs count with their whole training time
        "train_seconds": s["train_seconds_to_threshold"] if solved else s["train_seconds"],
        "env_steps": s["env_steps"],
        "updates": s["updates"],
        "learn_seconds": per_rank[0].get("learn_s"),
        "simulate_seconds": per_rank[0].get("simulate_s"),
        "eval_seconds": s["eval_seconds"],
        "evaluations": s["evaluations"],
        "best_eval_return": s["best_eval_return"],
        "solving_eval_seconds_in_clock": leak,
        "eval_history": history,
        "stop_reason": s["stop_reason"],
        "process_seconds": process_s,
        "versions": s.get("versions"),
        "command": cmd,
    }


def run_sb3(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One SB3 run: this script re-invoked with ``--sb3-worker`` in a fresh process."""
    out = work / f"sb3_{seed}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--sb3-worker", "--seed", str(seed),
           "--budget", str(args.budget), "--eval-every", str(args.eval_every),
           "--eval-episodes", str(args.eval_episodes), "--threshold", str(args.threshold),
           "--out", str(out)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_child_env(), capture_output=True, text=True,
                              timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        return {"error": f"timed out after {args.timeout} s", "stderr_tail": _tail(exc.stderr),
                "process_seconds": time.perf_counter() - t0, "command": cmd}
    process_s = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        return {"error": f"exit code {proc.returncode}", "stderr_tail": _tail(proc.stderr),
                "process_seconds": process_s, "command": cmd}
    result = json.loads(out.read_text())
    result.update(process_seconds=process_s, command=cmd)
    return result


def _fmt_s(r: dict[str, Any]) -> str:
    if "error" in r:
        return "ERROR"
    return f"{r['train_seconds']:.1f}" + ("" if r["solved"] else "*")


def _fmt_steps(r: dict[str, Any]) -> str:
    if "error" in r:
        return "-"
    steps = r["env_steps_to_threshold"] if r["solved"] else r["env_steps"]
    return f"{steps:,}" + ("" if r["solved"] else "*")


def _ups(r: dict[str, Any]) -> float | None:
    """Gradient updates per second of time spent updating (the learner's own throughput)."""
    if "error" in r or not r.get("learn_seconds") or not r.get("updates"):
        return None
    return r["updates"] / r["learn_seconds"]


def _sps(r: dict[str, Any]) -> float | None:
    """Environment steps per training second (simulation + learning, evaluation excluded)."""
    if "error" in r or not r.get("train_seconds"):
        return None
    steps = r["env_steps_to_threshold"] if r["solved"] else r["env_steps"]
    return steps / r["train_seconds"]


def _num(v: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Print the table and return the aggregate statistics."""
    header = (f"{'seed':>4} | {'drlmpi s':>9} {'steps':>8} | {'SB3 s':>9} {'steps':>8} | "
              f"{'SB3/drlmpi':>10} | {'steps/s dl':>10} {'sb3':>6} | {'upd/s dl':>8} {'sb3':>6}")
    print(header)
    print("-" * len(header))
    ratios: list[float] = []
    ratios_both_solved: list[float] = []
    ratios_corrected: list[float] = []  # drlmpi's solving evaluation taken off its clock too
    for row in rows:
        d, s = row["drlmpi"], row["sb3"]
        ratio = row["ratio_sb3_over_drlmpi"]
        censored = row["censored"]
        ratio_txt = "-" if ratio is None else f"{ratio:.2f}" + ("*" if censored else "")
        if ratio is not None:
            ratios.append(ratio)
            if not censored:
                ratios_both_solved.append(ratio)
                leak = d.get("solving_eval_seconds_in_clock") or 0.0
                ratios_corrected.append(s["train_seconds"] / (d["train_seconds"] - leak))
        print(f"{row['seed']:>4} | {_fmt_s(d):>9} {_fmt_steps(d):>8} | {_fmt_s(s):>9} "
              f"{_fmt_steps(s):>8} | {ratio_txt:>10} | {_num(_sps(d)):>10} {_num(_sps(s)):>6} | "
              f"{_num(_ups(d)):>8} {_num(_ups(s)):>6}")
    print("-" * len(header))
    agg: dict[str, Any] = {
        "median_ratio": statistics.median(ratios) if ratios else None,
        "mean_ratio": statistics.fmean(ratios) if ratios else None,
        "median_ratio_both_solved": statistics.median(ratios_both_solved) if ratios_both_solved else None,
        "median_ratio_drlmpi_solving_eval_removed":
            statistics.median(ratios_corrected) if ratios_corrected else None,
        "drlmpi_solved": sum(1 for r in rows if r["drlmpi"].get("solved")),
        "sb3_solved": sum(1 for r in rows if r["sb3"].get("solved")),
        "seeds": len(rows),
        "errors": sum(1 for r in rows for k in ("drlmpi", "sb3") if "error" in r[k]),
    }
    print(f"ratio SB3/drlmpi seconds: median {_num(agg['median_ratio'], '{:.2f}')}, "
          f"mean {_num(agg['mean_ratio'], '{:.2f}')} over {len(ratios)} seed(s) "
          f"(>1: drlmpi faster to threshold)")
    print(f"solved: drlmpi {agg['drlmpi_solved']}/{len(rows)}, SB3 {agg['sb3_solved']}/{len(rows)}"
          + (f"; {agg['errors']} run(s) failed (see JSON)" if agg["errors"] else ""))
    if any(r["censored"] for r in rows):
        print("* = not solved within the budget: seconds/steps are the whole budget's, the ratio "
              "is a bound")
    print("steps/s = env steps per training second; upd/s = gradient updates per second spent "
          "updating")
    return agg


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=int, default=100_000, help="env steps per run (default 1e5)")
    p.add_argument("--eval-every", type=int, default=2000, help="env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, default=10, help="greedy episodes per evaluation")
    p.add_argument("--threshold", type=float, default=475.0, help="greedy mean return that solves")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run before it is killed")
    p.add_argument("--keep-runs", action="store_true", help="keep the drlmpi run directories")
    p.add_argument("--drlmpi-extra", nargs="*", default=[], metavar="KEY=VALUE",
                   help="extra drlmpi overrides, e.g. algo.double_q=false for SB3's plain DQN target")
    p.add_argument("--sb3-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("stable_baselines3") is None:
        sys.exit('bench_sb3_dqn: stable-baselines3 is not installed: pip install -e ".[bench]"')
    if args.sb3_worker:
        sb3_worker(args.seed, args.budget, args.eval_every, args.eval_episodes, args.threshold,
                   args.out)
        return 0

    import stable_baselines3
    import torch

    work = Path(tempfile.mkdtemp(prefix="bench_sb3_dqn_"))
    print(f"drlmpi sequential DQN vs SB3 DQN (zoo) on {ENV_ID}: seeds {args.seeds}, budget "
          f"{args.budget:,} steps, eval every {args.eval_every} ({args.eval_episodes} greedy "
          f"episodes), threshold {args.threshold:g}, 1 torch thread each", flush=True)
    load_before = os.getloadavg()
    started = time.time()
    rows: list[dict[str, Any]] = []
    try:
        for i, seed in enumerate(args.seeds):
            order = ["drlmpi", "sb3"] if i % 2 == 0 else ["sb3", "drlmpi"]
            results: dict[str, dict[str, Any]] = {}
            for name in order:
                print(f"  seed {seed}: {name} ...", end=" ", flush=True)
                results[name] = (run_drlmpi if name == "drlmpi" else run_sb3)(seed, args, work)
                r = results[name]
                print(r["error"] if "error" in r else
                      f"{'solved' if r['solved'] else 'NOT solved'} in {r['train_seconds']:.1f} s "
                      f"training ({r['process_seconds']:.1f} s process)", flush=True)
            d, s = results["drlmpi"], results["sb3"]
            ok = "error" not in d and "error" not in s
            ratio = s["train_seconds"] / d["train_seconds"] if ok and d["train_seconds"] else None
            rows.append({"seed": seed, "order": order, "drlmpi": d, "sb3": s,
                         "ratio_sb3_over_drlmpi": ratio,
                         "censored": not (ok and d["solved"] and s["solved"])})
    finally:
        if not args.keep_runs:
            shutil.rmtree(work, ignore_errors=True)
    print()
    agg = report(rows)
    result = {
        "benchmark": "drlmpi sequential DQN vs stable-baselines3 DQN (rl-baselines3-zoo), "
                     f"{ENV_ID}, training seconds to threshold (evaluation excluded)",
        "ratio_definition": "sb3 train_seconds / drlmpi train_seconds (>1: drlmpi faster)",
        "settings": {"seeds": args.seeds, "budget": args.budget, "eval_every": args.eval_every,
                     "eval_episodes": args.eval_episodes, "threshold": args.threshold,
                     "timeout": args.timeout, "torch_threads": 1,
                     "sb3_hyperparameters": ZOO_DQN_CARTPOLE,
                     "sb3_exploration_fraction": ZOO_EXPLORATION_FRACTION * ZOO_N_TIMESTEPS / args.budget},
        "aggregate": agg,
        "runs": rows,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "stable_baselines3": stable_baselines3.__version__,
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                    "started_unix": started, "elapsed_s": time.time() - started},
        "run_dirs": str(work) if args.keep_runs else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
