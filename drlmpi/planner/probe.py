"""The planner's probe: a short measurement of the parts a run is made of, on this machine.

What it measures for the composed config (each with the run's own classes and options):

* ``sim_step_s``: a simulator's seconds per environment step - ``env.num_envs`` environments
  stepped by :meth:`Actor.collect` (the environment, ``env.sim_cost_ms``, acting with the policy
  on the CPU and packing the rows), divided by the steps;
* ``env_step_s``: the same stepping with actions chosen at random (what a ``central``
  simulator does: it never acts);
* ``act_s``: the learner device's seconds per batched forward pass at a few batch sizes, taken
  as ``central`` serves (:func:`~drlmpi.roles.learner.simulator_acting`: on a CUDA learner,
  captured passes that sample the actions);
* ``update_s``: seconds per update on the learner's device at the job's batch and at the
  smaller per-rank batches of the data-parallel topologies (``batch_rule=global``);
* ``updates_per_step`` (after ``learning_starts``) and ``ingest_row_s`` (storing one row);
* ``spread``: the relative half-range of three repeats of ``sim_step_s`` and of the update at
  the job's batch (a cell's range);
* ``latency_s`` and ``bandwidth_bytes_per_s`` of point-to-point messages: a ping-pong between two MPI
  ranks (:mod:`drlmpi.planner.pingpong`) of the run's row and weight sizes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from drlmpi.algos.random_policy import RandomPolicy
from drlmpi.bench.learner import random_rows, timed
from drlmpi.config.scopes import RunSettings
from drlmpi.device.determinism import apply_run_settings
from drlmpi.job_control.process import usable_cpus
from drlmpi.planner import LAUNCH_ENV, mpi_command
from drlmpi.roles.learner import simulator_acting
from drlmpi.run.preflight import make_plan, resolve_classes
from drlmpi.topologies.core.base import SyncFields
from drlmpi.topologies.core.pace import Probe

#: message latency and bandwidth assumed when no MPI launcher can run the ping-pong
ASSUMED_LATENCY_S = 5e-6
ASSUMED_BANDWIDTH_BPS = 5e9
#: steps per environment in one chunk of experience when the probed topology sends none
#: (``central``, which has no ``sync_every``): the chunked topologies' smallest default
CHUNKLESS_STEPS = 64


def _context(cfg: DictConfig, run_dir: Path):
    """A one-rank run context over MPI_COMM_SELF (the probe runs in this process alone)."""
    from mpi4py import MPI

    from drlmpi.mpi.timed import TimedComm
    from drlmpi.topologies.core.context import RunContext

    return RunContext(make_plan(cfg, smallest_world(cfg)), TimedComm(MPI.COMM_SELF), run_dir)


def _chunk_steps(cfg: DictConfig) -> int:
    """Steps per environment in one chunk of the probed topology's experience (its typed settings'
    ``sync_every``; :data:`CHUNKLESS_STEPS` for a topology without one)."""
    settings = resolve_classes(cfg)[1].settings_of(cfg.topology)
    return settings.sync_every if isinstance(settings, SyncFields) else CHUNKLESS_STEPS


def smallest_world(cfg: DictConfig) -> int:
    """The fewest ranks ``cfg``'s topology runs on (the probe itself runs in one process)."""
    return int(resolve_classes(cfg)[1].smallest_world(cfg.topology))


def _time_collect(actor: Any, seconds: float) -> float:
    """Seconds per environment step of ``actor.collect`` over about ``seconds``."""
    actor.collect(2)  # warm-up: resets, first forward pass
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or steps < 4:
        actor.collect(8)
        steps += 8
    return (time.perf_counter() - t0) / (steps * actor.n_envs)


def _repeated(measure: Callable[[], float], repeats: int = 3) -> tuple[float, float]:
    """The median of ``repeats`` measurements and their spread: half the range, relative."""
    values = sorted(measure() for _ in range(repeats))
    middle = float(np.median(values))
    return middle, (values[-1] - values[0]) / (2 * middle) if middle > 0 else 0.0


def remeasure(cfg: DictConfig, seconds: float) -> float:
    """A simulator's seconds per env step, measured again (the probe's first figure: whether
    the host drifted while the plan was made)."""
    with tempfile.TemporaryDirectory(prefix="drlmpi-plan-") as tmp:
        actor = _context(cfg, Path(tmp)).make_actor()
        try:
            return _time_collect(actor, seconds)
        finally:
            actor.close()


def _random_acting(ctx: Any, actor: Any) -> None:
    """Make ``actor`` act as ``algo=random`` does (a central simulator's share: stepping only)."""
    actor.algo.act = RandomPolicy(ctx.spec, {}, seed=ctx.seed, learner=False).act


def _learner_algo(ctx: Any, algo: Any) -> Any:
    return ctx.make_algo(learner=True, algo_cfg=algo)


