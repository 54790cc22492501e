"""The sweep launcher's scheduler on its own: packing jobs onto cores, CPU lists, the sweep
deadline, the per-job timeout and a stop signal (plain subprocesses, no MPI, no training)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from drlmpi.job_control.launchers import NO_BIND_ARGS, oversubscribe_args, parse_cores
from drlmpi.job_control.process import cpu_list
from drlmpi.sweep.scheduler import CorePool, Scheduler, SweepJob
from hydra_plugins.drlmpi_launcher.mpi_launcher import MPILauncher

SHOW_AFFINITY = "import os, sys, time; print(sorted(os.sched_getaffinity(0))); time.sleep(float(sys.argv[1]))"


def _job(tmp_path: Path, idx: int, ranks: int, seconds: float = 1.0) -> SweepJob:
    run_dir = tmp_path / "sweep" / f"job{idx}"
    job = SweepJob(idx, [f"seed={idx}"], f"job {idx}", run_dir,
                   {"job": idx, "overrides": [f"seed={idx}"], "run_dir": str(run_dir), "ranks": ranks},
                   ranks=ranks)
    job.cmd = [sys.executable, "-c", SHOW_AFFINITY, str(seconds)]
    return job


def _scheduler(tmp_path: Path, pool: CorePool, pin: bool = True, deadline_s: float | None = None,
               timeout_s: float | None = None) -> Scheduler:
    return Scheduler(pool, pin, deadline_s, timeout_s, dict(os.environ), tmp_path / "sweep", total=9)


def _overlap(a: dict, b: dict) -> bool:
    return a["started"] < b["ended"] and b["started"] < a["ended"]


def test_pool_packs_jobs_by_ranks_and_runs_a_wider_one_alone():
    pool = CorePool(4, [0, 1, 2, 3])
    three = pool.take(3)
    assert three == [0, 1, 2] and pool.take(2) is None
    assert pool.take(1) == [3] and pool.take(1) is None
    pool.give_back(three)
    assert pool.take(2) == [0, 1]
    wide = CorePool(2, [0, 1])
    assert wide.take(1) == [0] and wide.take(3) is None  # wider than the pool: only when idle
    wide.give_back([0])
    assert wide.take(3) == [0, 1]
    # more slots than CPUs (oversubscription asked for): slots share CPUs round-robin
    assert CorePool(4, [0, 1]).cpus_of([0, 1, 2, 3]) == [0, 1]
    assert cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_cores_option():
    assert parse_cores(None) is None
    assert parse_cores(3) == 3 and parse_cores("3") == 3
    assert parse_cores("auto") == len(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match="cores"):
        parse_cores(0)


def test_binding_flags_only_when_packing(monkeypatch):
    import drlmpi.job_control.launchers as launchers

    monkeypatch.setitem(launchers._FLAVOURS, "mpirun", "openmpi")
    packed = MPILauncher(mpiexec=["mpirun"], cores=4).command(["seed=0"], 2, Path("/r"))
    assert packed[:5] == ["mpirun", "-n", "2", *NO_BIND_ARGS["openmpi"]]
    # Open MPI refuses more ranks than slots (cores) unless told: a job wider than the machine
    wide = len(os.sched_getaffinity(0)) + 1
    assert MPILauncher(mpiexec=["mpirun"]).command(["seed=0"], wide, Path("/r"))[3] == "--oversubscribe"
    assert oversubscribe_args("mpirun", 3, cpus=2) == ["--oversubscribe"]
    assert oversubscribe_args("mpirun", 2, cpus=2) == []
    monkeypatch.setitem(launchers._FLAVOURS, "mpiexec", "mpich")  # MPICH starts them as they are
    assert oversubscribe_args("mpiexec", 3, cpus=2) == []
    alone = MPILauncher(mpiexec=["mpirun"]).command(["seed=0"], 2, Path("/r"))
    assert alone[:4] == ["mpirun", "-n", "2", sys.executable]
    unbound = MPILauncher(mpiexec=["mpirun"], cores=4, bind="none").command(["seed=0"], 2, Path("/r"))
    assert unbound[3] == sys.executable
    srun = MPILauncher(mpiexec=["srun", "--mpi=pmix"], cores=4).command(["seed=0"], 2, Path("/r"))
    assert srun[:5] == ["srun", "--mpi=pmix", "-n", "2", sys.executable]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
def test_jobs_run_side_by_side_on_disjoint_cpus(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    jobs = [_job(tmp_path, 0, 2, 0.5), _job(tmp_path, 1, 1, 1.5), _job(tmp_path, 2, 1, 1.5)]
    _scheduler(tmp_path, CorePool(2, cpus)).run(jobs)
    wide, a, b = (j.record for j in jobs)
    assert all(r["status"] == "ok" and r["returncode"] == 0 for r in (wide, a, b))
    assert _overlap(a, b), "two 1-rank jobs on 2 cores must run at the same time"
    assert not _overlap(wide, a) and not _overlap(wide, b)
    assert wide["cpus"] == cpu_list(cpus)
    assert {a["cpus"], b["cpus"]} == {str(cpus[0]), str(cpus[1])}
    for job, expected in zip(jobs, (cpus, None, None)):  # each ran confined to its CPU list
        lines = (job.run_dir / "job.log").read_text().splitlines()
        assert lines[0].startswith("$ ")
        assert lines[1] == str(expected or [int(job.record["cpus"])])


def test_one_at_a_time_by_default_and_unpinned(tmp_path):
    from drlmpi.sweep.scheduler import _OneAtATime

    jobs = [_job(tmp_path, 0, 1, 0.6), _job(tmp_path, 1, 3, 0.6)]
    _scheduler(tmp_path, _OneAtATime(), pin=False).run(jobs)
    first, second = (j.record for j in jobs)
    assert first["status"] == second["status"] == "ok"
    assert not _overlap(first, second) and "cpus" not in first
    everything = str(sorted(os.sched_getaffinity(0)))
    assert (jobs[0].run_dir / "job.log").read_text().splitlines()[1] == everything


def test_deadline_leaves_later_jobs_unstarted_with_a_reason(tmp_path):
    jobs = [_job(tmp_path, i, 1, 1.5) for i in range(3)]
    start = time.monotonic()
    _scheduler(tmp_path, CorePool(1, [0]), deadline_s=0.5).run(jobs)
    assert time.monotonic() - start < 5
    first, *later = (j.record for j in jobs)
    assert first["status"] == "ok"  # already running at the deadline: left to finish
    for record in later:
        assert record["status"] == "skipped" and "deadline_s=0.5" in record["reason"]
        assert "started" not in record
    assert not jobs[1].run_dir.exists()


def test_timeout_kills_the_job_and_the_sweep_goes_on(tmp_path):
    slow, quick = _job(tmp_path, 0, 1, 30), _job(tmp_path, 1, 1, 0.1)
    start = time.monotonic()
    _scheduler(tmp_path, CorePool(1, [0]), timeout_s=0.5).run([slow, quick])
    assert time.monotonic() - start < 10
    assert slow.record["status"] == "failed" and slow.record["returncode"] < 0
    assert "killed after timeout_s=0.5" in slow.record["reason"]
    assert "killed after timeout_s=0.5" in (slow.run_dir / "job.log").read_text()
    assert quick.record["status"] == "ok"


#: a job that says it is running (touches argv[1]), then sleeps; on SIGTERM it exits 4 as a run
#: stopped with a checkpoint does (argv[2] "stops") or ignores it ("ignores")
ON_TERM = ("import pathlib, signal, sys, time\n"
           "on_term = (lambda *_: sys.exit(4)) if sys.argv[2] == 'stops' else signal.SIG_IGN\n"
           "signal.signal(signal.SIGTERM, on_term)\n"
           "pathlib.Path(sys.argv[1]).touch()\n"
           "time.sleep(30)")


def test_a_stop_signal_passes_on_to_running_jobs_and_starts_no_more(tmp_path):
    """SIGTERM on the sweep's process: each running job's process group gets it (one stops with
    exit 4, as a run with a checkpoint does; one that ignores it is killed after the grace), the
    queued job never starts, and the sweep's own signal handlers are put back."""
    stops, ignores, queued = (_job(tmp_path, i, 1) for i in range(3))
    for job, how in ((stops, "stops"), (ignores, "ignores")):
        job.cmd = [sys.executable, "-c", ON_TERM, str(tmp_path / f"ready{job.idx}"), how]
    scheduler = _scheduler(tmp_path, CorePool(2, [0, 1]), pin=False)
    scheduler.stop_grace_s = 1.0

    def signal_once_both_run() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all((tmp_path / f"ready{i}").exists() for i in (0, 1)):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    caught_here = []  # the test's own handler: a scheduler without one fails here, not kills pytest

    def here(signum: int, _frame: object) -> None:
        caught_here.append(signum)

    original = signal.signal(signal.SIGTERM, here)
    threading.Thread(target=signal_once_both_run, daemon=True).start()
    start = time.monotonic()
    try:
        scheduler.run([stops, ignores, queued])
        assert signal.getsignal(signal.SIGTERM) is here and not caught_here  # its handler, then ours back
    finally:
        signal.signal(signal.SIGTERM, original)
    assert time.monotonic() - start < 15
    assert scheduler.stopped_by == signal.SIGTERM
    assert stops.record["returncode"] == 4
    assert "stopped by a signal with a checkpoint" in stops.record["reason"]
    assert ignores.record["returncode"] < 0
    assert "1 s after the sweep was stopped by SIGTERM" in ignores.record["reason"]
    assert queued.record["status"] == "skipped"
    assert "the sweep was stopped by SIGTERM" in queued.record["reason"]
    assert not queued.run_dir.exists()


