"""``hydra/launcher=mpi``: every job of a multirun sweep gets its own MPI world.

Hydra ships no MPI launcher, and a job that needs N ranks cannot run inside the sweeping
process. This launcher composes each job's config *in the sweeping process*, validates it
with :func:`drlmpi.run.preflight.make_plan` (so a combination that cannot run - p2p on 4 ranks, DQN on
Pendulum - is skipped with a line saying why before any rank starts), then runs

    <mpiexec> <ranks_flag> N [<binding flags>] <extra_args> python -m mpi4py -m drlmpi
        <job overrides> hydra.run.dir=<sweep dir>/<subdir>

as a subprocess in its own process group, with the job's output in ``<run dir>/job.log``.
N is the job's ``world_size`` (or, when that is null, the smallest size its topology
accepts). A failed job is reported with its exit code and the tail of its log; the sweep goes
on with the remaining jobs, keeps ``jobs.json`` at the sweep root up to date, then ends with
its summary line, one line per failed job (its exit code and log) and exit code 6
(``SWEEP_FAILED_EXIT``), no traceback. The sweeping process never imports ``mpi4py.MPI``
(never initialises MPI).

One sweep per sweep directory (:mod:`drlmpi.sweep.lock`): before anything is written into
``hydra.sweep.dir`` or any job runs, a directory a live sweep holds (``sweep.lock``), or a
finished sweep's whose ``jobs.json`` lists other jobs under the same job numbers, is refused in
one line (exit code 2). With ``hydra/sweeper=drlmpi`` the whole job list is checked before the
basic sweeper writes ``multirun.yaml``; every launch checks its own jobs again (any sweeper).

Scheduling: by default jobs run one at a time, each with the whole machine. With ``cores=C``
(or ``cores=auto``: every core this process may use) jobs are packed onto C cores: a job of n
ranks takes n of them, jobs run side by side while their ranks fit, the most expensive first
(``run.max_env_steps`` x ranks); a job wider than C runs alone. Each running job is confined
to its own CPU list (the launcher process's affinity, inherited by mpiexec and every rank), and
the MPI library is told not to bind ranks itself (Open MPI ``--bind-to none``, MPICH
``-bind-to none``), so jobs side by side never share cores 0..n-1.

Resuming: a job whose run directory already holds a finished ``summary.json`` (from the same
overrides) is not run again but recorded as ``reused``; re-running the same command with the
same ``hydra.sweep.dir=...`` continues a sweep. ``deadline_s``: no job starts later than this
many seconds after the launcher started (composing the jobs included); the others are recorded
as skipped with that reason (running jobs are left to finish; ``timeout_s`` bounds them).

Every sweep directory gets ``provenance.json`` (:mod:`drlmpi.sweep.provenance`: the command,
commit, machine, GPUs, versions and launch command) before its jobs are composed.

Options (``hydra.launcher.<key>=...``, docs/experiments.md): ``mpiexec`` (list, default null:
the launch command of every drlmpi launch, ``DRLMPI_MPIEXEC`` or ``mpiexec``; e.g.
``[srun, --mpi=pmix]`` for this sweep alone), ``ranks_flag`` (``-n``), ``extra_args``,
``python``, ``timeout_s`` (per job), ``invalid`` (``skip`` | ``fail``), ``dry_run``, ``env``,
``cores``, ``bind`` (``auto`` | ``none``), ``deadline_s``, ``resume``, ``order``
(``auto`` | ``cost`` | ``listed``).
"""


import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional  # noqa: UP035 (OmegaConf needs typing generics)

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