def _fill(algo: Any, spec: Any) -> tuple[np.ndarray, float]:
    """Store enough random rows that updates are due; the seconds per stored row."""
    need = max(algo.warm_up_rows(), algo.minibatch_rows(), algo.rollout_rows(), 2048)
    rows = random_rows(algo.layout, spec, need)
    t0 = time.perf_counter()
    algo.observe(rows)
    return rows, (time.perf_counter() - t0) / need


def _update_step(algo: Any, rows: np.ndarray):
    """One update of ``algo`` per call (a PPO rollout is stored again whenever it is used up)."""
    algo.updates_due(len(rows))

    def step() -> object:
        if not algo.ready_to_update():
            algo.observe(rows)
            algo.updates_due(len(rows))
        return algo.update()

    return step


def _update_rate(algo: Any, rows: np.ndarray, seconds: float) -> float:
    """Seconds per update of ``algo``."""
    return 1.0 / timed(_update_step(algo, rows), seconds, torch.device(algo.device), min_updates=10)


def _jitter(algo: Any, rows: np.ndarray, seconds: float) -> float:
    """The spread of single updates' seconds (each synchronised): the median absolute deviation
    scaled to a normal distribution's standard deviation."""
    step, device = _update_step(algo, rows), torch.device(algo.device)
    samples: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or len(samples) < 10:
        t0 = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append(time.perf_counter() - t0)
    kept = np.asarray(samples[len(samples) // 5:])  # after a warm-up
    return float(1.4826 * np.median(np.abs(kept - np.median(kept))))  # robust to a rare pause


def _learner_costs(ctx: Any, chunk: int, seconds: float) -> tuple[float, float, float]:
    """The run's learner taking chunks of ``chunk`` random rows and training what they entitle:
    seconds per stored row, seconds per update, updates per row (after ``learning_starts``)."""
    learner = ctx.make_learner(log=False)
    algo = learner.algo
    warm = algo.warm_up_rows()
    if warm:
        learner.store(random_rows(algo.layout, ctx.spec, warm, seed=2))
        learner.train()
    rows = random_rows(algo.layout, ctx.spec, chunk, seed=3)
    stored = updates = 0
    store_s = train_s = 0.0
    rollout = algo.rollout_rows()
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or stored < max(2 * rollout, 4 * chunk):
        t0 = time.perf_counter()
        learner.ingest(rows, 1)
        t1 = time.perf_counter()
        updates += learner.train()
        store_s += t1 - t0
        train_s += time.perf_counter() - t1
        stored += chunk
        if time.perf_counter() - started > 10 * seconds:
            break
    return store_s / stored, train_s / max(1, updates), updates / stored


def _under_load(others: int, measure):
    """``measure()`` while ``others`` processes spin, as a full job's other ranks do while
    they wait in MPI."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
                for _ in range(others)]
    try:
        time.sleep(0.05)
        return measure()
    finally:
        for proc in spinners:
            proc.kill()
        for proc in spinners:
            proc.wait()


def per_rank_batches(batch: int | None, cores: int) -> list[int]:
    """The job's batch and its shares among 2, 4, ... ranks (down to one row), up to ``cores``."""
    if batch is None:
        return []
    sizes, n = {batch}, 2
    while n <= max(cores, 2) and batch // n >= 1:
        sizes.add(max(1, round(batch / n)))
        n *= 2
    return sorted(sizes)


def measure_messages(sizes: list[int], weight_bytes: int, ranks: int,
                     timeout_s: float = 90) -> tuple[float, float, dict[int, float], str]:
    """Latency, bandwidth and all-reduce seconds by ranks, from ``mpiexec -n ranks`` running
    :mod:`drlmpi.planner.pingpong` (``DRLMPI_MPIEXEC`` names another launcher); assumed
    point-to-point costs and no all-reduce figures when that cannot run."""
    cmd = mpi_command(max(2, ranks), "drlmpi.planner.pingpong", "--sizes", *map(str, sizes),
                      "--allreduce", str(weight_bytes))
    env = {**LAUNCH_ENV, "OMP_NUM_THREADS": "1"}
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        times = {int(k): float(v) for k, v in result["p2p"].items()}
        reduce = {int(k): float(v) for k, v in result["allreduce"].items()}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError, TypeError):
        return (ASSUMED_LATENCY_S, ASSUMED_BANDWIDTH_BPS, {},
                f"assumed (could not run {' '.join(cmd[:3])} ...)")
    small, large = min(times), max(times)
    latency = times[small]
    bandwidth = ((large - small) / max(times[large] - latency, 1e-9) if large > small
                 else ASSUMED_BANDWIDTH_BPS)
    return latency, bandwidth, reduce, f"{cmd[0]} -n {max(2, ranks)}: ping-pong and all-reduce"


def probe(cfgs: dict[str, Any], seconds: float = 1.0) -> Probe:
    """Measure the parts of a run of ``cfgs`` (one composed config per topology: the algorithm,
    environment and device are the same in all). ``seconds``: per measured quantity."""
    started = time.perf_counter()
    cfg = next(iter(cfgs.values()))
    apply_run_settings(cfg.run)  # the run's numerics (run.deterministic, run.matmul_precision)
    cores = len(usable_cpus())
    notes: list[str] = []
    spread: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="drlmpi-plan-") as tmp:
        ctx = _context(cfg, Path(tmp))
        actor = ctx.make_actor()
        try:
            sim_step, spread["sim_step_s"] = _repeated(lambda: _time_collect(actor, seconds / 3))
            loads = sorted({n for n in (cores // 2, cores) if n >= 4})
            slow_sim = {n: _under_load(n - 1, lambda: _time_collect(actor, seconds / 3)) / sim_step
                        for n in loads}
            seen = np.asarray(actor.obs)
            _random_acting(ctx, actor)
            env_step = _time_collect(actor, seconds / 2)
        finally:
            actor.close()
        job = ctx.cfg  # the job's typed settings
        learner = _learner_algo(ctx, job.algo)
        rows, ingest = _fill(learner, ctx.spec)
        batch = learner.minibatch_rows() or None
        update_s: dict[int, float] = {}
        jitter, learner_update, rho = 0.0, 0.0, 0.0
        slowdown = dict(slow_sim)
        learns = type(learner).__name__ != "RandomPolicy" and batch is not None
        if learns:
            from drlmpi.topologies.core.data_parallel.batch_rule import per_rank_algo_config

            for size in per_rank_batches(batch, cores):
                if size == batch:  # the job's own batch: three repeats, their spread kept
                    update_s[size], spread["update_s"] = _repeated(
                        lambda: _update_rate(learner, rows, seconds / 6))
                    continue
                try:
                    ranks = max(1, round(batch / size))
                    share = per_rank_algo_config(job.algo, ranks, "global").algo_cfg
                except Exception:  # noqa: BLE001 (a share the batch rule refuses: not measured)
                    continue
                algo = _learner_algo(ctx, share)
                update_s[algo.minibatch_rows()] = _update_rate(algo, _fill(algo, ctx.spec)[0], seconds / 2)
            jitter = _jitter(learner, rows, seconds / 2)
            bare = update_s[batch]
            slowdown = {n: max(slow_sim[n], 1.0 / _under_load(
                n - 1, lambda: timed(_update_step(learner, rows), seconds / 3,
                                     torch.device(learner.device), min_updates=10)) / bare)
                        for n in loads}
            chunk = _chunk_steps(cfg) * job.env.num_envs
            ingest, learner_update, rho = _learner_costs(ctx, chunk, seconds)
        act_s = {}
        obs = np.resize(seen, (256, *seen.shape[1:]))  # observations the actor saw, repeated
        serve = simulator_acting(learner, 256)  # as central serves: captured passes on a CUDA learner
        for n in (1, 16, 256):
            serve(obs[:n], 0)  # its bucket's graph captured before the clock
            t0, k = time.perf_counter(), 0
            while time.perf_counter() - t0 < seconds / 6 or k < 3:
                serve(obs[:n], 0)  # returns on the host: every pass waited for
                k += 1
            act_s[n] = (time.perf_counter() - t0) / k
        row_bytes = int(learner.layout.width * 4)
        weight_bytes = int(learner.policy.flat.numel * 4)
    chunk_bytes = row_bytes * _chunk_steps(cfg) * ctx.cfg.env.num_envs
    latency, bandwidth, reduce, source = measure_messages(
        sorted({8, row_bytes, weight_bytes, chunk_bytes}), weight_bytes, min(cores, 64))
    if source.startswith("assumed"):
        notes.append(f"message costs {source}")
    gpus = torch.cuda.device_count() if str(ctx.device).startswith("cuda") else 0
    return Probe(cores=cores, device=str(ctx.device), gpus=max(1, gpus), num_envs=ctx.cfg.env.num_envs,
                 deterministic=RunSettings.coerce(cfg.run).deterministic, image=bool(ctx.spec.image),
                 sim_step_s=sim_step, env_step_s=env_step, act_s=act_s, update_s=update_s,
                 update_jitter_s=jitter,
                 learner_update_s=learner_update or update_s.get(batch or 0, 0.0),
                 batch_size=batch, updates_per_step=rho,
                 learning_starts=learner.warm_up_rows(), ingest_row_s=ingest,
                 slowdown=slowdown, allreduce_s=reduce,
                 row_bytes=row_bytes, weight_bytes=weight_bytes, latency_s=latency,
                 bandwidth_bytes_per_s=bandwidth, comm_source=source,
                 probe_seconds=time.perf_counter() - started, notes=notes, spread=spread)
