"""``python -m drlmpi world_size=N`` stops with a checkpoint when it is sent SIGTERM, whatever its
launch command does with that signal: the relaunching process passes it to the ranks, not to a
launcher that would kill them (Open MPI's ``mpirun``; here tests/kill_on_term_launcher.py, which
kills its ranks on SIGTERM as that one does). About 10 s: a 2-rank job's start, a few episodes,
the stop and its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from drlmpi.job_control.abort import SIGNAL_EXIT
from tests.mpirun import REPO
from tests.shared_runs import CUE
from tests.test_signal_stop import wait_for_episodes


def test_sigterm_to_a_relaunched_run_reaches_its_ranks_not_the_launcher(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "DRLMPI_MPIEXEC": f"{sys.executable} {REPO / 'tests' / 'kill_on_term_launcher.py'}",
           "DRLMPI_BIND_RANKS": "none"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "drlmpi", CUE, "world_size=2", "topology=star", "algo.hidden=[16]",
         "run.max_env_steps=null", "run.max_train_seconds=120", "run.eval_every=1000000000",
         "run.progress_every_s=0.2", "run.checkpoint_every_s=0", f"hydra.run.dir={run_dir}"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_episodes(proc, run_dir, count=5, timeout=60)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == SIGNAL_EXIT, stderr[-2000:]
    assert time.monotonic() - t0 < 30
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["stop_reason"], summary["stop_signal"]) == ("signal", "SIGTERM")
    assert (run_dir / "checkpoint").is_dir() and (run_dir / "policy.pt").is_file()
    assert "stopped by SIGTERM: checkpoint written" in stdout + stderr
