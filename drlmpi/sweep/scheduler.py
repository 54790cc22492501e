"""Running a sweep's jobs: each its own MPI job (``mpiexec -n N python -m mpi4py -m drlmpi ...``)
in its own process group with its output in ``<run dir>/job.log``; by default one at a time,
or packed onto ``cores`` (a job of n ranks takes n of them, side by side while they fit, each
confined to its own CPU list); a deadline for starting jobs and a timeout per job. The Hydra
plugin (hydra_plugins/drlmpi_launcher) composes and checks the jobs and hands them here.

A sweep stops as a run does: SIGTERM or SIGUSR1 on the sweep's process (a batch system ending
the allocation, ``timeout``, ``kill``) starts no further job and passes the signal on to each
running job's ranks - they stop with a checkpoint - then kills what is still
running after :data:`STOP_GRACE_S`. Without this, a job (its own session, so that it can be
killed as a whole) would outlive the sweep that started it.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any  # noqa: UP035 (OmegaConf needs typing generics)

from hydra.core.utils import JobStatus
from omegaconf import DictConfig

from drlmpi.job_control.abort import SIGNAL_EXIT
from drlmpi.job_control.process import cpu_list, signal_group, signal_ranks, usable_cpus
from drlmpi.sweep.jobs import read_summary, stopped_by_signal, tail

POLL_S = 0.2
#: the signals that stop a sweep (SIGINT, Ctrl-C, interrupts it and kills its jobs at once)
SWEEP_STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
#: seconds the running jobs of a sweep stopped by a signal get to stop with a checkpoint
STOP_GRACE_S = 60.0
log = logging.getLogger(__name__)


class JobFailedError(RuntimeError):
    """A failed job's result (why, in the message). The launcher ends a sweep with a failed job
    itself - one line each, ``SWEEP_FAILED_EXIT`` - so Hydra never raises it as a traceback."""



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


def shared_gpu_note(devices: list[str], cores: int | None) -> str | None:
    """The line a sweep logs before packing jobs whose learners run on a GPU side by side
    (``cores`` set) - their seconds then include each other's GPU work - or ``None`` (jobs one
    at a time, or fewer than two device learners). ``devices``: each job's resolved device."""
    on_gpu = sum(device.startswith("cuda") for device in devices)
    if cores is None or on_gpu < 2:
        return None
    return (f"sweep: {on_gpu} jobs learn on a GPU and run side by side on {cores} core(s): they share "
            "the GPU, so their seconds include each other's work (a sequential TD3 run beside two "
            "others ran 8-17% slower, docs/results.md); hydra.launcher.cores=null runs them one at a time")


