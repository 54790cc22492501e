"""A central learner's ingest of one serve, the host work between a serve's arrival and its
forward pass: the rows of every arrived group built in one array
(:class:`~drlmpi.topologies.central.rows.RowBuilder`), then stored (``Learner.ingest_parts``:
the finiteness check, the copy to the learner's device, episode counting), on PPO Breakout's
rows (IMPALA preset's network; random observations)::

    python -m drlmpi.bench.ingest [--device cuda] [--groups 15] [--games 2 4 8] [--seconds 1]

prints, per ``--games`` (games a group: the preset's 8 games a simulator in ``topology.env_groups``
groups), microseconds a serve of ``--groups`` groups for building and for storing, and per row.
No episode ends and no action is forced (the common serve). On ``cuda`` the store includes the
pinned staging buffer's wait for the previous chunk's copy."""

from __future__ import annotations

import time

import numpy as np

from drlmpi.algos.ppo import PPO
from drlmpi.bench.learner import ATARI_SPEC, IMPALA, algo_settings
from drlmpi.config.inputs import ArgumentParser, positive_float, positive_int
from drlmpi.config.scopes import RunSettings
from drlmpi.device.staging import synchronize
from drlmpi.roles.learner import Learner
from drlmpi.topologies.central.rows import RowBuilder
from drlmpi.topologies.central.wire import Group, StepWire


def serves(groups: int, games: int, device: str, seconds: float) -> dict[str, float]:
    """Microseconds a serve of ``groups`` groups of ``games`` games: ``build`` and ``store``."""
    algo = PPO(ATARI_SPEC, algo_settings("ppo", 256, rollout_steps=3840, **IMPALA), device=device, seed=0)
    learner = Learner(algo, lambda: [], RunSettings(max_env_steps=None, max_train_seconds=None), None)
    learner.successive_rows()
    wire = StepWire(algo.layout)
    builder, rng = RowBuilder(wire), np.random.default_rng(0)
    arrived = [Group(source=1 + i, index=0, n_envs=games, stream_base=i * games, wire=wire)
               for i in range(groups)]
    obs = wire.slices["obs"]
    for group in arrived:
        group.buffer[:games, obs] = rng.random((games, obs.stop), dtype=np.float32)
        group.extras = np.zeros((games, algo.layout.extras_slice.stop - algo.layout.extras_slice.start),
                                dtype=np.float32)
    held = [group.buffer[:games, obs].copy() for group in arrived]
    parts = [(games, group.source, 0) for group in arrived]
    timed = {"build": 0.0, "store": 0.0}

    def one(count: bool) -> None:
        for group, kept in zip(arrived, held):
            group.obs = kept
        t0 = time.perf_counter()
        rows = learner.row_buffer(groups * games)
        builder.build(arrived, learner, rows)
        t1 = time.perf_counter()
        learner.ingest_parts(rows, parts)
        learner.pending_updates = 0  # no updates here: each frozen rollout is dropped
        algo.store.rollouts.clear()
        if count:
            timed["build"] += t1 - t0
            timed["store"] += time.perf_counter() - t1

    for _ in range(20):
        one(False)
    synchronize(algo.device)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        one(True)
        n += 1
    synchronize(algo.device)
    return {"build_us": timed["build"] / n * 1e6, "store_us": timed["store"] / n * 1e6, "serves": n}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m drlmpi.bench.ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="the learner's device (cpu, cuda)")
    parser.add_argument("--groups", type=positive_int, default=15, help="groups arriving together (a serve)")
    parser.add_argument("--games", type=positive_int, nargs="+", default=[2, 4, 8], help="games a group")
    parser.add_argument("--seconds", type=positive_float, default=1.0, help="timed seconds per case")
    args = parser.parse_args(argv)
    print(f"central ingest, PPO Breakout rows, {args.groups} groups a serve, device {args.device}")
    print(f"{'games a group':>14} {'rows':>5} {'build us':>9} {'store us':>9} {'us a row':>9}")
    for games in args.games:
        got = serves(args.groups, games, args.device, args.seconds)
        rows = args.groups * games
        print(f"{games:>14} {rows:>5} {got['build_us']:>9.1f} {got['store_us']:>9.1f} "
              f"{(got['build_us'] + got['store_us']) / rows:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
