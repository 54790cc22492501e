"""The SB3 side of the comparisons (bench_sb3_dqn.py, bench_sb3_td3.py): the worker's clock, its
final JSON, and its progress file.

The worker (a script re-invoked with ``--sb3-worker``) writes its JSON (``--out``) only at the
end. So that a run the parent kills on ``--timeout`` (or one that crashes) still leaves a record,
its clock appends each evaluation, as it happens, to a progress file beside that JSON
(:func:`progress_path`: ``<out>.progress.jsonl``, one JSON line an evaluation, flushed each time):
``evaluation`` (1, 2, ...), ``env_steps``, ``train_seconds`` (the training clock so far,
evaluation excluded: the clock the final JSON uses), ``updates`` and ``learn_seconds`` (gradient
steps and their seconds so far), ``eval_seconds`` (evaluation seconds so far), ``return`` (the
greedy mean) and ``solved`` (``return`` reached the threshold). The parent turns that file into
a cut run's record (:func:`cut_result`). Stable-Baselines3 is imported only inside the functions
the worker calls, so the parent imports this module without it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: drlmpi evaluates episodes seeded from seed + run.eval_seed_offset (its default); SB3 the same
EVAL_SEED_OFFSET = 1_000_000


# -- the progress file ------------------------------------------------------------------------------
def progress_path(out: Path) -> Path:
    """Where the worker writing ``out`` appends its evaluations: ``<out>.progress.jsonl``."""
    return Path(f"{out}.progress.jsonl")


def append_evaluation(path: Path, evaluation: dict[str, Any]) -> None:
    """Append one evaluation's line to ``path``; the file is closed (so flushed) before returning,
    which a kill of the process afterwards cannot undo."""
    with open(path, "a") as fh:
        fh.write(json.dumps(evaluation) + "\n")


def read_progress(path: Path) -> list[dict[str, Any]]:
    """The evaluations in ``path``, oldest first; none when it does not exist. A line cut short
    by the kill (only the last can be) is left out."""
    if not path.exists():
        return []
    evaluations = []
    for line in path.read_text().splitlines():
        try:
            evaluations.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return evaluations


def cut_result(path: Path, error: dict[str, Any], seconds: float) -> dict[str, Any] | None:
    """The record of an SB3 run cut short (``error``: :func:`sb3_common.run_command`'s record of
    a timeout or a failure, ``seconds``: the process's), from the progress file ``path``; ``None``
    when the file holds no evaluation (the caller keeps the error record then).

    Shaped like a finished run's JSON: not solved (unless an evaluation had reached the threshold
    before the kill), ``train_seconds``, ``env_steps``, ``updates`` and ``learn_seconds`` those at
    the last evaluation (the training seconds reached before the cut: SB3 would have needed more
    to solve), the best and last return, the evaluations and their history; with
    ``partial: true``, ``timed_out`` and ``cut_by`` (the error's text)."""
    evaluations = read_progress(path)
    if not evaluations:
        return None
    last = evaluations[-1]
    at = next((e for e in evaluations if e.get("solved")), None)
    returns = [e["return"] for e in evaluations]
    return {
        "solved": at is not None,
        **{f"{k}_to_threshold": (at or {}).get(k)
           for k in ("train_seconds", "env_steps", "updates", "learn_seconds")},
        "train_seconds": (at or last)["train_seconds"], "env_steps": last["env_steps"],
        "updates": last.get("updates"), "learn_seconds": last.get("learn_seconds"),
        "eval_seconds": last.get("eval_seconds"), "evaluations": len(evaluations),
        "best_eval_return": max(returns), "last_eval_return": returns[-1],
        "eval_history": [[e["env_steps"], round(e["train_seconds"], 4), e["return"]] for e in evaluations],
        "partial": True, "timed_out": bool(error.get("timed_out")), "cut_by": error["error"],
        "stderr_tail": error.get("stderr_tail", ""), "process_seconds": seconds,
        "command": error.get("command"),
    }


# -- the worker's clock -----------------------------------------------------------------------------
def threshold_timer(args: argparse.Namespace, env_id: str, env_action: Callable[[Any], Any]) -> Any:
    """An SB3 callback: the training clock with evaluation taken out, a greedy evaluation of
    ``args.eval_episodes`` episodes once per ``args.eval_every`` env steps (seeded as drlmpi
    seeds its own), each appended to the progress file of ``args.out``, and learning stopped once
    the mean reaches ``args.threshold``. ``env_action`` turns ``model.predict``'s action into the
    environment's."""
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
            self.evaluations += 1
            mean = float(np.mean(returns))
            self.last_eval = mean
            self.best_eval = mean if self.best_eval is None else max(self.best_eval, mean)
            self.history.append([self.num_timesteps, round(train_s, 4), mean])
            updates = getattr(self.model, "_n_updates", None)
            if mean >= args.threshold:
                self.solved_at = {"train_seconds": train_s, "env_steps": self.num_timesteps,
                                  "updates": updates, "learn_seconds": self.learn_s}
            append_evaluation(self.progress, {
                "evaluation": self.evaluations, "env_steps": self.num_timesteps, "train_seconds": train_s,
                "updates": updates, "learn_seconds": self.learn_s,
                "eval_seconds": self.paused_s + time.perf_counter() - t0, "return": mean,
                "solved": self.solved_at is not None})
            self.paused_s += time.perf_counter() - t0  # the line's writing is off the clock too

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
