"""A signal stops a run with a checkpoint (``run.checkpoint_on_signal``): SIGTERM, SIGUSR1 or
SIGINT to the launcher (which forwards it to every rank) or to one rank alone, under every
topology; the job ends with exit code 4, a summary saying ``signal``, policy.pt and a
checkpoint; ``resume=`` then finishes the budget with every episode once, every rank that saved
state holding exactly that state when its first new update starts (the digests of
tests/resume_probe.py). Each job is a real ``mpiexec`` job (signals and exit codes are what is
tested); the resumed part runs in the pool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from drlmpi.job_control.abort import SIGNAL_EXIT
from drlmpi.outputs.checkpoint import rank_file, read_meta
from tests.mpirun import fresh_python
from tests.resume_probe import assert_restored, holders, saved_digests
from tests.test_resume import FAST, MORE_STEPS, NEVER_REACHED, episode_rows, start

#: topology -> (ranks, the signal, the rank it is sent to: None = the launcher)
CASES = {
    "sequential": (1, signal.SIGTERM, None),
    "p2p": (2, signal.SIGUSR1, 1),
    "star": (3, signal.SIGINT, None),
    "async": (3, signal.SIGUSR1, 2),
    "allgather": (3, signal.SIGTERM, None),
    "parameter_server": (3, signal.SIGUSR1, 1),
    "groups": (4, signal.SIGTERM, 3),
    "central": (3, signal.SIGUSR1, 2),
    "groups[central]": (4, signal.SIGUSR1, 1),  # a simulator of group 0, central inside each group
}
#: no periodic checkpoint: the one resumed from is the stop's; rows flushed every 0.2 s; the
#: learners report the state they resume with (tests/resume_probe.py)
SIGNAL_RUN = [*[o for o in FAST if not o.startswith(("run.checkpoint_every_s", "run.progress_every_s"))],
              "run.checkpoint_every_s=0", "run.progress_every_s=0.2",
              "algo._target_=tests.resume_probe.ResumeProbeDQN"]


def rank_pid(marker: str, rank: int) -> int | None:
    """The pid of rank ``rank`` of the job whose command line holds ``marker`` (MPICH and Open
    MPI put the rank in each process's environment)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if marker.encode() not in Path(f"/proc/{entry}/cmdline").read_bytes():
                continue
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for var in (b"PMI_RANK=", b"OMPI_COMM_WORLD_RANK="):
            if var + str(rank).encode() in env:
                return int(entry)
    return None


def wait_for_episodes(proc: subprocess.Popen, run_dir: Path, count: int = 20, timeout: float = 120) -> None:
    """Until metrics.csv on disk holds ``count`` rows (the log flushes every progress interval)."""
    deadline = time.monotonic() + timeout
    path = run_dir / "metrics.csv"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the job ended early: {proc.stderr.read()[-2000:]}")
        if path.exists() and len(path.read_text().splitlines()) > count:
            return
        time.sleep(0.1)
    raise AssertionError("no episodes on disk within the timeout")


@pytest.mark.parametrize("topology", list(CASES))
def test_a_signal_stops_with_a_checkpoint_and_resume_finishes(pool, topology, tmp_path):
    ranks, signum, target = CASES[topology]
    run_dir = tmp_path / "run"
    base, _, wiring = topology.rstrip("]").partition("[")
    extra = [f"topology={base}", *([f"topology.group_wiring={wiring}"] if wiring else []),
             f"run.max_env_steps={NEVER_REACHED}", *SIGNAL_RUN]
    if topology == "async":
        extra.append("topology.max_policy_lag=64")
    proc = start(ranks, extra, run_dir, stdout=subprocess.PIPE)
    try:
        wait_for_episodes(proc, run_dir)
        pid = proc.pid if target is None else rank_pid(str(run_dir), target)
        assert pid is not None, f"rank {target} not found"
        sent = time.monotonic()
        os.kill(pid, signum)
        stdout, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == SIGNAL_EXIT, (stdout[-3000:], stderr[-3000:])
    assert "Traceback" not in stderr and took < 30
    name = signal.Signals(signum).name
    if target is None:  # rank 0 got it and says so once
        assert stderr.count(f"drlmpi: {name}: stopping at the next safe point") == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "signal" and summary["stop_signal"] == name
    assert (run_dir / "policy.pt").is_file() and not (run_dir / "stop_request").exists()
    meta = read_meta(run_dir)
    assert meta["generation"] == 1 and meta["env_steps"] == summary["env_steps"]
    assert sorted(meta["ranks_with_state"]) == holders(base, ranks)
    assert all(rank_file(run_dir, r, 1).is_file() for r in meta["ranks_with_state"])
    assert meta["metrics_rows"] == len(episode_rows(run_dir))  # no evaluation rows in this run

    saved, probe = saved_digests(run_dir, meta), tmp_path / "probe"
    budget = meta["env_steps"] + MORE_STEPS
    pool.submit(ranks, "tests.resume_probe:resume", run_dir=str(run_dir), probe=str(probe),
                extra=[f"run.max_env_steps={budget}"]).result()
    # every rank's networks, optimizer and random states; central's learner acts for the simulators
    # (epsilon-greedy draws on numpy's generator) before its first new update
    acts = "central" in (base, wiring)
    assert_restored(saved, probe, generation=1, advanced=("rng.numpy",) if acts else ())
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["stop_reason"] == "max_env_steps" and resumed["env_steps"] >= budget
    assert summary["resumes"] == 0 and resumed["resumes"] == 1
    rows = episode_rows(run_dir)
    assert len(rows) == resumed["episodes"]  # every episode once: none lost, none repeated
    steps = [int(r["env_steps"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] > meta["env_steps"]


def test_a_second_ctrl_c_aborts_at_once(tmp_path):
    """The first Ctrl-C asks for the stop; the same signal again at once (a launcher forwarding
    what the terminal sent) is the same request; a later one ends the process with 130."""
    code = ("import os, signal, time\n"
            "from drlmpi.job_control import stop\n"
            "stop.REPEAT_S = 0.2\n"
            f"stop.STOP.install({str(tmp_path)!r}, 0)\n"
            "os.kill(os.getpid(), signal.SIGINT); os.kill(os.getpid(), signal.SIGINT)\n"
            "time.sleep(0.05)\n"
            "assert stop.STOP.requested() == 'SIGINT'\n"
            "print('asked', flush=True)\n"
            "time.sleep(0.3)\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "time.sleep(5)\n"
            "print('not aborted')\n")
    proc = fresh_python(code)
    assert proc.returncode == 130 and proc.stdout == "asked\n", proc.stderr
    assert proc.stderr.count("stopping at the next safe point") == 1
    assert "interrupted again: aborting without a checkpoint" in proc.stderr


def test_another_ranks_request_is_renamed_into_place_whole(tmp_path, monkeypatch):
    """Rank 0 polls for the request file: a rank writes it beside and renames it in, so rank 0
    never reads a created but still empty file (which it would take for a SIGTERM)."""
    from drlmpi.job_control.stop import REQUEST_FILE, StopRequest

    renamed = []
    real_replace = os.replace

    def replace(src, dst):
        assert Path(src).read_text() == "SIGUSR1" and not Path(dst).exists()  # whole before it appears
        renamed.append(Path(dst).name)
        real_replace(src, dst)

    monkeypatch.setattr("drlmpi.job_control.stop.os.replace", replace)
    sender, receiver = StopRequest(), StopRequest()
    sender.rank, sender.file = 2, tmp_path / REQUEST_FILE
    receiver.rank, receiver.file = 0, tmp_path / REQUEST_FILE
    sender._handle(signal.SIGUSR1, None)
    assert renamed == [REQUEST_FILE] and sorted(p.name for p in tmp_path.iterdir()) == [REQUEST_FILE]
    assert receiver.requested() == "SIGUSR1"