from drlmpi.config.errors import ConfigError
from drlmpi.job_control.abort import CONFIG_ERROR_EXIT, SIGNAL_EXIT, SWEEP_FAILED_EXIT, end_job
from drlmpi.job_control.launchers import (
    check_launcher_setting,
    checking_sweep_jobs,
    launch_command,
    mpiexec_command,
    parse_cores,
)
from drlmpi.job_control.process import usable_cpus
from drlmpi.run.ownership import holder_text, is_stale, read_lock, say
from drlmpi.sweep import provenance
from drlmpi.sweep.jobs import JOBS_FILE, read_records, read_summary, recorded_overrides, write_records
from drlmpi.sweep.lock import claim_sweep, other_jobs
from drlmpi.sweep.scheduler import (
    CorePool,
    JobFailedError,
    Scheduler,
    SweepJob,
    _OneAtATime,
    shared_gpu_note,
)

log = logging.getLogger(__name__)


@dataclass
class MPILauncherConf:
    """Options of ``hydra/launcher=mpi`` (see the module docstring)."""

    # Hydra's plugin scanner loads this module outside sys.modules: no postponed annotations,
    # and OmegaConf needs typing's generics here.
    _target_: str = "hydra_plugins.drlmpi_launcher.mpi_launcher.MPILauncher"
    mpiexec: Optional[List[str]] = None  # noqa: UP006, UP045 (null: DRLMPI_MPIEXEC, else mpiexec)
    ranks_flag: str = "-n"
    extra_args: List[str] = field(default_factory=list)  # noqa: UP006
    python: Optional[str] = None  # noqa: UP045
    timeout_s: Optional[float] = None  # noqa: UP045
    invalid: str = "skip"
    dry_run: bool = False
    env: Dict[str, str] = field(default_factory=dict)  # noqa: UP006
    cores: Any = None            # null: one job at a time, unpinned | N | auto
    bind: str = "auto"           # auto: disjoint CPU lists when packing | none
    deadline_s: Optional[float] = None  # noqa: UP045
    resume: bool = True
    order: str = "auto"          # auto (cost when packing, else listed) | cost | listed


ConfigStore.instance().store(group="hydra/launcher", name="mpi", node=MPILauncherConf,
                             provider="drlmpi")




def job_ranks(cfg: DictConfig) -> int:
    """The world size a job asks for: ``world_size``, else the smallest its topology runs with
    this config (groups: a learner and a simulator per group)."""
    if cfg.get("world_size") is not None:
        return int(cfg.world_size)
    from drlmpi.run.preflight import resolve_classes

    return int(resolve_classes(cfg)[1].smallest_world(cfg.topology))


def job_folder(cfg: DictConfig, sweep_dir: Path, idx: int) -> Path:
    """The job's run directory: ``hydra.sweep.subdir`` in ``sweep_dir``, read with the ranks the
    job will run on where ``world_size`` is null (``..._star_n2``, not ``..._star_nNone``); the job's
    number where the subdir interpolates a broken value (the job is refused after, saying why)."""
    unset = False
    try:
        unset = cfg.get("world_size") is None
        if unset:
            with open_dict(cfg):
                cfg.world_size = job_ranks(cfg)
        return sweep_dir / str(cfg.hydra.sweep.subdir)
    except (ConfigError, OmegaConfBaseException):
        return sweep_dir / str(idx)
    finally:
        if unset:
            with open_dict(cfg):
                cfg.world_size = None


def job_cost(cfg: DictConfig, ranks: int) -> float:
    """A rough size of a job for ordering the queue: its step budget times its ranks."""
    try:
        steps = float(cfg.run.max_env_steps)
    except (AttributeError, TypeError, ValueError):
        steps = 1.0
    return steps * ranks


