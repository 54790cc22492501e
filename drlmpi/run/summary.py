"""What goes into ``summary.json`` (docs/configuration.md explains every field): the run's
totals, time to the reward threshold, throughput, each rank's report, the versions that decide
performance."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import numpy as np
import torch

from drlmpi.job_control.stop import STOP
from drlmpi.outputs.pace import second_half
from drlmpi.topologies.core.context import RunPlan


def versions() -> dict[str, str]:
    """Versions of the pieces that decide performance, for the summary."""
    import gymnasium
    import mpi4py
    from mpi4py import MPI

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "gymnasium": gymnasium.__version__,
        "mpi4py": mpi4py.__version__,
        "mpi_library": MPI.Get_library_version().strip().splitlines()[0].strip(),
        "host": platform.node(),
    }


def build_summary(plan: RunPlan, run_dir: Path, reports: list[dict[str, Any]],
                  learner: Any) -> dict[str, Any]:
    """The ``summary.json`` contents (see docs/configuration.md for each field)."""
    cfg, world_size, topology_cls = plan.cfg, plan.world_size, plan.topology_cls
    if learner is None:
        raise RuntimeError("rank 0 must hold the learner to write the summary")
    stop_reason = learner.stop_reason()
    topology_stats = reports[0].get("topology_stats") or {}
    idle_share = cfg.run.idle_busy_share
    train_s = learner.clock.elapsed()
    wall_s = max(max(r["wall_s"] for r in reports), learner.clock.wall())  # a resumed run: both parts
    solved_at = learner.solved_at or {}
    start = learner.part_start
    wait_shares = [r["extra"]["mpi_wait_s"] / r["wall_s"] if r["wall_s"] > 0 else 0.0 for r in reports]
    per_rank = [
        {**{k: v for k, v in r.items() if k not in ("extra", "topology_stats")}, **r["extra"],
         "mpi_wait_share": share,
         # The TD3 slides' health check: a rank that neither simulated nor learned much is idle.
         "busy_share": (r["simulate_s"] + r["learn_s"]) / r["wall_s"] if r["wall_s"] > 0 else 0.0}
        for r, share in zip(reports, wait_shares)
    ]
    return {
        "solved": learner.solved_at is not None,
        "train_seconds_to_threshold": solved_at.get("train_seconds"),
        "env_steps_to_threshold": solved_at.get("env_steps"),
        "updates_to_threshold": solved_at.get("updates"),
        "reward_threshold": learner.reward_threshold,
        "best_eval_return": learner.best_eval,
        "last_eval_return": learner.last_eval,
        "evaluations": learner.evaluations,
        "resumes": learner.resumes,
        "stop_reason": stop_reason or "unknown",
        "stop_signal": STOP.requested() if stop_reason == "signal" else None,
        "env_steps": learner.env_steps,
        "episodes": learner.episodes,
        "updates": learner.updates,
        "train_seconds": train_s,
        "eval_seconds": learner.clock.paused_s,
        "startup_seconds": learner.clock.startup_s,
        "wall_seconds": wall_s,
        "env_steps_per_s": learner.env_steps / train_s if train_s > 0 else 0.0,
        "updates_per_s": learner.updates / train_s if train_s > 0 else 0.0,
        # the pace after the first moments (graphs captured, an update compiled): this launch's
        "second_half": second_half(learner.pace.points, start["train_seconds"], train_s),
        "mpi_wait_share": float(np.mean(wait_shares)),
        "updates_per_env_step": learner.updates / learner.env_steps if learner.env_steps else 0.0,
        "policy_lag_mean": float(np.mean(learner.policy_lags)) if learner.policy_lags else None,
        "policy_lag_max": int(np.max(learner.policy_lags)) if learner.policy_lags else None,
        "topology_stats": topology_stats,
        # what per_rank and topology_stats cover: this launch (a resumed run's last part, from
        # its checkpoint's counters; the totals above cover the whole run)
        "part": {"from_train_seconds": start["train_seconds"], "from_env_steps": start["env_steps"],
                 "from_updates": start["updates"], "train_seconds": train_s - start["train_seconds"],
                 "env_steps": learner.env_steps - start["env_steps"], "updates": learner.part_updates},
        "experience_row_bytes": learner.algo.layout.width * 4,
        "policy_param_bytes": learner.algo.policy.flat.numel * 4,
        "algo": cfg.algo.name,
        "env_id": cfg.env.id,
        "env": cfg.env.name,
        "topology": cfg.topology.name,
        # the label of what ran: options a topology resolved at run time (backend=auto) as resolved
        "topology_label": topology_cls.report_label({**cfg.topology.as_dict(),
                                                     **topology_stats.get("resolved_options", {})}),
        "topology_order": topology_cls.report_order,
        "paper_label": topology_cls.paper_label(world_size),
        "world_size": world_size,
        "seed": cfg.seed,
        "sim_cost_ms": cfg.env.sim_cost_ms,
        "num_envs": cfg.env.num_envs,
        # algorithm options resolved for the job's size (PPO's rollout_steps_per_env, num_minibatches)
        "algo_job_options": dict(plan.job_options),
        "device": plan.device,
        "threads_per_rank": cfg.threads_per_rank,
        "bind_ranks": cfg.bind_ranks,
        "run_dir": str(run_dir),
        "per_rank": per_rank,
        "idle_busy_share": idle_share,
        "idle_ranks": [r["rank"] for r in per_rank if r["busy_share"] < idle_share],
        "versions": versions(),
    }
