"""Wall-clock to a greedy return of 5,000 on HalfCheetah-v5: drlmpi's TD3 vs Stable-Baselines3 TD3.

    pip install -e ".[bench,mujoco]"                 # stable-baselines3, MuJoCo
    python experiments/bench_sb3_td3.py              # star on 8 ranks, seeds 0 1 2, budget 3e5 env steps
    MPIEXEC="mpirun --oversubscribe --bind-to none" python experiments/bench_sb3_td3.py --device cuda \\
        --out docs/results/<study>/bench_sb3_td3.json

For each seed, each in a cold subprocess with ONE torch/BLAS thread a process: drlmpi's TD3
(``$MPIEXEC -n RANKS python -m mpi4py -m drlmpi algo=td3 env=halfcheetah topology=star ...`` with
conf/tuned/td3_halfcheetah.yaml, the TD3 paper's settings; ``--topology sequential``: one
process, no MPIEXEC; read from summary.json) and SB3's ``TD3`` (this script re-invoked with
``--sb3-worker``, timed by a callback). The frameworks alternate seed by seed (the order too).

SB3's hyperparameters are rl-baselines3-zoo's for HalfCheetah (hyperparams/td3.yml, the
``HalfCheetah-v4: &mujoco-defaults`` entry every MuJoCo task shares): MlpPolicy, learning_starts
10000, normal action noise of std 0.1, train_freq 1, gradient_steps 1, learning_rate 1e-3,
batch_size 256, net_arch [400, 300]; the rest are SB3's TD3 defaults, which that entry keeps:
gamma 0.99, tau 0.005, buffer_size 1e6, policy_delay 2, target_policy_noise 0.2,
target_noise_clip 0.5. drlmpi's tuned file sets the same values (its noise, like SB3's, is a
fraction of the half action range, which is 1 for HalfCheetah).

Both sides use the same threshold, budget, evaluation cadence and episodes (seeded alike): SB3
evaluates after the env step, and its update, that reaches each multiple of ``--eval-every``;
drlmpi after the chunk (sequential: 256 steps) or round (star: 256 steps from each simulator)
that passes it; both record the step count of each evaluation. Evaluation is taken off both
clocks. ``ratio = SB3 seconds / drlmpi seconds`` to the threshold (> 1: drlmpi faster); a run
that does not solve counts with its whole budget's seconds (marked ``*``): the ratio is then a
bound (``ratio_is`` in the JSON says which). The SB3 worker appends each evaluation to a progress
file beside its JSON (``<out>.progress.jsonl``, experiments/sb3_clock.py); one cut by
``--timeout`` (or failed) is recorded from it as not solved, with the training seconds and steps
of its last evaluation (marked ``+``; the ratio a lower bound) instead of an error.
experiments/README.md describes the output.

Without MuJoCo, a smoke run: ``--drlmpi-env pendulum`` (SB3 then runs Pendulum-v1, the id in
conf/env/pendulum.yaml) with ``--topology sequential --budget 3000 --threshold -1500``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import provenance  # experiments/provenance.py, beside this script
import sb3_clock  # experiments/sb3_clock.py, beside this script
import sb3_common  # experiments/sb3_common.py, beside this script
import yaml

# rl-baselines3-zoo, hyperparams/td3.yml, "HalfCheetah-v4" (&mujoco-defaults); gamma is SB3's
# default, which the zoo keeps, written out because the comparison depends on it.
ZOO_TD3_HALFCHEETAH: dict[str, Any] = {
    "policy": "MlpPolicy", "learning_starts": 10_000, "train_freq": 1, "gradient_steps": 1,
    "learning_rate": 1e-3, "batch_size": 256, "gamma": 0.99, "policy_kwargs": {"net_arch": [400, 300]},
}
ZOO_NOISE_STD = 0.1  # noise_type: normal, noise_std: 0.1 (of the half action range: SB3 scales to [-1, 1])


def env_id_of(drlmpi_env: str) -> str:
    """The Gymnasium id drlmpi's ``env=NAME`` runs: the ``id`` in conf/env/NAME.yaml."""
    config = sb3_common.REPO_ROOT / "conf" / "env" / f"{drlmpi_env}.yaml"
    return str(yaml.safe_load(config.read_text())["id"])


def sb3_hyperparameters(learning_starts: int | None) -> dict[str, Any]:
    """The zoo's hyperparameters, with ``--learning-starts`` when given."""
    if learning_starts is None:
        return dict(ZOO_TD3_HALFCHEETAH)
    return {**ZOO_TD3_HALFCHEETAH, "learning_starts": learning_starts}


def sb3_worker(args: argparse.Namespace) -> None:
    """Train SB3 TD3 with the zoo hyperparameters until solved or out of budget; write JSON."""
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
    timer = sb3_clock.threshold_timer(args, args.env_id, env_action=np.asarray)
    sb3_clock.learn_timed(model, timer, args.budget)
    result = sb3_clock.sb3_result(model, timer, args.seed, {
        "env_id": args.env_id, "hyperparameters": hyperparameters, "action_noise_std": ZOO_NOISE_STD})
    args.out.write_text(json.dumps(result, indent=2) + "\n")


