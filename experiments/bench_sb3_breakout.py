"""PPO Breakout for the same training seconds, side by side in one invocation: drlmpi's
``ppo_breakout_16`` preset and Stable-Baselines3's PPO with rl-baselines3-zoo's Atari settings.

    pip install -e ".[bench]"                                   # stable-baselines3
    python experiments/bench_sb3_breakout.py OUT --seconds 480 --seed 3

Both start together on one host, each on its own cores (``--sb3-cores``, default the last two
usable; drlmpi the rest), sharing the GPU, and play the same games: SB3's eight environments are
drlmpi's own Atari environments (ale-py's emulator with noop starts, frame skip 4 with max-pool,
84x84 grayscale, 4 stacked frames, episodic life, FIRE at reset and reward signs for training, the
same pipeline as SB3's AtariWrapper and the zoo's frame_stack 4), so both score the same whole games.
OUT gets ``drlmpi_seed<S>/`` (the run), ``sb3_seed<S>/`` (a run directory the report reads: its
summary.json and metrics.csv), ``report/`` (``python -m drlmpi.report`` of both), ``comparison.json``
and ``provenance.json``. What it prints and why the cores are split: docs/experiments.md,
"Stable-Baselines3 side by side".
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_ID = "ALE/Breakout-v5"
#: rl-baselines3-zoo, hyperparams/ppo.yml, ``atari`` (learning_rate and clip_range ``lin_``: linear
#: in the progress of n_timesteps, which a run of minutes barely moves)
ZOO_N_ENVS, ZOO_N_TIMESTEPS = 8, 10_000_000
ZOO_PPO_ATARI: dict[str, Any] = {"policy": "CnnPolicy", "n_steps": 128, "n_epochs": 4, "batch_size": 256,
                                 "learning_rate": "lin_2.5e-4", "clip_range": "lin_0.1", "vf_coef": 0.5,
                                 "ent_coef": 0.01}
EPISODE_COLUMNS = ("kind", "train_seconds", "wall_seconds", "env_steps", "updates", "return", "return_std",
                   "length", "rank")
PROGRESS_EVERY_S = 60.0


def cpu_set(text: str) -> set[int]:
    """``"14-15"`` or ``"0,3,5-7"`` as a set of CPUs; a ValueError names what is wrong."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"--sb3-cores {text!r}: give CPUs as 14-15 or 0,3,5-7")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def split_cores(usable: list[int], sb3: str | None) -> tuple[set[int], set[int]]:
    """(SB3's CPUs, drlmpi's CPUs): ``sb3`` (default the last two usable), drlmpi every other one."""
    chosen = cpu_set(sb3) if sb3 else set(usable[-2:])
    if not chosen <= set(usable):
        raise ValueError(f"--sb3-cores {sb3}: CPUs {sorted(chosen - set(usable))} are not usable here "
                         f"(usable: {usable[0]}-{usable[-1]})")
    rest = set(usable) - chosen
    if not rest:
        raise ValueError(f"--sb3-cores {sb3}: leaves drlmpi none of the {len(usable)} usable CPU(s)")
    return chosen, rest


def linear(initial: float) -> Any:
    return lambda progress_remaining: progress_remaining * initial


def sb3_settings() -> dict[str, Any]:
    """The zoo's settings with its ``lin_X`` strings as schedules."""
    return {k: linear(float(v[4:])) if isinstance(v, str) and v.startswith("lin_") else v
            for k, v in ZOO_PPO_ATARI.items()}


def record_games(infos: list[dict[str, Any]], t: float, env_steps: int, updates: int, writer: Any,
                 games: list[float]) -> None:
    """Each whole game that ended on this step (its ``info[RAW_EPISODE_KEY]``: raw score and agent
    steps) as a ``metrics.csv`` episode row, as drlmpi writes them; its score added to ``games``."""
    from drlmpi.envs.spec import RAW_EPISODE_KEY

    for info in infos:
        if RAW_EPISODE_KEY in info:
            score, length = info[RAW_EPISODE_KEY]
            games.append(float(score))
            writer.writerow(["episode", f"{t:.4f}", f"{t:.4f}", env_steps, updates, f"{score:.4f}", "",
                             length, 0])


def reward_threshold() -> float | None:
    """Breakout's ``reward_threshold`` in drlmpi's env config (the report's threshold column)."""
    from omegaconf import OmegaConf

    return OmegaConf.load(REPO_ROOT / "conf" / "env" / "breakout.yaml").get("reward_threshold")


