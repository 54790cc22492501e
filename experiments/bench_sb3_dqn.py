"""Wall-clock to CartPole-v1's reward threshold: drlmpi's sequential DQN vs Stable-Baselines3 DQN.

    pip install -e ".[bench]"                      # stable-baselines3
    python experiments/bench_sb3_dqn.py            # seeds 0 1 2, budget 1e5 env steps

Both evaluated after the 256-step chunk (and its 128 updates) passing each ``--eval-every``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import sb3_common  # experiments/sb3_common.py, beside this script

ENV_ID = "CartPole-v1"
# rl-baselines3-zoo, hyperparams/dqn.yml, "CartPole-v1": exploration over 16% of its 5e4 steps.
ZOO_N_TIMESTEPS, ZOO_EXPLORATION_FRACTION = 50_000, 0.16
ZOO_DQN_CARTPOLE: dict[str, Any] = {
    "policy": "MlpPolicy", "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000,
    "learning_starts": 1000, "gamma": 0.99, "target_update_interval": 10, "train_freq": 256,
    "gradient_steps": 128, "exploration_final_eps": 0.04, "policy_kwargs": {"net_arch": [256, 256]},
}


def sb3_worker(args: argparse.Namespace) -> None:
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN

    torch.set_num_threads(1)
    model = DQN(env=gym.make(ENV_ID), seed=args.seed, device=args.device, verbose=0,
                exploration_fraction=ZOO_EXPLORATION_FRACTION * ZOO_N_TIMESTEPS / args.budget,
                **ZOO_DQN_CARTPOLE)
    timer = sb3_common.threshold_timer(args, ENV_ID, env_action=int)
    sb3_common.learn_timed(model, timer, args.budget)
    result = sb3_common.sb3_result(model, timer, args.seed, {
        "exploration_fraction": model.exploration_fraction, "hyperparameters": ZOO_DQN_CARTPOLE})
    args.out.write_text(json.dumps(result, indent=2) + "\n")


def run_drlmpi(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    run_dir = work / f"drlmpi_{seed}"
    cmd = [sys.executable, "-m", "drlmpi", *sb3_common.drlmpi_overrides(seed, run_dir, args)]
    return sb3_common.run_drlmpi([*cmd, *args.drlmpi_extra], run_dir, args.timeout)


def main(argv: list[str] | None = None) -> int:
    p = sb3_common.parser(__doc__.split("\n\n")[0], budget=100_000, eval_every=2000, eval_episodes=10,
                          threshold=475.0, out="outputs/bench_sb3_dqn.json", timeout=1800.0,
                          extra_help="extra drlmpi overrides, e.g. algo.double_q=false for SB3's plain "
                                     "DQN target")
    args = p.parse_args(argv)
    if sb3_common.worker_ran("bench_sb3_dqn", args, sb3_worker):
        return 0
    print(f"drlmpi sequential DQN vs SB3 DQN (zoo) on {ENV_ID}: seeds {args.seeds}, budget "
          f"{args.budget:,} steps, eval every {args.eval_every} ({args.eval_episodes} episodes), "
          f"threshold {args.threshold:g}", flush=True)
    rows, host = sb3_common.compare("bench_sb3_dqn", args, lambda seed, work: run_drlmpi(seed, args, work),
                                    lambda seed, work: sb3_common.run_sb3(__file__, seed, args, work))
    settings = {**{k: getattr(args, k) for k in ("seeds", "device", "budget", "eval_every", "eval_episodes",
                                                 "threshold", "drlmpi_extra")},
                "sb3_hyperparameters": ZOO_DQN_CARTPOLE}
    benchmark = f"drlmpi sequential DQN vs stable-baselines3 DQN (rl-baselines3-zoo), {ENV_ID}"
    return sb3_common.finish(args, benchmark, settings, rows, host)


if __name__ == "__main__":
    sys.exit(main())