def drlmpi_command(seed: int, args: argparse.Namespace, run_dir: Path, launcher: list[str]) -> list[str]:
    """The drlmpi job: ``launcher -n RANKS python -m mpi4py -m drlmpi algo=td3 ...``, or one
    ``python -m drlmpi`` process for the sequential topology (no launcher)."""
    if args.topology == "sequential":
        program = [sys.executable, "-m", "drlmpi"]
    else:  # mpi4py's runner: one rank's exception aborts the job instead of hanging it
        program = [*launcher, "-n", str(args.ranks), sys.executable, "-m", "mpi4py", "-m", "drlmpi"]
    both = [] if args.learning_starts is None else [f"algo.learning_starts={args.learning_starts}"]
    return [*program, "algo=td3", f"env={args.drlmpi_env}", f"topology={args.topology}",
            *sb3_common.drlmpi_overrides(seed, run_dir, args), *both, *args.drlmpi_extra]


def run_drlmpi(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One drlmpi run; the summary fields this benchmark needs."""
    run_dir = work / f"drlmpi_{seed}"
    launcher = shlex.split(os.environ.get("MPIEXEC", "mpiexec"))
    return sb3_common.run_drlmpi(drlmpi_command(seed, args, run_dir, launcher), run_dir, args.timeout)


def run_sb3(seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One SB3 run in a fresh process, on the environment drlmpi runs."""
    extra = ["--env-id", args.env_id]
    if args.learning_starts is not None:
        extra += ["--learning-starts", str(args.learning_starts)]
    return sb3_common.run_sb3(__file__, seed, args, work, extra)


def drlmpi_label(args: argparse.Namespace) -> str:
    """``star on 8 ranks``, ``sequential``: what the drlmpi side runs."""
    return "sequential" if args.topology == "sequential" else f"{args.topology} on {args.ranks} ranks"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``--env-id`` defaults to the id of ``--drlmpi-env``'s config."""
    p = sb3_common.parser(__doc__.split("\n\n")[0], budget=300_000, eval_every=10_000, eval_episodes=5,
                          threshold=5000.0, out="outputs/bench_sb3_td3.json", timeout=3600.0,
                          extra_help="extra drlmpi overrides")
    p.add_argument("--topology", default="star",
                   help="drlmpi's topology (default star; sequential: one process, no MPIEXEC)")
    p.add_argument("--ranks", type=int, default=8, help="drlmpi's ranks under MPIEXEC (default 8)")
    p.add_argument("--drlmpi-env", default="halfcheetah", help="drlmpi's env config (conf/env/NAME.yaml)")
    p.add_argument("--env-id", default=None, help="SB3's Gymnasium id (default: the id in that config)")
    p.add_argument("--learning-starts", type=int, default=None,
                   help="random steps before updates, both sides (default: each side's, 10,000)")
    args = p.parse_args(argv)
    if args.env_id is None:
        args.env_id = env_id_of(args.drlmpi_env)
    return args


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON's ``settings``: the command line's choices, the launcher and SB3's hyperparameters."""
    chosen = ("seeds", "device", "topology", "ranks", "budget", "eval_every", "eval_episodes", "threshold",
              "drlmpi_env", "env_id", "learning_starts", "drlmpi_extra")
    launcher = None if args.topology == "sequential" else os.environ.get("MPIEXEC", "mpiexec")
    return {**{k: getattr(args, k) for k in chosen}, "mpiexec": launcher,
            "sb3_hyperparameters": sb3_hyperparameters(args.learning_starts),
            "sb3_action_noise_std": ZOO_NOISE_STD}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if sb3_common.worker_ran("bench_sb3_td3", args, sb3_worker):
        return 0
    print(f"drlmpi TD3 ({drlmpi_label(args)}) vs SB3 TD3 (zoo) on {args.env_id}: seeds {args.seeds}, "
          f"budget {args.budget:,} steps, eval every {args.eval_every:,} ({args.eval_episodes} episodes), "
          f"threshold {args.threshold:g}, device {args.device}", flush=True)
    rows, host = sb3_common.compare("bench_sb3_td3", args, lambda seed, work: run_drlmpi(seed, args, work),
                                    lambda seed, work: run_sb3(seed, args, work))
    print()
    aggregate = sb3_common.report(rows)
    sb3_common.write_result(args.out, {
        "benchmark": f"drlmpi TD3 ({drlmpi_label(args)}) vs stable-baselines3 TD3 (rl-baselines3-zoo), "
                     f"{args.env_id}, training seconds to threshold (evaluation excluded)",
        "ratio_definition": "sb3 train_seconds / drlmpi train_seconds (>1: drlmpi faster)",
        "settings": settings(args), "aggregate": aggregate, "runs": rows, "machine": host["machine"],
        "provenance": provenance.provenance([sys.executable, *sys.argv]), "run_dirs": host["run_dirs"],
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
