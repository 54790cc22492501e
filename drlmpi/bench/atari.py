"""Environment steps/s of ALE games: the raw emulator vs the pipeline every run uses
(``AtariVectorEnv`` with its preprocessing, through drlmpi's bank), with one thread and with
``--threads`` threads: ``OMP_NUM_THREADS=1 python -m drlmpi.bench.atari [ALE ids] [--envs 8]
[--threads 2]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from drlmpi.config.inputs import ArgumentParser, positive_int
from drlmpi.envs.atari import ale_settings, register_ale
from drlmpi.envs.atari_bank import AleBank, make_atari


def _single(env: gym.Env) -> Callable[[np.ndarray], None]:
    """One environment stepped through the Gymnasium API (resets included)."""
    def run(actions: np.ndarray) -> None:
        for a in actions[:, 0]:
            _, _, terminated, truncated, _ = env.step(int(a))
            if terminated or truncated:
                env.reset()
    return run


def _bank(bank: AleBank) -> Callable[[np.ndarray], None]:
    def run(actions: np.ndarray) -> None:
        for row in actions:
            bank.step(row)
    return run


def benchmark(env_id: str = "ALE/Tetris-v5", envs: int = 4, threads: int = 2, steps: int = 1500,
              rounds: int = 4) -> dict[str, tuple[float, float]]:
    """``name -> (environment steps per wall second, CPU seconds per wall second)`` for random
    actions: one raw ``gymnasium.make(env_id, frameskip=4)`` (grayscale, no preprocessing), the
    evaluation adapter (one environment), and a training bank of ``envs`` environments stepped by
    1 and by ``threads`` threads. Wall time, because the bank's threads run beside this one; the
    median over ``rounds`` interleaved rounds of ``steps`` agent steps (of every environment), so
    that other load on the host hits all alike."""
    register_ale()
    raw = gym.make(env_id, frameskip=4, repeat_action_probability=0.0, obs_type="grayscale")
    adapter = make_atari(env_id, train=False)
    settings = ale_settings(env_id, train=True)
    banks = {f"bank_{envs}envs_1thread": AleBank(settings, envs, num_threads=1),
             f"bank_{envs}envs_{threads}threads": AleBank(settings, envs, num_threads=threads)}
    raw.reset(seed=0)
    adapter.reset(seed=0)
    cases: dict[str, tuple[Callable[[np.ndarray], None], int]] = {
        "raw_frameskip4": (_single(raw), 1), "adapter_1env": (_single(adapter), 1)}
    for name, bank in banks.items():
        bank.reset(0)
        cases[name] = (_bank(bank), bank.n)
    rng = np.random.default_rng(0)
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (run, n) in cases.items():
            actions = rng.integers(0, settings.n_actions, (steps, n))
            wall, cpu = time.perf_counter(), time.process_time()
            run(actions)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            rates[name].append((steps * n / wall, cpu / wall))
    raw.close()
    adapter.close()
    for bank in banks.values():
        bank.close()
    return {name: (float(np.median([r for r, _ in got])), float(np.median([c for _, c in got])))
            for name, got in rates.items()}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: one line per game."""
    parser = ArgumentParser(prog="python -m drlmpi.bench.atari", description=__doc__.splitlines()[0])
    parser.add_argument("env_ids", nargs="*", default=["ALE/Tetris-v5", "ALE/Breakout-v5"])
    parser.add_argument("--envs", type=positive_int, default=4, help="environments of the bank (default 4)")
    parser.add_argument("--threads", type=positive_int, default=2,
                        help="threads of the second bank (default 2)")
    parser.add_argument("--steps", type=positive_int, default=1500,
                        help="agent steps per round (default 1500)")
    parser.add_argument("--rounds", type=positive_int, default=4, help="interleaved rounds (default 4)")
    args = parser.parse_args(argv)
    register_ale()
    for env_id in args.env_ids:  # before the first game's measurements, not after
        try:
            if not env_id.startswith("ALE/"):
                raise gym.error.Error("not an ALE id (ALE/<Game>-v5)")
            gym.spec(env_id)
        except gym.error.Error as exc:
            parser.error(f"{env_id} is not a game this benchmark can step: {exc}")
    for env_id in args.env_ids:
        rates = benchmark(env_id, args.envs, args.threads, args.steps, args.rounds)
        print(env_id, "  ".join(f"{name}: {rate:.0f} steps/s (cpu/wall {cpu:.2f})"
                                for name, (rate, cpu) in rates.items()))


if __name__ == "__main__":  # pragma: no cover
    main()
