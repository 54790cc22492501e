"""The planner's probe: a short measurement of the parts a run is made of, on this machine.

What it measures for the composed config (each with the run's own classes and options):

* ``sim_step_s``: a simulator's seconds per environment step - ``env.num_envs`` environments
  stepped by :meth:`Actor.collect` (the environment, ``env.sim_cost_ms``, acting with the policy
  on the CPU and packing the rows), divided by the steps;
* ``env_step_s``: the same stepping with actions chosen at random (what a ``central``
  simulator does: it never acts);
* ``act_s``: the learner device's seconds per batched forward pass at a few batch sizes
  (``central``'s serves);
* ``update_s``: seconds per update on the learner's device at the job's batch and at the
  smaller per-rank batches of the data-parallel topologies (``batch_rule=global``);
* ``updates_per_step`` (after ``learning_starts``) and ``ingest_row_s`` (storing one row);
* ``latency_s`` and ``bandwidth_bytes_per_s`` of point-to-point messages: a ping-pong between two MPI
  ranks (:mod:`drlmpi.planner.pingpong`) of the run's row and weight sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.utils import get_class
from omegaconf import OmegaConf

from drlmpi.bench.learner import random_rows, timed
from drlmpi.run.plan import make_plan

#: message latency and bandwidth assumed when no MPI launcher can run the ping-pong
ASSUMED_LATENCY_S = 5e-6
ASSUMED_BANDWIDTH_BPS = 5e9


@dataclass
class Probe:
    """What the probe measured (every time in seconds)."""

    cores: int
    device: str
    num_envs: int
    sim_step_s: float
    env_step_s: float
    act_s: dict[int, float]
    update_s: dict[int, float]
    batch_size: int | None
    updates_per_step: float
    learning_starts: int
    ingest_row_s: float
    row_bytes: int
    weight_bytes: int
    latency_s: float
    bandwidth_bytes_per_s: float
    comm_source: str
    probe_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def update_at(self, batch: int | None) -> float:
        """Seconds per update at ``batch`` rows, interpolated linearly between measured sizes."""
        if not self.update_s:
            return 0.0
        if batch is None or len(self.update_s) == 1:
            return self.update_s[max(self.update_s)]
        sizes = sorted(self.update_s)
        return float(np.interp(batch, sizes, [self.update_s[b] for b in sizes]))

    def act_at(self, rows: int) -> float:
        sizes = sorted(self.act_s)
        return float(np.interp(rows, sizes, [self.act_s[b] for b in sizes]))

    def message_s(self, nbytes: float) -> float:
        """One-way seconds of a point-to-point message of ``nbytes``."""
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s

    def to_json(self) -> dict[str, Any]:
        return {k: ({str(b): t for b, t in v.items()} if isinstance(v, dict) else v)
                for k, v in asdict(self).items()}


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        return os.cpu_count() or 1


def _context(cfg: Any, run_dir: Path):
    """A one-rank run context over MPI_COMM_SELF (the probe runs in this process alone)."""
    from mpi4py import MPI

    from drlmpi.mpi.timed import TimedComm
    from drlmpi.topologies.base import RunContext

    return RunContext(make_plan(cfg, 1), TimedComm(MPI.COMM_SELF), run_dir)


def _time_collect(actor: Any, seconds: float) -> float:
    """Seconds per environment step of ``actor.collect`` over about ``seconds``."""
    actor.collect(2)  # warm-up: resets, first forward pass
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or steps < 4:
        actor.collect(8)
        steps += 8
    return (time.perf_counter() - t0) / (steps * actor.n_envs)


def _random_acting(actor: Any) -> None:
    """Make ``actor`` act at random (a central simulator's share: stepping only)."""
    algo = actor.algo
    space = algo.spec

    def act(obs: np.ndarray, env_steps: int, explore: bool):  # noqa: ARG001
        n = len(obs)
        if space.discrete:
            return np.random.randint(0, space.n_actions, size=(n, 1)).astype(np.float32), None
        low, high = np.asarray(space.action_low), np.asarray(space.action_high)
        return np.random.uniform(low, high, size=(n, space.action_dim)).astype(np.float32), None

    algo.act = act


def _learner_algo(ctx: Any, algo_cfg: Any) -> Any:
    return get_class(str(algo_cfg["_target_"]))(ctx.spec, OmegaConf.create(algo_cfg), device=ctx.device,
                                                seed=0, learner=True)


def _fill(algo: Any, spec: Any) -> tuple[np.ndarray, float]:
    """Store enough random rows that updates are due; the seconds per stored row."""
    need = max(int(algo.cfg.get("learning_starts") or 0), int(algo.cfg.get("batch_size") or 1),
               int(algo.cfg.get("rollout_steps") or 0), 2048)
    rows = random_rows(algo.layout, spec, need)
    t0 = time.perf_counter()
    algo.observe(rows)
    return rows, (time.perf_counter() - t0) / need


def _update_rate(algo: Any, rows: np.ndarray, seconds: float) -> float:
    """Seconds per update of ``algo`` (a PPO rollout is stored again whenever it is used up)."""
    algo.updates_due(len(rows))

    def step() -> object:
        if not algo.ready_to_update():
            algo.observe(rows)
            algo.updates_due(len(rows))
        return algo.update()

    return 1.0 / timed(step, seconds, torch.device(algo.device), min_updates=10)


def _updates_per_step(algo_cfg: Any, ctx: Any) -> float:
    algo = _learner_algo(ctx, algo_cfg)
    rows, _ = _fill(algo, ctx.spec)
    algo.updates_due(len(rows))  # the fill itself (learning_starts) is not the steady state
    extra = random_rows(algo.layout, ctx.spec, max(len(rows), 4096), seed=1)
    algo.observe(extra)
    return algo.updates_due(len(extra)) / len(extra)


def per_rank_batches(batch: int | None, cores: int) -> list[int]:
    """The job's batch and its shares among 2, 4, ... ranks (down to one row), up to ``cores``."""
    if batch is None:
        return []
    sizes, n = {batch}, 2
    while n <= max(cores, 2) and batch // n >= 1:
        sizes.add(max(1, round(batch / n)))
        n *= 2
    return sorted(sizes)


def ping_pong(sizes: list[int], timeout_s: float = 60) -> tuple[float, float, str]:
    """Latency and bandwidth of messages between two ranks, from ``mpiexec -n 2`` running
    :mod:`drlmpi.planner.pingpong`; assumed values when that cannot run."""
    launcher = os.environ.get("DRLMPI_PLAN_MPIEXEC", "mpiexec").split()
    cmd = [*launcher, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "drlmpi.planner.pingpong",
           *map(str, sizes)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        times = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return ASSUMED_LATENCY_S, ASSUMED_BANDWIDTH_BPS, f"assumed (could not run {' '.join(cmd[:3])} ...)"
    small, large = min(times, key=int), max(times, key=int)
    latency = float(times[small])
    spread = int(large) - int(small)
    bandwidth = spread / max(float(times[large]) - latency, 1e-9) if spread > 0 else ASSUMED_BANDWIDTH_BPS
    return latency, bandwidth, f"ping-pong of {', '.join(sorted(times, key=int))} bytes ({launcher[0]} -n 2)"


def probe(cfgs: dict[str, Any], seconds: float = 1.0) -> Probe:
    """Measure the parts of a run of ``cfgs`` (one composed config per topology: the algorithm,
    environment and device are the same in all). ``seconds``: per measured quantity."""
    started = time.perf_counter()
    cfg = next(iter(cfgs.values()))
    cores = usable_cores()
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="drlmpi-plan-") as tmp:
        ctx = _context(cfg, Path(tmp))
        actor = ctx.make_actor(0)
        try:
            sim_step = _time_collect(actor, seconds)
            seen = np.asarray(actor.obs)
            _random_acting(actor)
            env_step = _time_collect(actor, seconds / 2)
        finally:
            actor.close()
        algo_cfg = OmegaConf.to_container(cfg.algo, resolve=True)
        learner = _learner_algo(ctx, algo_cfg)
        rows, ingest = _fill(learner, ctx.spec)
        batch = algo_cfg.get("batch_size")
        update_s: dict[int, float] = {}
        learns = type(learner).__name__ != "RandomPolicy" and batch is not None
        if learns:
            from drlmpi.topologies.data_parallel.batch_rule import per_rank_algo_config

            for size in per_rank_batches(int(batch), cores):
                ranks = max(1, round(int(batch) / size))
                try:
                    share = per_rank_algo_config(algo_cfg, ranks, "global").algo_cfg
                except Exception:  # noqa: BLE001 (a share the batch rule refuses: not measured)
                    continue
                algo = learner if size == int(batch) else _learner_algo(ctx, share)
                if algo is not learner:
                    _fill(algo, ctx.spec)
                update_s[int(share.get("batch_size", size))] = _update_rate(
                    algo, rows if algo is learner else random_rows(algo.layout, ctx.spec, len(rows)),
                    seconds / 2)
        rho = _updates_per_step(algo_cfg, ctx) if learns else 0.0
        act_s = {}
        obs = np.resize(seen, (256, *seen.shape[1:]))  # observations the actor saw, repeated
        for n in (1, 16, 256):
            t0, k = time.perf_counter(), 0
            while time.perf_counter() - t0 < seconds / 6 or k < 3:
                learner.act(obs[:n], 0, False)
                k += 1
            if str(ctx.device).startswith("cuda"):
                torch.cuda.synchronize()
            act_s[n] = (time.perf_counter() - t0) / k
        row_bytes = int(learner.layout.width * 4)
        weight_bytes = int(learner.policy.flat.numel * 4)
    chunk = row_bytes * int(cfg.topology.get("sync_every", 64)) * int(cfg.env.num_envs)
    latency, bandwidth, source = ping_pong(sorted({8, row_bytes, weight_bytes, chunk}))
    if source.startswith("assumed"):
        notes.append(f"message costs {source}")
    return Probe(cores=cores, device=str(ctx.device), num_envs=int(cfg.env.num_envs),
                 sim_step_s=sim_step, env_step_s=env_step, act_s=act_s, update_s=update_s,
                 batch_size=None if batch is None else int(batch), updates_per_step=rho,
                 learning_starts=int(algo_cfg.get("learning_starts") or 0), ingest_row_s=ingest,
                 row_bytes=row_bytes, weight_bytes=weight_bytes, latency_s=latency,
                 bandwidth_bytes_per_s=bandwidth, comm_source=source,
                 probe_seconds=time.perf_counter() - started, notes=notes)