def sb3_worker(run_dir: Path, seconds: float, seed: int, device: str) -> dict[str, Any]:
    """Train SB3's PPO for ``seconds`` and write ``run_dir`` as a run the report reads."""
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from drlmpi.envs.atari_bank import make_atari

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    run_dir.mkdir(parents=True, exist_ok=True)
    env = DummyVecEnv([lambda: make_atari(ENV_ID) for _ in range(ZOO_N_ENVS)])
    model = PPO(env=env, seed=seed, device=device, verbose=0, **sb3_settings())
    per_train = model.n_epochs * -(-model.n_steps * ZOO_N_ENVS // model.batch_size)  # minibatch steps

    def updates() -> int:  # minibatch steps so far, as drlmpi counts them (SB3 counts epochs)
        return (model._n_updates // model.n_epochs) * per_train

    class Clock(BaseCallback):
        """Training seconds from learn()'s start; each whole game a metrics row; the stop."""

        def __init__(self, out: Any) -> None:
            super().__init__(verbose=0)
            self.out, self.start, self.games, self.next_note = out, 0.0, [], PROGRESS_EVERY_S

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def _on_step(self) -> bool:
            t = time.perf_counter() - self.start
            record_games(self.locals["infos"], t, self.num_timesteps, updates(), self.out, self.games)
            if t >= self.next_note:
                self.next_note += PROGRESS_EVERY_S
                recent = self.games[-100:]
                mean = f"{sum(recent) / len(recent):.1f}" if recent else "-"
                print(f"sb3: {t:.0f} s, {self.num_timesteps:,} env steps, mean of the last "
                      f"{len(recent)} games {mean}", flush=True)
            return t < seconds

    with open(run_dir / "metrics.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(EPISODE_COLUMNS)
        clock = Clock(writer)
        model.learn(total_timesteps=ZOO_N_TIMESTEPS, callback=clock)
    train_s, done = time.perf_counter() - clock.start, updates()
    summary = {"algo": "sb3-ppo", "env": "breakout", "env_id": ENV_ID, "topology": "sb3",
               "topology_label": f"sb3 DummyVecEnv({ZOO_N_ENVS})", "topology_order": 1000,
               "paper_label": None, "world_size": 1, "seed": seed, "device": str(model.device),
               "num_envs": ZOO_N_ENVS, "reward_threshold": reward_threshold(), "solved": False,
               "stop_reason": "max_train_seconds",
               "env_steps": model.num_timesteps, "episodes": len(clock.games), "updates": done,
               "train_seconds": train_s, "wall_seconds": train_s,
               "env_steps_per_s": model.num_timesteps / train_s, "updates_per_s": done / train_s,
               "cores": sorted(os.sched_getaffinity(0)), "hyperparameters": ZOO_PPO_ATARI,
               "zoo_n_timesteps": ZOO_N_TIMESTEPS,
               "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__}}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def start(cmd: list[str], cpus: set[int], log: Path) -> subprocess.Popen:
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                preexec_fn=lambda: os.sched_setaffinity(0, cpus))


def progress(run_dirs: dict[str, Path]) -> str:
    """Each side's env steps and mean of its last 100 games so far, from its metrics.csv."""
    from drlmpi.report.runs import read_returns

    parts = []
    for name, run_dir in run_dirs.items():
        games = read_returns(run_dir / "metrics.csv")["episode"]
        parts.append(f"{name} {games[-1, 1]:,.0f} env steps, {games[-100:, 2].mean():.1f} (last "
                     f"{min(len(games), 100)} games)" if len(games) else f"{name} no game ended yet")
    return "; ".join(parts)


def wait_for(procs: dict[str, subprocess.Popen], run_dirs: dict[str, Path], out: Path) -> dict[str, int]:
    """Both sides' exit codes; a side that fails ends the other (SIGTERM: drlmpi checkpoints and
    writes its summary), so a refused command line never leaves the other running for minutes."""
    t0, next_note = time.perf_counter(), PROGRESS_EVERY_S
    codes: dict[str, int] = {}
    while len(codes) < len(procs):
        time.sleep(1.0)
        for name, proc in procs.items():
            if name not in codes and proc.poll() is not None:
                codes[name] = proc.returncode
                print(f"{name}: exited {proc.returncode} after {time.perf_counter() - t0:.0f} s"
                      + ("" if proc.returncode == 0 else f" (its log: {out / name}.log)"), flush=True)
                if proc.returncode != 0:
                    for other in procs.values():
                        if other.poll() is None:
                            other.terminate()
        if time.perf_counter() - t0 >= next_note and len(codes) < len(procs):
            next_note += PROGRESS_EVERY_S
            print(f"[{time.perf_counter() - t0:.0f} s] {progress(run_dirs)}", flush=True)
    return codes


def side_row(name: str, run_dir: Path, seconds: float, cpus: set[int]) -> dict[str, Any]:
    """One side's line: env steps, rate, and the mean of the last 100 games at each share of T."""
    from drlmpi.report.runs import read_returns
    from drlmpi.report.train_returns import SHARES, return_at

    if not (run_dir / "summary.json").is_file():
        return {"side": name, "error": f"no summary.json in {run_dir}"}
    s = json.loads((run_dir / "summary.json").read_text())
    games = read_returns(run_dir / "metrics.csv")["episode"]
    return {"side": name, "cores": len(cpus), "env_steps": s["env_steps"],
            "env_steps_per_s": s["env_steps_per_s"], "updates": s["updates"], "games": len(games),
            "train_seconds": s["train_seconds"],
            "score_at": {f"{share * seconds:g}": return_at(games, share * seconds) for share in SHARES}}


def table(rows: list[dict[str, Any]], seconds: float) -> list[str]:
    from drlmpi.report.train_returns import SHARES

    times = [f"{share * seconds:g}" for share in SHARES]
    lines = ["| side | cores | " + " | ".join(f"at {t} s" for t in times) + " | env steps | env steps/s |",
             "|---|---|" + "---|" * len(times) + "---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['side']} | {r['error']} |")
            continue
        scores = ["-" if r["score_at"][t] is None else f"{r['score_at'][t]:.1f}" for t in times]
        lines.append(f"| {r['side']} | {r['cores']} | " + " | ".join(scores)
                     + f" | {r['env_steps']:,} | {r['env_steps_per_s']:,.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the comparison's folder (new or empty)")
    p.add_argument("--seconds", type=float, default=480.0, help="training seconds of each side (480)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sb3-cores", default=None, help="SB3's CPUs, e.g. 14-15 (default: the last two usable)")
    p.add_argument("--device", default="auto", help="SB3's device: auto (cuda when there is one), cuda, cpu")
    p.add_argument("--drlmpi-extra", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides after drlmpi's +experiment=ppo_breakout_16 (e.g. world_size=8)")
    p.add_argument("--sb3-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.sb3_worker:
        sb3_worker(args.out, args.seconds, args.seed, args.device)
        return 0
    import importlib.util

    if importlib.util.find_spec("stable_baselines3") is None:
        p.error('stable-baselines3 is not installed: pip install -e ".[bench]"')
    if not args.seconds > 0:
        p.error(f"--seconds must be > 0, got {args.seconds:g}")
    sys.path.insert(0, str(REPO_ROOT))
    from drlmpi.config.errors import ConfigError
    from drlmpi.config.inputs import check_output_folder
    from drlmpi.job_control.process import cpu_list, usable_cpus

    try:
        sb3_cpus, drlmpi_cpus = split_cores(usable_cpus(), args.sb3_cores)
        check_output_folder("OUT", args.out)
    except (ValueError, ConfigError) as exc:
        p.error(str(exc))
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    from drlmpi.sweep import provenance

    provenance.write(out, ["python", "experiments/bench_sb3_breakout.py", *(argv or sys.argv[1:])])
    dl_dir, sb_dir = out / f"drlmpi_seed{args.seed}", out / f"sb3_seed{args.seed}"
    dl_cmd = [sys.executable, "-m", "drlmpi", "+experiment=ppo_breakout_16", f"seed={args.seed}",
              f"run.max_train_seconds={args.seconds:g}", f"hydra.run.dir={dl_dir}", *args.drlmpi_extra]
    sb_cmd = [sys.executable, str(Path(__file__).resolve()), str(sb_dir), "--sb3-worker",
              "--seconds", f"{args.seconds:g}", "--seed", str(args.seed), "--device", args.device]
    print(f"drlmpi on CPUs {cpu_list(sorted(drlmpi_cpus))}, SB3 on {cpu_list(sorted(sb3_cpus))}, "
          f"{args.seconds:g} s of training each; logs: {out}/drlmpi.log, {out}/sb3.log", flush=True)
    procs = {"drlmpi": start(dl_cmd, drlmpi_cpus, out / "drlmpi.log"),
             "sb3": start(sb_cmd, sb3_cpus, out / "sb3.log")}
    codes = wait_for(procs, {"drlmpi": dl_dir, "sb3": sb_dir}, out)
    subprocess.run([sys.executable, "-m", "drlmpi.report", str(dl_dir), str(sb_dir), "--out",
                    str(out / "report")], cwd=REPO_ROOT)
    rows = [side_row("drlmpi ppo_breakout_16", dl_dir, args.seconds, drlmpi_cpus),
            side_row(f"SB3 PPO (zoo, {ZOO_N_ENVS} envs)", sb_dir, args.seconds, sb3_cpus)]
    print("\nmean raw score of the last 100 games at each training time:")
    print("\n".join(table(rows, args.seconds)))
    (out / "comparison.json").write_text(json.dumps(
        {"seconds": args.seconds, "seed": args.seed, "exit_codes": codes, "rows": rows,
         "commands": {"drlmpi": dl_cmd[1:], "sb3": sb_cmd[1:]},
         "cpus": {"drlmpi": sorted(drlmpi_cpus), "sb3": sorted(sb3_cpus)},
         "sb3_hyperparameters": ZOO_PPO_ATARI, "sb3_n_envs": ZOO_N_ENVS}, indent=2) + "\n")
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