class MPILauncher(Launcher):
    """Runs each multirun job as ``mpiexec -n N python -m mpi4py -m drlmpi ...``."""

    def __init__(self, mpiexec: list[str] | None = None, ranks_flag: str = "-n",
                 extra_args: list[str] | None = None, python: str | None = None,
                 timeout_s: float | None = None, invalid: str = "skip", dry_run: bool = False,
                 env: dict[str, str] | None = None, cores: Any = None, bind: str = "auto",
                 deadline_s: float | None = None, resume: bool = True, order: str = "auto") -> None:
        for key, value in (("invalid", invalid), ("bind", bind), ("order", order), ("timeout_s", timeout_s),
                           ("deadline_s", deadline_s)):  # the command line's are refused before Hydra
            check_launcher_setting(key, value)
        self.mpiexec = list(mpiexec) if mpiexec else None  # None: the one setting, read at launch
        self.ranks_flag = ranks_flag
        self.extra_args = list(extra_args or [])
        self.python = python or sys.executable
        self.timeout_s = timeout_s
        self.invalid = invalid
        self.dry_run = dry_run
        self.env = dict(env or {})
        self.cores = parse_cores(cores)
        self.pin = self.cores is not None and bind == "auto"
        self.deadline_s = deadline_s
        self.resume = resume
        self.by_cost = order == "cost" or (order == "auto" and self.cores is not None)
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.recorded = False  # provenance.json written by this launcher (a tuner launches often)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def command(self, overrides: list[str], ranks: int, run_dir: Path) -> list[str]:
        """The command line of one job."""
        return [*self._drlmpi(ranks), *overrides, f"hydra.run.dir={run_dir}",
                "hydra.mode=RUN"]  # a preset may set MULTIRUN: the job itself is one run

    def replacing(self, run_dir: Path) -> list[str]:
        """``run.overwrite=true`` for a job run again over its finished run (``resume=false``:
        every job runs again), which the job would otherwise refuse; else nothing."""
        return ["run.overwrite=true"] if not self.resume and (run_dir / "summary.json").exists() else []

    def resume_command(self, ranks: int, run_dir: Path) -> list[str]:
        """The command line of a job that continues ``run_dir`` from its checkpoint."""
        return [*self._drlmpi(ranks), f"resume={run_dir}", "hydra.mode=RUN"]

    def _drlmpi(self, ranks: int) -> list[str]:
        """``mpiexec -n RANKS [flags] python -m mpi4py -m drlmpi``
        (:func:`~drlmpi.job_control.launchers.launch_command`): binding off when jobs are packed
        side by side, Open MPI's ``--oversubscribe`` when the ranks exceed the CPUs."""
        return launch_command(ranks, [self.python, "-m", "mpi4py", "-m", "drlmpi"], self.launcher(),
                              self.ranks_flag, unbind=self.pin, extra=self.extra_args)

    def launcher(self) -> list[str]:
        """``hydra.launcher.mpiexec`` when given, else the launch command of every drlmpi launch."""
        return self.mpiexec or mpiexec_command()

    @property
    def sweep_dir(self) -> Path:
        """``hydra.sweep.dir`` of the sweep this launcher runs."""
        assert self.config is not None
        return Path(self.config.hydra.sweep.dir)

    def claim(self, job_overrides, initial_job_idx: int = 0) -> None:
        """Make this process the sweep of ``hydra.sweep.dir`` for these jobs (numbered from
        ``initial_job_idx``): a directory a live sweep holds, or a finished sweep's that lists other
        jobs under their numbers, ends the sweep in one line (exit code 2) before it writes there."""
        sweep_dir = self.sweep_dir
        try:
            say(claim_sweep(sweep_dir))
            clash = other_jobs(sweep_dir, [list(o) for o in job_overrides], initial_job_idx)
            if clash is not None:
                raise ConfigError(clash)
        except ConfigError as exc:
            end_job(f"drlmpi: error: {exc}", CONFIG_ERROR_EXIT, abort=False)

    def launch(self, job_overrides, initial_job_idx: int) -> list[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        started = time.monotonic()  # deadline_s counts from here, composing the jobs included
        sweep_dir = self.sweep_dir
        self.claim(job_overrides, initial_job_idx)
        try:
            launcher = self.launcher()
        except ConfigError as exc:  # the launch command's setting: one line, before anything runs
            end_job(f"drlmpi: error: {exc}", CONFIG_ERROR_EXIT, abort=False)
        if not self.recorded:
            provenance.write(sweep_dir, ["python", "-m", "drlmpi", *sys.argv[1:]], launcher)
            self.recorded = True
        total = initial_job_idx + len(job_overrides)
        log.info(f"sweep: composing and checking {len(job_overrides)} job(s) ...")
        with checking_sweep_jobs():  # a job of the wrong size: its world_size=, not a launch command
            jobs = [self._prepare(initial_job_idx + i, list(o), sweep_dir, total)
                    for i, o in enumerate(job_overrides)]
        queue = [j for j in jobs if j.cmd]
        if self.by_cost:
            queue.sort(key=lambda j: -j.cost)  # stable: equal costs keep the listed order
        earlier = read_records(sweep_dir / JOBS_FILE)[0]

        def write() -> None:
            write_records(sweep_dir / JOBS_FILE, earlier, [j.record for j in jobs])

        write()
        stopped_by = None
        if queue:
            note = shared_gpu_note([j.record.get("device", "cpu") for j in queue], self.cores)
            if note is not None:
                log.warning(note)
            pool = _OneAtATime() if self.cores is None else CorePool(self.cores, usable_cpus())
            log.info(f"sweep: {len(queue)} job(s) to run"
                     + (f" on {self.cores} core(s)" if self.cores is not None else ", one at a time")
                     + f" in {sweep_dir}")
            scheduler = Scheduler(pool, self.pin, self.deadline_s, self.timeout_s,
                                  {**os.environ, **{k: str(v) for k, v in self.env.items()}},
                                  sweep_dir, total, write, started)
            scheduler.run(queue)
            stopped_by = scheduler.stopped_by
        for job in jobs:
            self._objective(job)
        write()
        counts = {s: sum(j.record.get("status") == s for j in jobs)
                  for s in ("ok", "reused", "failed", "skipped", "dry_run")}
        log.info("sweep: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s == "ok")
                 + f"; jobs listed in {sweep_dir / JOBS_FILE}")
        if any(j.record.get("reason", "").startswith("not started") for j in jobs):
            log.info("sweep: to continue, re-run the same command with "
                     f"hydra.sweep.dir={sweep_dir.resolve()}")
        if stopped_by is not None:  # as a run stopped by a signal: no traceback, exit status 4
            log.info(f"sweep: stopped by {stopped_by.name}")
            raise SystemExit(SIGNAL_EXIT)
        failed = [j for j in jobs if j.status == JobStatus.FAILED]  # a tuner's count as its worst value
        for job in failed:  # one line each; Hydra would raise the first one's error, a traceback
            log.error(f"sweep: failed: [{job.idx + 1}/{total}] {job.label}: {self._failure(job)}")
        if failed:
            raise SystemExit(SWEEP_FAILED_EXIT)
        return [self._job_return(j) for j in jobs]

    @staticmethod
    def _failure(job: SweepJob) -> str:
        """What became of a failed job, in a few words: its exit code and log, or why it never ran."""
        reason = job.record.get("reason")
        if job.record.get("returncode") is None:  # refused before it started
            return str(reason)
        why = f" ({reason})" if reason else ""
        return f"exit code {job.record['returncode']}{why}; log {job.run_dir / 'job.log'}"

    def _prepare(self, idx: int, overrides: list[str], sweep_dir: Path, total: int) -> SweepJob:
        """Compose and validate one job; decide whether it runs, is reused or is skipped."""
        from drlmpi.config.errors import ConfigError
        from drlmpi.run.preflight import make_plan

        label = " ".join(filter_overrides(overrides)) or "(defaults)"
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(cfg):
            cfg.hydra.job.id = idx
            cfg.hydra.job.num = idx
        run_dir = job_folder(cfg, sweep_dir, idx)
        job = SweepJob(idx, overrides, label, run_dir,
                       {"job": idx, "overrides": overrides, "run_dir": str(run_dir)}, cfg=cfg)
        tag = f"[{idx + 1}/{total}] {label}"
        try:
            job.ranks = job_ranks(cfg)
            job.record["device"] = str(make_plan(cfg, job.ranks).device)
        except (ConfigError, OmegaConfBaseException) as exc:  # the latter: e.g. a broken interpolation
            skip = self.invalid == "skip"
            job.record.update(status="skipped" if skip else "failed", returncode=None, reason=str(exc))
            job.status = JobStatus.COMPLETED if skip else JobStatus.FAILED
            job.value = (f"skipped: {exc}" if skip
                         else JobFailedError(f"job {idx} ({label}) cannot run: {exc}"))
            log.info(f"{tag}: skipped: {exc}")
            return job
        job.record["ranks"] = job.ranks
        job.cost = job_cost(cfg, job.ranks)
        holder = read_lock(run_dir)
        if holder is not None and not is_stale(holder):  # e.g. a job a killed sweep left running
            who = holder_text(holder) if holder else "an unreadable run.lock"
            reason = f"{run_dir} holds a live run ({who}): wait for it to end, then re-run the same command"
            job.record.update(status="failed", returncode=None, reason=reason)
            job.status, job.value = JobStatus.FAILED, JobFailedError(f"job {idx} ({label}): {reason}")
            log.error(f"{tag}: {reason}")
            return job
        summary = read_summary(run_dir) if self.resume else None
        stopped = summary is not None and summary.get("stop_reason") == "signal"
        if stopped:  # stopped by a signal with a checkpoint: the job continues from it
            summary = None
        if summary is not None:
            made_with = recorded_overrides(run_dir)
            if made_with is not None and made_with != overrides:
                reason = (f"{run_dir} holds a finished run of other overrides ({' '.join(made_with)}): "
                          "use a new hydra.sweep.dir, or the command that made it")
                job.record.update(status="failed", returncode=None, reason=reason)
                job.status, job.value = JobStatus.FAILED, JobFailedError(f"job {idx} ({label}): {reason}")
                log.error(f"{tag}: {reason}")
                return job
            job.record.update(status="reused", returncode=None,
                              reason="its run directory holds a finished summary.json")
            job.value = summary
            outcome = "solved" if summary.get("solved") else "not solved"
            log.info(f"{tag}: reused (finished earlier, {outcome})")
            return job
        cmd = self.command(overrides, job.ranks, run_dir) + self.replacing(run_dir)
        if stopped and recorded_overrides(run_dir) == overrides:
            cmd, job.resumes = self.resume_command(job.ranks, run_dir), True
            log.info(f"{tag}: stopped by a signal earlier: resuming it from its checkpoint")
        job.record["command"] = cmd
        if self.dry_run:
            job.record.update(status="dry_run", returncode=None)
            job.value = cmd
            log.info(f"{tag}: would run: {' '.join(cmd)}")
            return job
        job.cmd = cmd
        job.record["status"] = "queued"
        return job

    def _job_return(self, job: SweepJob) -> JobReturn:
        ret = JobReturn(overrides=job.overrides, cfg=job.cfg, hydra_cfg=None,
                        working_dir=str(job.run_dir), task_name="drlmpi", status=job.status)
        ret.return_value = job.value
        return ret

    def _objective(self, job: SweepJob) -> None:
        """With ``run.objective`` set, a job returns one float (what a tuner such as Hydra's
        Optuna sweeper needs): the field of its summary, or - for a job that failed, was skipped
        or never started - the worst value for the sweep's direction, so that one bad trial
        does not end the tuning session (the job's record still says what happened)."""
        from drlmpi.run.objective import objective_value, worst_value

        try:
            objective = job.cfg.run.get("objective") if job.cfg is not None else None
            unsolved = job.cfg.run.get("objective_unsolved") if objective else None
        except OmegaConfBaseException:  # a broken interpolation: the job was skipped for it
            return
        if not objective:
            return
        if isinstance(job.value, dict):
            value = objective_value(job.value, objective, unsolved)
        else:
            value = worst_value(self.config.hydra.sweeper.get("direction", "minimize"))
            log.info(f"[{job.idx + 1}] {job.label}: {job.record.get('status')}: objective "
                     f"{objective} counts as {value}")
        job.status, job.value = JobStatus.COMPLETED, value
        job.record["objective"] = {"name": objective, "value": value}
