"""A pool of MPI ranks that runs test jobs in-process, so a job costs its work and not the
start-up of its ranks (importing torch, Hydra and Gymnasium takes 1.5 s of CPU per process,
building the first optimizer another 1.3 s).

The pool is one ``mpiexec -n SIZE`` job (:mod:`tests.pool_worker`), started on first use and
ended with the test session. :meth:`Pool.submit` queues a job - a function called as
``function(comm, **kwargs)`` on a communicator over the pool's first ``ranks`` ranks - and
returns at once; :meth:`PoolJob.result` waits for it. Jobs run one at a time, in the order they
were submitted. A job that raises on any rank fails its test with that rank's traceback (a job
of several ranks takes the pool down with it, since its peers may be blocked; the next job starts
a new pool); a job that outlives its timeout fails its test, and the pool is killed.

What needs a process of its own stays a subprocess (:mod:`tests.mpirun`): exit codes, aborts,
hangs, kill -9, the command line and the sweep launcher.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: ranks of the pool: the largest job of the suite (topology=groups with 2 x (1 + 2) ranks)
POOL_SIZE = 6
START_TIMEOUT_S = 120.0


class PoolError(AssertionError):
    """A pool job failed: it raised, outlived its timeout, or the pool died under it."""


@dataclass
class PoolJob:
    """One submitted job; :meth:`result` waits for it."""

    pool: Pool
    ranks: int
    function: str
    kwargs: dict[str, Any]
    timeout: float
    number: int = -1  # its job file's number in the current pool (renumbered after a restart)
    generation: int = -1  # the pool it was posted to
    outcome: dict[str, Any] | None = field(default=None, repr=False)

    def result(self) -> Any:
        """The function's return value on rank 0; raises :class:`PoolError` if the job failed."""
        return self.pool.wait(self)


class Pool:
    """See the module docstring."""

    def __init__(self, size: int = POOL_SIZE, root: Path | None = None) -> None:
        self.size = size
        self.root = Path(root or tempfile.mkdtemp(prefix="drlmpi-pool-"))
        self.proc: subprocess.Popen | None = None
        self.control: Path | None = None
        self.generation = 0
        self.posted = 0
        self.queue: list[PoolJob] = []  # posted to the current pool, not finished

    # -- the pool process ------------------------------------------------------------------------
    def _start(self) -> None:
        self.generation += 1
        self.control = self.root / f"pool{self.generation}"
        self.control.mkdir(parents=True)
        self.log = open(self.control / "output.txt", "w")  # noqa: SIM115 (closed in _stop)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        cmd = ["mpiexec", "-n", str(self.size), sys.executable, "-m", "mpi4py", "-m", "tests.pool_worker",
               str(self.control), str(os.getpid())]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.posted = 0

    def _stop(self, kill: bool) -> None:
        if self.proc is None:
            return
        if not kill:
            (self.control / "stop").write_text("")
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill = True
        if kill:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.log.close()
        self.proc = None

    def close(self) -> None:
        """End the pool (its ranks leave their loops and finalize MPI)."""
        self._stop(kill=False)

    def _output_tail(self, chars: int = 4000) -> str:
        try:
            return (self.control / "output.txt").read_text()[-chars:]
        except OSError:
            return ""

    # -- jobs -----------------------------------------------------------------------------------
    def _post(self, job: PoolJob) -> None:
        if self.proc is None:
            self._start()
        job.number, job.generation = self.posted, self.generation
        self.posted += 1
        spec = {"ranks": job.ranks, "function": job.function, "kwargs": job.kwargs}
        path = self.control / f"job-{job.number}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(spec))
        os.replace(tmp, path)
        self.queue.append(job)

    def submit(self, ranks: int, target: str, timeout: float = 120.0, **kwargs: Any) -> PoolJob:
        """Queue ``target(comm, **kwargs)`` (``target`` as ``module:name``) on ``ranks`` ranks."""
        if not 1 <= ranks <= self.size:
            raise ValueError(f"the pool has {self.size} ranks, a job asked for {ranks}")
        job = PoolJob(self, ranks, target, kwargs, timeout)
        self._post(job)
        return job

    def _errors(self, job: PoolJob) -> str:
        texts = [p.read_text() for p in sorted(self.control.glob(f"error-{job.number}-rank*.txt"))]
        return "\n".join(texts)

    def wait(self, job: PoolJob) -> Any:
        """``job``'s return value (earlier jobs finish first: they hold the pool)."""
        while job.outcome is None:
            self._finish(self.queue[0])
        if "error" in job.outcome:
            raise PoolError(job.outcome["error"])
        return job.outcome["value"]

    def _finish(self, job: PoolJob) -> None:
        """Wait for the oldest posted ``job``; on a failure, restart the pool for the rest."""
        result = self.control / f"result-{job.number}.json"
        # A job's clock starts when the pool reaches it (the pool's own start counts for the first).
        deadline = time.monotonic() + job.timeout + (START_TIMEOUT_S if job.number == 0 else 0.0)
        failure = None
        while failure is None:
            if result.exists():
                job.outcome = json.loads(result.read_text())
                break
            errors = self._errors(job)
            if errors and job.ranks == 1:
                job.outcome = {"error": f"pool job {job.function} raised:\n{errors}"}
                break
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let a failing rank's traceback land
                errors = self._errors(job)
                failure = (f"pool job {job.function} on {job.ranks} rank(s) "
                           + (f"raised:\n{errors}" if errors else
                              f"lost its pool (exit code {self.proc.returncode}):\n{self._output_tail()}"))
            elif time.monotonic() > deadline:
                failure = (f"pool job {job.function} on {job.ranks} rank(s) did not finish within "
                           f"{job.timeout:.0f} s (kwargs {job.kwargs}):\n{self._output_tail()}")
            else:
                time.sleep(0.005)
        self.queue.pop(0)
        if failure is not None:
            job.outcome = {"error": failure}
            waiting = self.queue
            self.queue = []
            self._stop(kill=True)
            for other in waiting:  # a new pool runs the jobs still waiting, in order
                self._post(other)
