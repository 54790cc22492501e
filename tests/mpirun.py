"""Run ``python -m drlmpi`` under ``mpiexec`` in a subprocess that can never hang a test.

The job is started in its own process session; on timeout the whole group is killed and the
test fails. ``MPIEXEC_TIMEOUT`` is set too, as a second net inside MPICH's launcher.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


@dataclass
class JobResult:
    """Exit code, output and run directory of one finished job."""

    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    def summary(self) -> dict[str, Any]:
        """The job's ``summary.json``."""
        return json.loads((self.run_dir / "summary.json").read_text())


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
    cmd = [*mpiexec_command(ranks), sys.executable, "-m", "mpi4py", "-m", python_module,
           *overrides, f"hydra.run.dir={run_dir}"]
    full_env = {**os.environ, "MPIEXEC_TIMEOUT": str(int(timeout) + 30), "OMP_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(
            f"job hung: {' '.join(cmd)} still running after {timeout} s\n"
            f"--- stdout ---\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-3000:]}"
        ) from None
    _assert_no_rank_left(proc.pid, cmd)
    return JobResult(proc.returncode, stdout, stderr, Path(run_dir))


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
