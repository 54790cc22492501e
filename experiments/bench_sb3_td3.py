"""Wall-clock to a greedy return of 5,000 on HalfCheetah-v5: drlmpi's TD3 vs Stable-Baselines3 TD3.

    pip install -e ".[bench,mujoco]"                 # stable-baselines3, MuJoCo
    python experiments/bench_sb3_td3.py              # star on 8 ranks, seeds 0 1 2, budget 3e5 env steps

Star's ranks start with drlmpi's launch command (DRLMPI_MPIEXEC). A smoke run without MuJoCo:
``--drlmpi-env pendulum --topology sequential --budget 3000 --threshold -1500``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import sb3_common  # experiments/sb3_common.py, beside this script
import yaml

from drlmpi.job_control.launchers import launch_command, mpiexec_command
from drlmpi.sweep import provenance

# rl-baselines3-zoo, hyperparams/td3.yml, "HalfCheetah-v4" (&mujoco-defaults); gamma is SB3's
# default, which the zoo keeps, written out because the comparison depends on it. SB3's other TD3
# defaults stay: tau 0.005, buffer 1e6, policy_delay 2, target noise 0.2 clipped at 0.5.
ZOO_TD3_HALFCHEETAH: dict[str, Any] = {
    "policy": "MlpPolicy", "learning_starts": 10_000, "train_freq": 1, "gradient_steps": 1,
    "learning_rate": 1e-3, "batch_size": 256, "gamma": 0.99, "policy_kwargs": {"net_arch": [400, 300]},
}
ZOO_NOISE_STD = 0.1  # noise_type: normal, noise_std: 0.1 (of the half action range: SB3 scales to [-1, 1])


def env_id_of(drlmpi_env: str) -> str:
    config = sb3_common.REPO_ROOT / "conf" / "env" / f"{drlmpi_env}.yaml"  # drlmpi's env=NAME
    return str(yaml.safe_load(config.read_text())["id"])


def sb3_hyperparameters(learning_starts: int | None) -> dict[str, Any]:
    given = {} if learning_starts is None else {"learning_starts": learning_starts}
    return {**ZOO_TD3_HALFCHEETAH, **given}


def sb3_worker(args: argparse.Namespace) -> None:
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    torch.set_num_threads(1)
    env = gym.make(args.env_id)
    n_actions = env.action_space.shape[-1]
    hyperparameters = sb3_hyperparameters(args.learning_starts)
    noise = NormalActionNoise(mean=np.zeros(n_actions), sigma=ZOO_NOISE_STD * np.ones(n_actions))
    model = TD3(env=env, seed=args.seed, device=args.device, verbose=0, action_noise=noise, **hyperparameters)
    timer = sb3_common.threshold_timer(args, args.env_id, env_action=np.asarray)
    sb3_common.learn_timed(model, timer, args.budget)
    result = sb3_common.sb3_result(model, timer, args.seed, {
        "env_id": args.env_id, "hyperparameters": hyperparameters, "action_noise_std": ZOO_NOISE_STD})
    args.out.write_text(json.dumps(result, indent=2) + "\n")


def drlmpi_command(seed: int, args: argparse.Namespace, run_dir: Path, launcher: list[str]) -> list[str]:
    """``launcher -n RANKS python -m mpi4py -m drlmpi algo=td3 ...``; sequential: one process."""
    if args.topology == "sequential":
        program = [sys.executable, "-m", "drlmpi"]
    else:  # mpi4py's runner: one rank's exception aborts the job instead of hanging it
        program = launch_command(args.ranks, [sys.executable, "-m", "mpi4py", "-m", "drlmpi"], launcher)
    both = [] if args.learning_starts is None else [f"algo.learning_starts={args.learning_starts}"]
    return [*program, "algo=td3", f"env={args.drlmpi_env}", f"topology={args.topology}",
            *sb3_common.drlmpi_overrides(seed, run_dir, args), *both, *args.drlmpi_extra]


def run_drlmpi(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    run_dir = work / f"drlmpi_{seed}"
    cmd = drlmpi_command(seed, args, run_dir, mpiexec_command())
    return sb3_common.run_drlmpi(cmd, run_dir, args.timeout)


def run_sb3(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    extra = ["--env-id", args.env_id]
    if args.learning_starts is not None:
        extra += ["--learning-starts", str(args.learning_starts)]
    return sb3_common.run_sb3(__file__, seed, args, work, extra)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = sb3_common.parser(__doc__.split("\n\n")[0], budget=300_000, eval_every=10_000, eval_episodes=5,
                          threshold=5000.0, out="outputs/bench_sb3_td3.json", timeout=3600.0,
                          extra_help="extra drlmpi overrides")
    p.add_argument("--topology", default="star", help="drlmpi's topology (sequential: one process)")
    p.add_argument("--ranks", type=int, default=8, help="drlmpi's ranks (default 8)")
    p.add_argument("--drlmpi-env", default="halfcheetah", help="drlmpi's env config (conf/env/NAME.yaml)")
    p.add_argument("--env-id", default=None, help="SB3's Gymnasium id (default: the id in that config)")
    p.add_argument("--learning-starts", type=int, default=None,
                   help="random steps before updates, both sides (default: each side's, 10,000)")
    args = p.parse_args(argv)
    args.env_id = args.env_id or env_id_of(args.drlmpi_env)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if sb3_common.worker_ran("bench_sb3_td3", args, sb3_worker):
        return 0
    label = "sequential" if args.topology == "sequential" else f"{args.topology} on {args.ranks} ranks"
    print(f"drlmpi TD3 ({label}) vs SB3 TD3 (zoo) on {args.env_id}: seeds {args.seeds}, budget "
          f"{args.budget:,} steps, eval every {args.eval_every:,} ({args.eval_episodes} episodes), threshold "
          f"{args.threshold:g}, device {args.device}", flush=True)
    rows, host = sb3_common.compare("bench_sb3_td3", args, lambda seed, work: run_drlmpi(seed, args, work),
                                    lambda seed, work: run_sb3(seed, args, work))
    chosen = ("seeds", "device", "topology", "ranks", "budget", "eval_every", "eval_episodes", "threshold",
              "drlmpi_env", "env_id", "learning_starts", "drlmpi_extra")
    settings = {**{k: getattr(args, k) for k in chosen},
                "mpiexec": None if args.topology == "sequential" else " ".join(mpiexec_command()),
                "sb3_hyperparameters": sb3_hyperparameters(args.learning_starts),
                "sb3_action_noise_std": ZOO_NOISE_STD}
    return sb3_common.finish(args, f"drlmpi TD3 ({label}) vs stable-baselines3 TD3 (rl-baselines3-zoo), "
                             f"{args.env_id}", settings, rows, host,
                             provenance=provenance.record([sys.executable, *sys.argv]))

if __name__ == "__main__":
    sys.exit(main())
