"""A simulator's acting cost: ``algo.act`` on the CPU through torch against the numpy host path
(:mod:`drlmpi.algos.host_forward`), in one invocation, for DQN on LunarLander-v3 and TD3 on
HalfCheetah-v5 shapes (their configs' networks; random weights and observations)::

    OMP_NUM_THREADS=1 python -m drlmpi.bench.act [--envs 1] [--seconds 1] [--json FILE]

prints microseconds a call for each path and their ratio. ``--envs``: observations a call (a
simulator's ``env.num_envs``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from drlmpi.algos.dqn import DQN
from drlmpi.algos.td3 import TD3
from drlmpi.bench.learner import algo_settings
from drlmpi.config.errors import ConfigError
from drlmpi.config.inputs import ArgumentParser, check_output_file, positive_float, positive_int
from drlmpi.envs.spec import EnvSpec

#: the observation and action shapes of the environments the studies act in
CASES = {
    "dqn": (DQN, EnvSpec("LunarLander-v3", 8, True, 4, 1, (), ())),
    "td3": (TD3, EnvSpec("HalfCheetah-v5", 17, False, 0, 6, (-1.0,) * 6, (1.0,) * 6)),
}


def per_call_us(algo, obs: np.ndarray, seconds: float) -> float:
    """Median microseconds of one exploring ``algo.act`` over five timed blocks."""
    steps = 10**9  # past any warm-up schedule: the network acts
    for _ in range(50):
        algo.act(obs, steps, True)
    blocks = []
    for _ in range(5):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 5:
            for _ in range(20):
                algo.act(obs, steps, True)
            n += 20
        blocks.append((time.perf_counter() - start) / n * 1e6)
    return float(np.median(blocks))


def measure(name: str, envs: int, seconds: float) -> dict:
    """One algorithm's row: torch and host microseconds a call, and torch / host."""
    cls, spec = CASES[name]
    algo = cls(spec, algo_settings(name, 64), device="cpu", seed=0, learner=False)
    obs = np.random.default_rng(0).normal(size=(envs, spec.obs_dim)).astype(np.float32)
    host = per_call_us(algo, obs, seconds)
    if algo.act_host(obs) is None:
        raise SystemExit(f"drlmpi.bench.act: {name} has no host path here")
    algo.act_host = lambda _obs: None  # the same instance, acting through torch
    through_torch = per_call_us(algo, obs, seconds)
    return {"algo": name, "env_id": spec.env_id, "envs": envs, "torch_us": round(through_torch, 2),
            "host_us": round(host, 2), "ratio": round(through_torch / host, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m drlmpi.bench.act", description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", nargs="+", choices=sorted(CASES), default=sorted(CASES))
    parser.add_argument("--envs", type=positive_int, default=1, help="observations a call (env.num_envs)")
    parser.add_argument("--seconds", type=positive_float, default=1.0, help="timed seconds per path")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch's CPU threads")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.json is not None:  # before the measurements, not after
        try:
            check_output_file("--json", args.json)
        except ConfigError as exc:
            parser.error(str(exc))
    torch.set_num_threads(args.threads)
    rows = [measure(name, args.envs, args.seconds) for name in args.algo]
    print(f"{'algo':5} {'env':15} {'envs':>4} {'torch us':>9} {'host us':>8} {'torch/host':>10}")
    for r in rows:
        print(f"{r['algo']:5} {r['env_id']:15} {r['envs']:>4} {r['torch_us']:>9.1f} {r['host_us']:>8.1f} "
              f"{r['ratio']:>9.2f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "torch": torch.__version__, "numpy": np.__version__,
                                         "threads": args.threads}, indent=1))


if __name__ == "__main__":
    main()
