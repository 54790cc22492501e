"""One experiment on this MPI world: plan it (every check, once), build the topology, run it,
summarise. Once the ranks are connected, each runs a watchdog (:mod:`drlmpi.job_control.watchdog`): a
rank that stops making progress for ``run.rank_timeout_s`` ends the job.
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from drlmpi.config.errors import NonFiniteError
from drlmpi.device.determinism import apply_run_settings
from drlmpi.job_control.process import cpu_list, usable_cpus
from drlmpi.job_control.progress import PROGRESS
from drlmpi.job_control.stop import STOP, stopped_by_signal_line
from drlmpi.job_control.watchdog import start_watchdog
from drlmpi.mpi.timed import TimedComm
from drlmpi.outputs.files import atomic_save
from drlmpi.outputs.summary import format_summary, write_summary
from drlmpi.run.memory import MemorySampler
from drlmpi.run.preflight import make_plan
from drlmpi.run.summary import build_summary
from drlmpi.topologies.core.context import RunContext, RunPlan

POLICY_FILE = "policy.pt"
logger = logging.getLogger("drlmpi")


def run_experiment(cfg: DictConfig, world: Any, run_dir: Path, *, hang_exit: int) -> dict[str, Any] | None:
    """Run ``cfg`` on the MPI communicator ``world``; rank 0 returns the summary.

    ``hang_exit``: the exit code of a job the watchdog ends (a rank made no progress for
    ``run.rank_timeout_s``).
    """
    plan = make_plan(cfg, world.Get_size())
    torch.set_num_threads(plan.cfg.threads_per_rank)
    apply_run_settings(plan.cfg.run)
    on_signal = plan.cfg.run.checkpoint_on_signal
    if on_signal:  # before the first collective: a stale request of an earlier part is gone
        STOP.install(run_dir, world.Get_rank())
    # The first collective waits for every rank to finish validating (start-up skew); the
    # watchdog counts from when all are connected.
    comm = TimedComm(world.Dup())
    watchdog = start_watchdog(plan.cfg.run.rank_timeout_s, comm.rank, comm.size, Path(run_dir),
                              exit_code=hang_exit)
    memory = MemorySampler.start_if(plan.cfg.run.memory_sample_s)
    try:
        return _run(plan, run_dir, comm, memory)
    finally:
        if watchdog is not None:
            watchdog.stop()
        if on_signal:
            STOP.uninstall()


def start_lines(plan: RunPlan, run_dir: Path) -> list[str]:
    """What rank 0 says before training: the banner, the checkpoint a resumed run continues, and
    what the budget cannot reach."""
    cfg = plan.cfg
    run = cfg.run
    budgets = [f"{value:,.0f} {what}" for value, what in (
        (run.max_env_steps, "env steps"), (run.max_train_seconds, "s of training"),
        (run.max_episodes, "episodes")) if value is not None]
    label = plan.topology_cls.report_label(cfg.topology)
    lines = [f"drlmpi: {cfg.algo.name} on {cfg.env.id} | topology {label}, {plan.world_size} rank(s) | "
             f"device {plan.device} | budget {' or '.join(budgets) or 'none'} | "
             f"run directory {Path(run_dir).resolve()}"]
    meta = plan.resume_meta
    if meta is not None:
        lines.append(f"drlmpi: resumed from checkpoint generation {meta['generation']} at "
                     f"{int(meta['env_steps']):,} env steps, {int(meta['updates']):,} updates, "
                     f"{float(meta['train_seconds']):.0f} s of training (saved {meta.get('saved_at', '?')})")
    if plan.job_options:
        lines.append(f"drlmpi: for this job's {plan.world_size} rank(s): " + ", ".join(
            f"algo.{key}={value}" for key, value in plan.job_options.items()))
    lines += [f"drlmpi: warning: {text}" for text in plan.warnings]
    lines += [f"drlmpi: hint: {text}" for text in plan.topology_cls.hints(plan)]
    return lines


def _run(plan: RunPlan, run_dir: Path, comm: TimedComm,
         memory: MemorySampler | None) -> dict[str, Any] | None:
    start = time.perf_counter()
    ctx = RunContext(plan, comm, run_dir)
    if comm.rank == 0:
        for line in start_lines(plan, run_dir):
            logger.info(line)
    topology = plan.topology_cls(plan.cfg.topology)
    try:
        report = topology.run(ctx)
    except NonFiniteError as exc:
        raise NonFiniteError(f"{exc}; {_keep_finite_policy(exc.policy, run_dir)}") from None
    report.wall_s = time.perf_counter() - start
    wait_in_run = comm.wait_s  # the waits of the span wall_s measures: their share lies in [0, 1]
    learner = report.learner
    by_signal = False
    if plan.cfg.run.checkpoint_on_signal:
        decided = learner.stop_reason() if comm.rank == 0 and learner is not None else None
        by_signal = comm.bcast_object(decided == "signal", root=0, kind="stop")
        if by_signal:
            ctx.final_checkpoint(learner)
            STOP.clear_file()
    STOP.stopped_run = by_signal
    report.extra.update(comm.stats())
    # A rank that finished its part early waits here for the others (the stop decision below
    # the learner's last updates): kept apart, so that mpi_wait_s / wall_s stays a share.
    report.extra["mpi_wait_after_run_s"] = report.extra["mpi_wait_s"] - wait_in_run
    report.extra["mpi_wait_s"] = wait_in_run
    report.extra["host"] = socket.gethostname()  # where this rank ran
    report.extra["cpus"] = cpu_list(usable_cpus())  # the cores it could run on (bind_ranks)
    if memory is not None:
        report.extra["rss_kib"] = memory.stop()
    if learner is not None:
        if comm.rank == 0:
            learner.check_weights()  # never a NaN policy.pt (a loss read before would have said)
            PROGRESS.begin("writing %s", POLICY_FILE)
            atomic_save(learner.algo.state_dict(), Path(run_dir) / POLICY_FILE)
            PROGRESS.done()
        learner.close()
    if ctx.log is not None:
        ctx.log.close()
    reports = comm.gather_objects(report.to_dict(), root=0, kind="reports")
    summary = None
    if comm.rank == 0:
        PROGRESS.begin("writing the summary")
        summary = build_summary(plan, run_dir, reports, learner)
        write_summary(run_dir, summary)
        if ctx.log is not None:
            ctx.log.finish(summary)
        PROGRESS.done()
        print(format_summary(summary), flush=True)
        if by_signal:
            print(stopped_by_signal_line(STOP.requested() or "a signal", run_dir), flush=True)
    comm.free()
    return summary


def _keep_finite_policy(policy: dict[str, Any] | None, run_dir: Path) -> str:
    """On a non-finite stop: write the learner's policy as ``policy.pt`` while its weights are
    still finite (experience is checked before it is stored, so they usually are); never a NaN
    one, and none where a simulator stopped the run (it holds no learner). Data-parallel
    learners may do this at once with the same weights: the file is renamed into place whole.
    Says what became of ``policy.pt``."""
    path = Path(run_dir) / POLICY_FILE
    if policy is None:  # the weights were not finite, or a simulator saw it
        return f"no {POLICY_FILE} written"
    atomic_save(policy, path, shared=True)
    return f"the last finite policy is in {path}"