def test_a_job_that_cannot_start_fails_and_the_others_run(tmp_path):
    broken, fine = _job(tmp_path, 0, 1, 0.1), _job(tmp_path, 1, 1, 0.1)
    broken.cmd = [str(tmp_path / "no-such-mpiexec"), "-n", "1"]
    _scheduler(tmp_path, CorePool(1, [0])).run([broken, fine])
    assert broken.record["status"] == "failed" and "cannot start" in broken.record["reason"]
    assert fine.record["status"] == "ok"


def test_a_job_without_world_size_gets_the_smallest_world_its_topology_runs():
    """``python -m drlmpi -m topology=groups`` (no world_size): 2 learners need 2 x (1 + 1) ranks;
    the minimum of any topology (2) would have skipped every job."""
    from hydra_plugins.drlmpi_launcher.mpi_launcher import job_ranks
    from tests.pool_worker import compose

    assert job_ranks(compose(["topology=groups"])) == 4
    assert job_ranks(compose(["topology=groups", "topology.learners=3"])) == 6
    assert job_ranks(compose(["topology=star"])) == 2
    assert job_ranks(compose(["topology=star", "world_size=5"])) == 5


WRITE_SUMMARY_EXIT_1 = ("import pathlib, sys; d = pathlib.Path(sys.argv[1]); d.mkdir(parents=True, "
                        "exist_ok=True); (d / 'summary.json').write_text('{\"stop_reason\": \"signal\"}'); "
                        "sys.exit(1)")


def test_a_job_whose_run_stopped_on_a_signal_says_so_whatever_its_launcher_exits_with(tmp_path):
    """Open MPI's mpirun, signalled with its job, exits with 1 where the run exited with 4
    (stopped with a checkpoint): the run's own summary.json, written after the job started,
    decides; a summary left from before it started does not."""
    fresh, stale = _job(tmp_path, 0, 1), _job(tmp_path, 1, 1)
    fresh.cmd = [sys.executable, "-c", WRITE_SUMMARY_EXIT_1, str(fresh.run_dir)]
    stale.run_dir.mkdir(parents=True)
    (stale.run_dir / "summary.json").write_text('{"stop_reason": "signal"}')
    os.utime(stale.run_dir / "summary.json", (time.time() - 60, time.time() - 60))
    stale.cmd = [sys.executable, "-c", "import sys; sys.exit(1)"]
    _scheduler(tmp_path, CorePool(2, [0, 1]), pin=False).run([fresh, stale])
    assert fresh.record["returncode"] == 1 and fresh.record["status"] == "failed"
    assert "stopped by a signal with a checkpoint" in fresh.record["reason"]
    assert stale.record["returncode"] == 1 and "reason" not in stale.record