@dataclass
class SweepJob:
    """One job of the sweep and what became of it."""

    idx: int
    overrides: list[str]
    label: str
    run_dir: Path
    record: dict[str, Any]
    cfg: DictConfig | None = None  # the job's composed config (checked before it is launched)
    ranks: int = 1
    cost: float = 0.0
    cmd: list[str] = field(default_factory=list)
    status: JobStatus = JobStatus.COMPLETED
    value: Any = None
    proc: Any = None
    started: float = 0.0
    slots: list[int] = field(default_factory=list)
    log_file: Any = None
    #: the job continues its run directory from a checkpoint (it was stopped by a signal)
    resumes: bool = False


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
        #: the signal that stopped the sweep (:data:`SWEEP_STOP_SIGNALS`), or None
        self.stopped_by: signal.Signals | None = None
        self.stop_grace_s = STOP_GRACE_S

    def run(self, queue: list[SweepJob]) -> None:
        queue = list(queue)
        running: list[SweepJob] = []
        start = time.monotonic() if self.start is None else self.start
        previous = self._catch_stop_signals()
        kill_at = None  # when jobs still running after a stop signal are killed
        try:
            while queue or running:
                changed = False
                if self.stopped_by is not None and kill_at is None:
                    kill_at = time.monotonic() + self.stop_grace_s
                    for job in queue:
                        self._not_started(job, f"the sweep was stopped by {self.stopped_by.name}")
                    changed, queue = changed or bool(queue), []
                    for job in running:
                        self._signal(job, self.stopped_by)
                for job in list(running):
                    returncode = job.proc.poll()
                    overdue = (self.timeout_s is not None
                               and time.monotonic() - job.started > self.timeout_s)
                    if returncode is None and overdue:
                        returncode = self._kill(job, f"killed after timeout_s={self.timeout_s}")
                    if returncode is None and kill_at is not None and time.monotonic() > kill_at:
                        returncode = self._kill(job, f"killed: still running {self.stop_grace_s:g} s after "
                                                     f"the sweep was stopped by {self.stopped_by.name}")
                    if returncode is not None:
                        running.remove(job)
                        self.pool.give_back(job.slots)
                        self._finish(job, returncode)
                        changed = True
                if self.deadline_s is not None and time.monotonic() - start >= self.deadline_s:
                    for job in queue:
                        self._not_started(job, f"the sweep's deadline_s={self.deadline_s:g} had passed")
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
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for job in running:  # interrupted (Ctrl-C, an error): leave no job behind
                self._finish(job, self._kill(job, "killed: the sweep was interrupted"))
            if running:
                self.on_change()

    def _catch_stop_signals(self) -> dict[int, Any]:
        """Record a stop signal in :attr:`stopped_by` (the loop acts on it); returns the handlers
        it replaced. Only the main thread can install handlers: elsewhere none are."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        def stop(signum: int, _frame: Any) -> None:
            self.stopped_by = self.stopped_by or signal.Signals(signum)

        return {signum: signal.signal(signum, stop) for signum in SWEEP_STOP_SIGNALS}

    def _signal(self, job: SweepJob, signum: int) -> None:
        """Pass a stop signal on to the job's ranks on this host, not to its launcher
        (:func:`~drlmpi.job_control.process.signal_ranks`, as the relaunch of ``python -m drlmpi
        world_size=N`` does); where no rank is found, to the job's process group."""
        if not signal_ranks(job.proc.pid, signum):
            signal_group(job.proc.pid, signum)

    def _start(self, job: SweepJob, slots: list[int]) -> bool:
        """Start a job on ``slots``; ``False`` (the job recorded as failed) if it cannot start."""
        run_dir = job.run_dir
        if not job.resumes and run_dir.exists() and self.sweep_dir.resolve() in run_dir.resolve().parents:
            shutil.rmtree(run_dir)  # an unfinished earlier attempt: start clean
        run_dir.mkdir(parents=True, exist_ok=True)
        job.slots = slots
        cpus = self.pool.cpus_of(slots)
        where = ""
        if self.pin:
            job.record["cpus"] = cpu_list(cpus)
            where = f" on CPUs {job.record['cpus']}"
        job.log_file = open(run_dir / "job.log", "a" if job.resumes else "w")  # noqa: SIM115 (closed in _finish)
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
        signal_group(job.proc.pid, signal.SIGKILL)
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
        signalled = returncode > 0 and stopped_by_signal(job.run_dir, job.record["started"])
        if returncode == SIGNAL_EXIT or signalled:  # a launcher may not pass on the run's exit code
            job.record["reason"] = ("stopped by a signal with a checkpoint: re-run the same command "
                                    "with the same hydra.sweep.dir to resume it")
            log.error(f"{tag}: {job.record['reason']}")
            job.status = JobStatus.FAILED
            job.value = JobFailedError(f"job {job.idx} ({job.label}): {job.record['reason']}")
            return
        log.error(f"{tag}: FAILED with exit code {returncode} after {seconds:.1f} s; last lines of "
                  f"{job.run_dir / 'job.log'}:\n{log_tail}")
        job.status = JobStatus.FAILED
        job.value = JobFailedError(f"job {job.idx} ({job.label}) exited with code {returncode}; "
                                   f"log: {job.run_dir / 'job.log'}")

    def _not_started(self, job: SweepJob, why: str) -> None:
        reason = f"not started: {why} (re-run the same command with the same hydra.sweep.dir to continue)"
        job.record.update(status="skipped", returncode=None, reason=reason)
        job.status, job.value = JobStatus.COMPLETED, f"skipped: {reason}"
        log.info(f"[{job.idx + 1}/{self.total}] {job.label}: skipped: {reason}")


class _OneAtATime(CorePool):
    """The default pool: one job at a time, whatever its width, nothing pinned."""

    def __init__(self) -> None:
        super().__init__(1, usable_cpus())

    def take(self, ranks: int) -> list[int] | None:
        return super().take(1)
