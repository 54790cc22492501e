"""Steps/s of ALE games: the raw emulator and the preprocessed environments, one core
(``OMP_NUM_THREADS=1 python -m drlmpi.bench.atari [ALE ids]``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from drlmpi.envs.atari import make_atari, register_ale

# --------------------------------------------------------------------------------------------------
# Cost measurement: python -m drlmpi.bench.atari [ALE id ...]


def _rate(env: gym.Env, actions: np.ndarray) -> float:
    import time

    start = time.process_time()
    for a in actions:
        _, _, terminated, truncated, _ = env.step(int(a))
        if terminated or truncated:
            env.reset()
    return len(actions) / (time.process_time() - start)


def benchmark(env_id: str = "ALE/Tetris-v5", steps: int = 2000, rounds: int = 5) -> dict[str, float]:
    """Agent steps per CPU second of this process (random actions; resets included) of the raw
    emulator at frame skip 4 vs. the full preprocessing (training and evaluation stacks): the
    median over ``rounds`` interleaved rounds of ``steps`` steps each, so that other load on the
    host hits all alike. Run it with ``OMP_NUM_THREADS=1`` for one core's figure."""
    register_ale()
    envs = {"raw_frameskip4": gym.make(env_id, frameskip=4, repeat_action_probability=0.0,
                                       obs_type="grayscale"),
            "preprocessed_train": make_atari(env_id, train=True),
            "preprocessed_eval": make_atari(env_id, train=False)}
    rng = np.random.default_rng(0)
    rates: dict[str, list[float]] = {name: [] for name in envs}
    for env in envs.values():
        env.reset(seed=0)
    for _ in range(rounds):
        actions = rng.integers(0, envs["raw_frameskip4"].action_space.n, steps)
        for name, env in envs.items():
            rates[name].append(_rate(env, actions))
    for env in envs.values():
        env.close()
    return {name: float(np.median(r)) for name, r in rates.items()}


if __name__ == "__main__":  # pragma: no cover
    import sys

    for env_id in sys.argv[1:] or ["ALE/Tetris-v5", "ALE/Breakout-v5"]:
        rates = benchmark(env_id)
        raw = rates["raw_frameskip4"]
        print(env_id, "  ".join(f"{k}: {v:.0f} steps/s" for k, v in rates.items()),
              f" (preprocessing: +{1e6 / rates['preprocessed_train'] - 1e6 / raw:.0f} us/step)")
