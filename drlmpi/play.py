"""Replay a trained policy greedily: ``python -m drlmpi.play RUN_DIR [--episodes N]``.

Rebuilds the algorithm from the run's ``.hydra/config.yaml``, loads ``policy.pt`` with
``torch.load(..., weights_only=True)`` (tensors only; no arbitrary code is unpickled), runs N
greedy episodes and prints each return and the mean (ALE ids: whole games with raw rewards,
through the same emulator pipeline as training). ``--render`` opens a window where a display is
available (not for ALE ids).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from hydra.utils import get_class
from omegaconf import OmegaConf

from drlmpi.config.errors import ConfigError
from drlmpi.config.inputs import ArgumentParser, read_yaml, refuse
from drlmpi.envs.families import env_settings, family_of
from drlmpi.envs.make import env_make_kwargs, make_env
from drlmpi.envs.spec import env_spec
from drlmpi.outputs.checkpoint import DamagedFileError, load_tensors
from drlmpi.roles.evaluate import evaluate
from drlmpi.run.experiment import POLICY_FILE


def load_policy(run_dir: Path):
    """The algorithm of ``run_dir`` with its trained weights, on the CPU, acting only."""
    cfg_path = run_dir / ".hydra" / "config.yaml"
    policy_path = run_dir / POLICY_FILE
    for path in (cfg_path, policy_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: is {run_dir} a finished drlmpi run directory?")
    cfg = read_yaml(cfg_path, f"is {run_dir} a drlmpi run directory?", kind=dict)
    if not all(isinstance(OmegaConf.select(cfg, key), str) for key in ("env.id", "algo._target_")):
        raise ConfigError(f"{cfg_path} names no env.id or algo._target_: is {run_dir} a drlmpi run "
                          f"directory?")
    probe = make_env(cfg.env.id, **env_make_kwargs(cfg.env), train=False)
    spec = env_spec(probe)
    probe.close()
    algo = get_class(cfg.algo._target_)(spec, cfg.algo, device="cpu", seed=0, learner=False)
    algo.load_state_dict(load_tensors(policy_path))
    return cfg, algo


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = ArgumentParser(prog="python -m drlmpi.play", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a run directory written by python -m drlmpi")
    parser.add_argument("--episodes", type=int, default=10, help="greedy episodes to play (default 10)")
    parser.add_argument("--seed", type=int, default=12345, help="seed of the first episode")
    parser.add_argument("--render", action="store_true", help="render to a window (needs a display)")
    args = parser.parse_args(argv)
    if args.episodes < 1:  # a mean over no episode is nan, not a result
        return refuse("drlmpi.play", f"--episodes must be at least 1, got {args.episodes}")
    try:
        cfg, algo = load_policy(args.run_dir)
    except (FileNotFoundError, DamagedFileError, ConfigError) as exc:
        return refuse("drlmpi.play", exc)
    kwargs = env_make_kwargs(cfg.env)  # as the run made its evaluation environments
    if args.render:
        family = family_of(cfg.env.id)
        if not family.renders:  # ALE ids: AtariVectorEnv has no window
            return refuse("drlmpi.play",
                          f"--render is not available for {cfg.env.id}: {family.no_render_reason}")
        kwargs["render_mode"] = "human"
    envs = [make_env(cfg.env.id, **kwargs, train=False)]
    returns = []
    for episode in range(args.episodes):
        ret = float(evaluate(algo, envs, 1, seed=args.seed + episode)[0])
        returns.append(ret)
        print(f"episode {episode + 1:3d}: return {ret:9.2f}")
    threshold = env_settings(cfg.env).reward_threshold
    mean = float(np.mean(returns))
    verdict = "" if threshold is None else (" (solved)" if mean >= threshold else f" (threshold {threshold})")
    print(f"mean return over {args.episodes} episodes: {mean:.2f}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
