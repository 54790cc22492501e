"""Run ``python -m drlmpi`` under ``mpiexec`` in a subprocess that can never hang a test.

The job is started in its own process session; on timeout the whole group is killed and the
test fails. ``MPIEXEC_TIMEOUT`` is set too, as a second net inside MPICH's launcher. For what
only a process of its own shows (exit codes, aborts, hangs, kill -9, the command line); other
multi-rank runs go to the MPI pool (tests/mpi_pool.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import RunResult

REPO = Path(__file__).resolve().parent.parent


@dataclass
class JobResult(RunResult):
    """Exit code, output and run directory of one finished job."""

    returncode: int = 0
    stdout: str = ""
    stderr: str = ""


def fresh_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter in the repository (what a new process imports, its exit
    code and output)."""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def mpiexec_command(ranks: int) -> list[str]:
    """The launcher for ``ranks`` processes (none for 1 rank: MPI singleton init)."""
    if ranks == 1:
        return []
    return ["mpiexec", "-n", str(ranks)]


def run_job(ranks: int, overrides: list[str], run_dir: Path, timeout: float = 180,
            python_module: str = "drlmpi", env: dict[str, str] | None = None) -> JobResult:
    """Run ``[mpiexec -n ranks] python -m mpi4py -m drlmpi overrides hydra.run.dir=run_dir``.

    Fails the calling test (raises ``AssertionError``) if the job outlives ``timeout``.
    """
    return start_job(ranks, overrides, run_dir, timeout, python_module, env).result()


class RunningJob:
    """A job started in the background (:func:`start_job`); :meth:`result` waits for it. Its
    output is read, and its end time taken, by a thread, so jobs started together finish
    independently."""

    def __init__(self, cmd: list[str], env: dict[str, str], run_dir: Path, timeout: float) -> None:
        self.cmd, self.run_dir, self.timeout = cmd, Path(run_dir), timeout
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.started = time.time()
        #: wall-clock time at which the job's launcher exited
        self.ended: float | None = None
        self._output: tuple[str, str] = ("", "")
        self._hung = False
        self._reader = threading.Thread(target=self._wait, daemon=True)
        self._reader.start()

    def _wait(self) -> None:
        try:
            self._output = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._hung = True
            os.killpg(self.proc.pid, signal.SIGKILL)
            self._output = self.proc.communicate()
        self.ended = time.time()

    def result(self) -> JobResult:
        """Wait for the job; fail (``AssertionError``) if it hung or left a process behind."""
        self._reader.join()
        stdout, stderr = self._output
        if self._hung:
            raise AssertionError(
                f"job hung: {' '.join(self.cmd)} still running after {self.timeout} s\n"
                f"--- stdout ---\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-3000:]}")
        _assert_no_rank_left(self.proc.pid, self.cmd)
        return JobResult(self.run_dir, self.proc.returncode, stdout, stderr)


def start_job(ranks: int, overrides: list[str], run_dir: Path, timeout: float = 180,
              python_module: str = "drlmpi", env: dict[str, str] | None = None) -> RunningJob:
    """Start the job :func:`run_job` runs, without waiting for it."""
    cmd = [*mpiexec_command(ranks), sys.executable, "-m", "mpi4py", "-m", python_module,
           *overrides, f"hydra.run.dir={run_dir}"]
    full_env = {**os.environ, "MPIEXEC_TIMEOUT": str(int(timeout) + 30), "OMP_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1", **(env or {})}
    return RunningJob(cmd, full_env, run_dir, timeout)


def _assert_no_rank_left(session_id: int, cmd: list[str]) -> None:
    """Fail if any process of the job's session (a rank, the launcher) outlived the job."""
    deadline = time.monotonic() + 5
    while True:
        try:
            os.killpg(session_id, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            os.killpg(session_id, signal.SIGKILL)
            raise AssertionError(f"a process of {' '.join(cmd)} was still alive after the job ended")
        time.sleep(0.1)
