"""``hydra/launcher=mpi``: every job of a multirun sweep gets its own MPI world.

Hydra ships no MPI launcher, and a job that needs N ranks cannot run inside the sweeping
process. This launcher composes each job's config *in the sweeping process*, validates it
with :func:`drlmpi.run.validate` (so a combination that cannot run - p2p on 4 ranks, DQN on
Pendulum - is skipped with a line saying why before any rank starts), then runs

    <mpiexec> <ranks_flag> N [<binding flags>] <extra_args> python -m mpi4py -m drlmpi
        <job overrides> hydra.run.dir=<sweep dir>/<subdir>

as a subprocess in its own process group, with the job's output in ``<run dir>/job.log``.
N is the job's ``world_size`` (or, when that is null, the smallest size its topology
accepts). A failed job is reported with its exit code and the tail of its log; the sweep goes
on with the remaining jobs, keeps ``jobs.json`` at the sweep root up to date and then lets
Hydra exit non-zero. The sweeping process never imports ``mpi4py.MPI`` (never initialises MPI).

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

Options (``hydra.launcher.<key>=...``, docs/experiments.md): ``mpiexec`` (list, default
``[mpiexec]``; e.g. ``[srun, --mpi=pmix]``), ``ranks_flag`` (``-n``), ``extra_args``,
``python``, ``timeout_s`` (per job), ``invalid`` (``skip`` | ``fail``), ``dry_run``, ``env``,
``cores``, ``bind`` (``auto`` | ``none``), ``deadline_s``, ``resume``, ``order``
(``auto`` | ``cost`` | ``listed``).
"""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional  # noqa: UP035 (OmegaConf needs typing generics)

import yaml
from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

log = logging.getLogger(__name__)
LOG_TAIL_LINES = 15
JOBS_FILE = "jobs.json"
POLL_S = 0.2
# Launcher commands whose MPI library is asked for its flavour (to switch its own binding off).
MPIEXEC_NAMES = ("mpiexec", "mpirun", "mpiexec.hydra", "orterun", "prterun", "mpiexec.mpich",
                 "mpirun.mpich", "mpiexec.openmpi", "mpirun.openmpi")
NO_BIND_ARGS = {"openmpi": ["--bind-to", "none"], "mpich": ["-bind-to", "none"]}


@dataclass
class MPILauncherConf:
    """Options of ``hydra/launcher=mpi`` (see the module docstring)."""

    # Hydra's plugin scanner loads this module outside sys.modules: no postponed annotations,
    # and OmegaConf needs typing's generics here.
    _target_: str = "hydra_plugins.drlmpi_launcher.mpi_launcher.MPILauncher"
    mpiexec: List[str] = field(default_factory=lambda: ["mpiexec"])  # noqa: UP006
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


class JobFailedError(RuntimeError):
    """A job of the sweep exited non-zero (its exit code and log tail are in the message)."""


def job_ranks(cfg: DictConfig) -> int:
    """The world size a job asks for: ``world_size``, else the smallest its topology runs with
    this config (groups: a learner and a simulator per group)."""
    if cfg.get("world_size") is not None:
        return int(cfg.world_size)
    from drlmpi.run import resolve_classes

    return int(resolve_classes(cfg)[1].smallest_world(cfg.topology))


def job_cost(cfg: DictConfig, ranks: int) -> float:
    """A rough size of a job for ordering the queue: its step budget times its ranks."""
    try:
        steps = float(cfg.run.max_env_steps)
    except (AttributeError, TypeError, ValueError):
        steps = 1.0
    return steps * ranks


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def usable_cpus() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        return list(range(os.cpu_count() or 1))


def parse_cores(cores: Any) -> int | None:
    """``cores`` option: ``None`` (one job at a time), ``auto``/``all`` or a positive integer."""
    if cores is None or str(cores).lower() in ("null", "none", ""):
        return None
    if str(cores).lower() in ("auto", "all"):
        return len(usable_cpus())
    try:
        value = int(cores)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise ValueError(f"hydra.launcher.cores must be null, 'auto' or an integer >= 1, got {cores!r}")
    return value


_FLAVOURS: dict[str, str] = {}


def mpi_flavour(exe: str) -> str:
    """``openmpi``, ``mpich`` or ``other`` for a launcher command (asks ``exe --version`` once)."""
    if Path(exe).name not in MPIEXEC_NAMES:
        return "other"  # srun, aprun, ...: binding is the resource manager's
    if exe not in _FLAVOURS:
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
            text = (out.stdout + out.stderr).lower()
        except (OSError, subprocess.SubprocessError):
            text = ""
        if any(k in text for k in ("open mpi", "open-mpi", "openrte", "prrte")):
            _FLAVOURS[exe] = "openmpi"
        elif "hydra" in text or "mpich" in text:
            _FLAVOURS[exe] = "mpich"
        else:
            _FLAVOURS[exe] = "other"
    return _FLAVOURS[exe]


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """A finished run's ``summary.json`` (``None`` when absent or unreadable)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def recorded_overrides(run_dir: Path) -> list[str] | None:
    """The overrides a run directory was made with (``.hydra/overrides.yaml``), if known."""
    try:
        value = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return [str(v) for v in value] if isinstance(value, list) else None


class CorePool:
    """``slots`` cores handed out to jobs; slot i is CPU ``cpus[i % len(cpus)]``."""

    def __init__(self, slots: int, cpus: list[int]) -> None:
        self.slots = slots
        self.cpus = list(cpus) or [0]
        self.free = list(range(slots))

    def take(self, ranks: int) -> list[int] | None:
        """Slots for a job of ``ranks`` ranks (all of them for one wider than the pool, when
        the pool is idle), or ``None`` if it does not fit now."""
        if ranks <= len(self.free):
            taken, self.free = self.free[:ranks], self.free[ranks:]
            return taken
        if ranks > self.slots and len(self.free) == self.slots:
            taken, self.free = self.free, []
            return taken
        return None

    def give_back(self, slots: list[int]) -> None:
        self.free = sorted(self.free + slots)

    def cpus_of(self, slots: list[int]) -> list[int]:
        return sorted({self.cpus[s % len(self.cpus)] for s in slots})


@dataclass
class SweepJob:
    """One job of the sweep and what became of it."""

    idx: int
    overrides: list[str]
    label: str
    run_dir: Path
    record: dict[str, Any]
    cfg: Any = None
    ranks: int = 1
    cost: float = 0.0
    cmd: list[str] = field(default_factory=list)
    status: JobStatus = JobStatus.COMPLETED
    value: Any = None
    proc: Any = None
    started: float = 0.0
    slots: list[int] = field(default_factory=list)
    log_file: Any = None


def cpu_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    parts, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            parts.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(parts)


class Scheduler:
    """Runs prepared jobs (``cmd`` set) on a :class:`CorePool`, honouring a deadline (seconds
    after ``start``, a ``time.monotonic()`` value, by default when :meth:`run` begins) and a
    per-job timeout; ``on_change`` is called after every start and finish."""

    def __init__(self, pool: CorePool, pin: bool, deadline_s: float | None, timeout_s: float | None,
                 env: dict[str, str], sweep_dir: Path, total: int, on_change: Any = None,
                 start: float | None = None) -> None:
        self.pool = pool
        self.pin = pin
        self.deadline_s = deadline_s
        self.timeout_s = timeout_s
        self.env = env
        self.sweep_dir = sweep_dir
        self.total = total
        self.on_change = on_change or (lambda: None)
        self.start = start

    def run(self, queue: list[SweepJob]) -> None:
        queue = list(queue)
        running: list[SweepJob] = []
        start = time.monotonic() if self.start is None else self.start
        try:
            while queue or running:
                changed = False
                for job in list(running):
                    returncode = job.proc.poll()
                    overdue = (self.timeout_s is not None
                               and time.monotonic() - job.started > self.timeout_s)
                    if returncode is None and overdue:
                        returncode = self._kill(job, f"killed after timeout_s={self.timeout_s}")
                    if returncode is not None:
                        running.remove(job)
                        self.pool.give_back(job.slots)
                        self._finish(job, returncode)
                        changed = True
                if self.deadline_s is not None and time.monotonic() - start >= self.deadline_s:
                    for job in queue:
                        self._not_started(job)
                    changed = changed or bool(queue)
                    queue = []
                for job in list(queue):
                    slots = self.pool.take(job.ranks)
                    if slots is None:
                        continue
                    queue.remove(job)
                    changed = True
                    if self._start(job, slots):
                        running.append(job)
                    else:
                        self.pool.give_back(slots)
                if changed:
                    self.on_change()
                else:
                    time.sleep(POLL_S)
        finally:
            for job in running:  # interrupted (Ctrl-C, an error): leave no job behind
                self._finish(job, self._kill(job, "killed: the sweep was interrupted"))
            if running:
                self.on_change()

    def _start(self, job: SweepJob, slots: list[int]) -> bool:
        """Start a job on ``slots``; ``False`` (the job recorded as failed) if it cannot start."""
        run_dir = job.run_dir
        if run_dir.exists() and self.sweep_dir.resolve() in run_dir.resolve().parents:
            shutil.rmtree(run_dir)  # an unfinished earlier attempt: start clean
        run_dir.mkdir(parents=True, exist_ok=True)
        job.slots = slots
        cpus = self.pool.cpus_of(slots)
        where = ""
        if self.pin:
            job.record["cpus"] = cpu_list(cpus)
            where = f" on CPUs {job.record['cpus']}"
        job.log_file = open(run_dir / "job.log", "w")  # noqa: SIM115 (closed in _finish)
        job.log_file.write("$ " + " ".join(job.cmd) + "\n")
        job.log_file.flush()
        affinity = (lambda: os.sched_setaffinity(0, cpus)) if self.pin else None
        job.started = time.monotonic()
        job.record.update(status="running", started=round(time.time(), 3))
        try:
            job.proc = subprocess.Popen(job.cmd, stdout=job.log_file, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=self.env, start_new_session=True,
                                        preexec_fn=affinity)
        except OSError as exc:  # e.g. no mpiexec on PATH
            job.log_file.write(f"drlmpi launcher: cannot start: {exc}\n")
            job.record["reason"] = f"cannot start: {exc}"
            self._finish(job, 127)
            return False
        log.info(f"[{job.idx + 1}/{self.total}] {job.label}: {job.ranks} rank(s){where} ...")
        return True

    def _kill(self, job: SweepJob, why: str) -> int:
        try:
            os.killpg(job.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        job.proc.wait()
        job.log_file.write(f"\ndrlmpi launcher: {why}\n")
        job.record["reason"] = why
        return -signal.SIGKILL

    def _finish(self, job: SweepJob, returncode: int) -> None:
        job.log_file.close()
        seconds = time.monotonic() - job.started
        job.record.update(returncode=returncode, seconds=round(seconds, 2), ended=round(time.time(), 3))
        tag = f"[{job.idx + 1}/{self.total}] {job.label}"
        if returncode == 0:
            summary = read_summary(job.run_dir)
            outcome = "solved" if summary and summary.get("solved") else "not solved"
            job.record["status"] = "ok"
            job.status, job.value = JobStatus.COMPLETED, summary
            log.info(f"{tag}: ok ({outcome}, {seconds:.1f} s)")
            return
        log_tail = tail(job.run_dir / "job.log")
        job.record.update(status="failed", log_tail=log_tail)
        log.error(f"{tag}: FAILED with exit code {returncode} after {seconds:.1f} s; last lines of "
                  f"{job.run_dir / 'job.log'}:\n{log_tail}")
        job.status = JobStatus.FAILED
        job.value = JobFailedError(f"job {job.idx} ({job.label}) exited with code {returncode}; "
                                   f"log: {job.run_dir / 'job.log'}")

    def _not_started(self, job: SweepJob) -> None:
        reason = (f"not started: the sweep's deadline_s={self.deadline_s:g} had passed "
                  "(re-run the same command with the same hydra.sweep.dir to continue)")
        job.record.update(status="skipped", returncode=None, reason=reason)
        job.status, job.value = JobStatus.COMPLETED, f"skipped: {reason}"
        log.info(f"[{job.idx + 1}/{self.total}] {job.label}: skipped: {reason}")


class MPILauncher(Launcher):
    """Runs each multirun job as ``mpiexec -n N python -m mpi4py -m drlmpi ...``."""

    def __init__(self, mpiexec: list[str] | None = None, ranks_flag: str = "-n",
                 extra_args: list[str] | None = None, python: str | None = None,
                 timeout_s: float | None = None, invalid: str = "skip", dry_run: bool = False,
                 env: dict[str, str] | None = None, cores: Any = None, bind: str = "auto",
                 deadline_s: float | None = None, resume: bool = True, order: str = "auto") -> None:
        if invalid not in ("skip", "fail"):
            raise ValueError(f"hydra.launcher.invalid must be 'skip' or 'fail', got {invalid!r}")
        if bind not in ("auto", "none"):
            raise ValueError(f"hydra.launcher.bind must be 'auto' or 'none', got {bind!r}")
        if order not in ("auto", "cost", "listed"):
            raise ValueError(f"hydra.launcher.order must be 'auto', 'cost' or 'listed', got {order!r}")
        self.mpiexec = list(mpiexec or ["mpiexec"])
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

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def command(self, overrides: list[str], ranks: int, run_dir: Path) -> list[str]:
        """The command line of one job."""
        binding = NO_BIND_ARGS.get(mpi_flavour(self.mpiexec[0]), []) if self.pin else []
        return [*self.mpiexec, self.ranks_flag, str(ranks), *binding, *self.extra_args, self.python,
                "-m", "mpi4py", "-m", "drlmpi", *overrides, f"hydra.run.dir={run_dir}",
                "hydra.mode=RUN"]  # a preset may set MULTIRUN: the job itself is one run

    def launch(self, job_overrides, initial_job_idx: int) -> list[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        started = time.monotonic()  # deadline_s counts from here, composing the jobs included
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        total = initial_job_idx + len(job_overrides)
        log.info(f"sweep: composing and checking {len(job_overrides)} job(s) ...")
        jobs = [self._prepare(initial_job_idx + i, list(o), sweep_dir, total)
                for i, o in enumerate(job_overrides)]
        queue = [j for j in jobs if j.cmd]
        if self.by_cost:
            queue.sort(key=lambda j: -j.cost)  # stable: equal costs keep the listed order
        earlier = _read_records(sweep_dir / JOBS_FILE)

        def write() -> None:
            _write_records(sweep_dir / JOBS_FILE, earlier, [j.record for j in jobs])

        write()
        if queue:
            pool = _OneAtATime() if self.cores is None else CorePool(self.cores, usable_cpus())
            log.info(f"sweep: {len(queue)} job(s) to run"
                     + (f" on {self.cores} core(s)" if self.cores is not None else ", one at a time")
                     + f" in {sweep_dir}")
            Scheduler(pool, self.pin, self.deadline_s, self.timeout_s,
                      {**os.environ, **{k: str(v) for k, v in self.env.items()}},
                      sweep_dir, total, write, started).run(queue)
        write()
        counts = {s: sum(j.record.get("status") == s for j in jobs)
                  for s in ("ok", "reused", "failed", "skipped", "dry_run")}
        log.info("sweep: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s == "ok")
                 + f"; jobs listed in {sweep_dir / JOBS_FILE}")
        if any(j.record.get("reason", "").startswith("not started") for j in jobs):
            log.info("sweep: to continue, re-run the same command with "
                     f"hydra.sweep.dir={sweep_dir.resolve()}")
        return [self._job_return(j) for j in jobs]

    def _prepare(self, idx: int, overrides: list[str], sweep_dir: Path, total: int) -> SweepJob:
        """Compose and validate one job; decide whether it runs, is reused or is skipped."""
        from drlmpi.algos.base import ConfigError
        from drlmpi.run import validate

        label = " ".join(filter_overrides(overrides)) or "(defaults)"
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(cfg):
            cfg.hydra.job.id = idx
            cfg.hydra.job.num = idx
        try:
            run_dir = sweep_dir / str(cfg.hydra.sweep.subdir)
        except OmegaConfBaseException:  # it interpolates a broken value: reported just below
            run_dir = sweep_dir / str(idx)
        job = SweepJob(idx, overrides, label, run_dir,
                       {"job": idx, "overrides": overrides, "run_dir": str(run_dir)}, cfg=cfg)
        tag = f"[{idx + 1}/{total}] {label}"
        try:
            job.ranks = job_ranks(cfg)
            validate(cfg, job.ranks)
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
        summary = read_summary(run_dir) if self.resume else None
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
        cmd = self.command(overrides, job.ranks, run_dir)
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


class _OneAtATime(CorePool):
    """The default pool: one job at a time, whatever its width, nothing pinned."""

    def __init__(self) -> None:
        super().__init__(1, usable_cpus())

    def take(self, ranks: int) -> list[int] | None:
        return super().take(1)


def _read_records(path: Path) -> list[dict[str, Any]]:
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def _write_records(path: Path, earlier: list[dict[str, Any]], current: list[dict[str, Any]]) -> None:
    """``jobs.json``: the earlier records with those of this launch's run directories replaced
    (a resumed sweep lists each job once, with its latest outcome; a reused job keeps what its
    earlier record says of the run - command, seconds, start and end)."""
    mine = {r["run_dir"] for r in current}
    old = {r.get("run_dir"): r for r in earlier}
    current = [{**old[r["run_dir"]], **{k: v for k, v in r.items() if v is not None}}
               if r.get("status") == "reused" and r["run_dir"] in old else r for r in current]
    records = [r for r in earlier if r.get("run_dir") not in mine] + current
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(records, indent=2) + "\n")
    tmp.replace(path)
