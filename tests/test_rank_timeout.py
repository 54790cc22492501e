"""A rank that stops answering ends the job (``run.rank_timeout_s``), with one line naming it.

In-process: the watchdog's rule (a computing rank gives up after the timeout; a rank waiting in
MPI only after a grace period and only when no other rank progresses), and what counts as
progress in :class:`~drlmpi.mpi.timed.TimedComm` (a poll that completes nothing does not). As MPI
jobs: an environment that blocks forever on one rank ends the job under every topology, and a
run whose ranks legitimately wait longer than the timeout for a busy peer is not ended.
"""

from __future__ import annotations

import re
import subprocess
import time

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from drlmpi.config.errors import ConfigError
from drlmpi.config.schema import SCHEMA
from drlmpi.job_control.abort import HANG_EXIT
from drlmpi.job_control.progress import ProgressClock
from drlmpi.job_control.watchdog import BOARD_DIR, ProgressBoard, Watchdog, grace_for
from drlmpi.run.command_line import _launch_time_resolver
from drlmpi.run.preflight import make_plan
from tests.conftest import CONF
from tests.mpirun import start_job
from tests.shared_runs import declare

MPI = pytest.importorskip("mpi4py.MPI")
from drlmpi.mpi.timed import TimedComm  # noqa: E402

OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True)

HANG_S = 2  # run.rank_timeout_s of the jobs that hang
BLOCKING_ENV = "env.id=tests.blocking_env:BlockingCartPole-v0"


def _watch(timeout_s: float, clock: ProgressClock, **kwargs) -> tuple[Watchdog, list[tuple[float, str]]]:
    """A started watchdog on ``clock`` whose firing is recorded (time, message), not acted on."""
    fired: list[tuple[float, str]] = []
    dog = Watchdog(timeout_s, rank=7, on_timeout=lambda m: fired.append((time.monotonic(), m)),
                   clock=clock, tick_s=0.02, **kwargs)
    return dog.start(), fired


def _until(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


# -- the watchdog in-process -----------------------------------------------------------------
def test_the_watchdog_fires_after_the_timeout_and_not_before():
    clock = ProgressClock()
    dog, fired = _watch(0.5, clock)
    try:
        for i in range(30):  # 1.5 s of work completing every 50 ms: three timeouts long
            clock.begin("fake work %d", i)
            time.sleep(0.05)
            clock.done()
        assert fired == []
        clock.begin("fake work %d", 99)  # ...which never completes
        stuck_at = clock.last  # the last progress
        _until(lambda: fired, 5)
    finally:
        dog.stop()
    assert len(fired) == 1
    at, message = fired[0]
    assert 0.5 <= at - stuck_at < 1.0
    assert re.fullmatch(r"drlmpi: error: rank 7 made no progress for 0\.\d s \(in fake work 99\); "
                        r"ending the job \(run\.rank_timeout_s=0\.5\)", message), message


def test_a_paused_phase_is_never_a_hang():
    clock = ProgressClock()
    dog, fired = _watch(0.3, clock)
    try:
        with clock.paused("start-up: building the %s", "learner"):
            with clock.paused("start-up: creating environments"):
                time.sleep(0.5)
            time.sleep(0.5)  # the outer phase is still paused
        assert fired == []
        _until(lambda: fired, 3)  # after the phase the clock runs again
    finally:
        dog.stop()
    assert "(after start-up: building the learner)" in fired[0][1]


@pytest.fixture
def comm():
    timed = TimedComm(MPI.COMM_SELF.Dup(), progress=ProgressClock())
    yield timed
    timed.free()


def test_polls_that_complete_nothing_are_not_progress(comm):
    clock = comm.progress
    buf = np.zeros(4, dtype=np.int64)
    request = comm.Irecv(buf, source=0, tag=9, kind="control")
    dog, fired = _watch(0.4, clock)
    try:
        start = clock.last  # the watchdog's start; no poll below moves it
        while not fired and time.monotonic() - start < 5:  # an async learner polling in a loop
            assert not comm.test(request)
            assert comm.testsome([request]) == []
        assert fired, "polls that completed nothing kept the watchdog quiet"
        # A rank waiting in MPI gets the grace period on top of the timeout.
        assert fired[0][0] - start >= 0.4 + grace_for(0.4)
        # (the loop alternates the two polls: either may be the one reported)
        assert re.search(r"\(waiting in Test(some)? \(Irecv control from rank 0\)\)", fired[0][1])
        # A poll that completes a request, and a blocking call returning, are progress.
        before = clock.last
        comm.Send(np.arange(4, dtype=np.int64), dest=0, tag=9, kind="control")
        assert clock.last > before
        before = clock.last
        assert comm.testsome([request]) == [0]
        assert clock.last > before and buf[3] == 3
    finally:
        dog.stop()


def _two_rank_board(board_dir, timeout: float) -> tuple[ProgressBoard, ProgressClock, Watchdog]:
    """Rank 1's board file (the peer), and rank 0's clock and unstarted watchdog on the board."""
    clock = ProgressClock()
    dog = Watchdog(timeout, rank=0, on_timeout=lambda m: None, clock=clock,
                   board=ProgressBoard(board_dir, rank=0, size=2))
    return ProgressBoard(board_dir, rank=1, size=2), clock, dog


def test_a_rank_waiting_in_mpi_gives_up_only_when_no_rank_progresses(tmp_path):
    """The rule, on a board of two ranks (this one, 0, waits in a Bcast; rank 1 is the peer).
    Catches a waiting rank that ends the job while a computing peer that stopped still has its
    grace to name where it is stuck (rank 0's line instead of the stuck rank's: seen once in a
    suite run on 2 cores, test_a_rank_that_stops_answering_ends_the_job[star])."""
    timeout, grace = 10.0, grace_for(10.0)
    board_dir = tmp_path / "board"
    peer, clock, dog = _two_rank_board(board_dir, timeout)
    try:
        now = clock.last
        clock.wait("Bcast %s (root %d)", "weights", 1)
        peer.publish(time.time())  # the peer is busy (an evaluation, a batch of updates...)
        assert dog.check(now + timeout) is None  # within the grace period
        assert dog.check(now + timeout + grace + 1) is None  # the peer progressed recently
        # The peer stopped while computing: its own watchdog names where, so this rank gives it
        # one more grace period (a late line on a loaded host is not this rank's to preempt) ...
        peer.publish(time.time() - timeout - 1, "running")
        assert dog.check(now + timeout + grace + 2.1) is None  # (the board is read once a second)
        # ... but a peer that stopped while waiting in MPI too leaves nobody else to speak.
        peer.publish(time.time() - timeout - 1, "waiting")
        assert dog.check(now + timeout + grace + 3.2) is not None
        peer.publish(time.time() - timeout - 1)  # the peer stopped too: the job is stuck
        message = dog.check(now + timeout + grace + 3)
        assert message == (f"drlmpi: error: rank 0 made no progress for {timeout + grace + 3:.1f} s "
                           "(waiting in Bcast weights (root 1), and no other rank progressed in the "
                           "last 10 s); ending the job (run.rank_timeout_s=10)")
        # A computing rank gives up after the timeout whatever its peers do.
        peer.publish(time.time())
        clock.begin("env.step of environment %d", 0)
        assert "(in env.step of environment 0)" in dog.check(now + timeout + grace + 5)
        # Once a peer is ending the job (it printed why), this rank stays quiet for a while.
        peer.publish(time.time() - timeout - 1, "ending")
        assert dog.check(now + timeout + grace + 7) is None
        assert dog.check(now + timeout + grace + 7 + grace + 3) is not None
    finally:
        dog.stop()
        peer.close()
    assert not board_dir.exists()  # the last one out removes the board


def test_a_peer_building_its_roles_keeps_a_waiting_rank_quiet(tmp_path):
    """A peer in an untimed phase (building its learner: the first optimizer imports the compiler
    stack) publishes ``paused``; on a loaded host its watchdog thread may then not write again for
    seconds, and its old time must not make a rank waiting for it end the job. Fails when the
    board keeps no ``paused`` state (seen in the hang jobs below: a simulator waiting for the
    first weights ended the job while its learner was still being built)."""
    timeout, grace = 2.0, grace_for(2.0)
    board_dir = tmp_path / "board"
    peer, clock, dog = _two_rank_board(board_dir, timeout)
    peer_clock = ProgressClock()
    peer_dog = Watchdog(timeout, rank=1, on_timeout=lambda m: None, clock=peer_clock, board=peer)
    try:
        now = clock.last
        clock.wait("Bcast %s (root %d)", "weights", 1)
        with peer_clock.paused("start-up: building the %s", "learner"):
            peer_dog._publish(time.monotonic(), force=True)  # what its thread writes once, then starves
            peer.publish(time.time() - 60, peer.read(1)[1])  # ...a minute ago
            assert peer.read(1)[1] == "paused"
            assert dog.check(now + timeout + 2 * grace + 5) is None
        peer_dog._publish(time.monotonic(), force=True)  # the phase is over: timed again
        peer.publish(time.time() - 60, peer.read(1)[1])
        assert dog.check(now + timeout + 2 * grace + 10) is not None
    finally:
        dog.stop()
        peer_dog.stop()


def test_a_bad_rank_timeout_is_refused():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["run.rank_timeout_s=-1"])
    with pytest.raises(ConfigError, match=r"^run\.rank_timeout_s must be >= 0, got -1$"):
        make_plan(cfg, world_size=1)
    option = SCHEMA["run"]["rank_timeout_s"]  # the schema owns the option's type and range
    for bad, problem in (("soon", "must be a number"), (float("nan"), "must be finite"),
                         (True, "must be a number")):
        assert option.problem(bad) == problem
    for fine in (None, 0, 2.5, 120):
        assert option.problem(fine) is None


# -- MPI jobs ---------------------------------------------------------------------------------
def _survivors(run_dir, wait_s: float = 10.0) -> str:
    """Processes whose command line names this job's (unique) run directory, after giving the
    aborted ranks up to ``wait_s`` to finish exiting (mpiexec may return while a killed rank is
    still being reaped). Any process still there after that is a survivor."""
    deadline = time.monotonic() + wait_s
    while True:
        out = subprocess.run(["pgrep", "-af", str(run_dir)], capture_output=True, text=True)
        left = out.stdout.strip()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


# topology -> (ranks, the rank that hangs): the fewest ranks each topology takes (every job's
# processes start at once on the machine's cores; each one more costs the module seconds)
HANGS = {"sequential": (1, 0), "p2p": (2, 1), "star": (2, 1), "parameter_server": (2, 1), "async": (2, 1),
         "allgather": (2, 1), "groups": (4, 3), "central": (2, 1)}


@pytest.fixture(scope="module")
def hung_jobs(tmp_path_factory):
    """One job per topology, all started at once: their ranks spend most of their time waiting
    for the stuck one (asleep in MPI: yield_when_oversubscribed), so they overlap for free."""
    root = tmp_path_factory.mktemp("hangs")
    jobs = {}
    for topology, (ranks, stuck) in HANGS.items():
        overrides = [f"topology={topology}", BLOCKING_ENV, f"+env.kwargs.hang_rank={stuck}",
                     "+env.kwargs.hang_after=200", f"run.rank_timeout_s={HANG_S}", "run.eval_every=100000",
                     "run.progress_every_s=0"]
        jobs[topology] = start_job(ranks, overrides, root / topology, timeout=120)
    return jobs


@pytest.mark.parametrize("topology", list(HANGS))
def test_a_rank_that_stops_answering_ends_the_job(hung_jobs, topology):
    running = hung_jobs[topology]
    job = running.result()
    stuck = HANGS[topology][1]
    assert job.returncode == HANG_EXIT, job.stderr[-3000:]
    hung = re.search(r"BlockingCartPole: rank \d+ stops answering at t=([\d.]+)", job.stderr)
    assert hung, job.stderr[-3000:]  # the job ended because the environment hung, not before
    hung_at = float(hung[1])
    # The stuck rank's watchdog fires after the timeout, then MPI_Abort ends every rank.
    assert HANG_S <= running.ended - hung_at < HANG_S + 8, job.stderr[-3000:]
    lines = [line for line in job.stderr.splitlines() if "made no progress" in line]
    assert len(lines) == 1, job.stderr[-3000:]
    assert re.fullmatch(rf"drlmpi: error: rank {stuck} made no progress for \d+\.\d s \(in env\.step of "
                        rf"environment 0\); ending the job \(run\.rank_timeout_s={HANG_S}\)", lines[0])
    # ...followed by the stuck rank's Python stacks: its main thread is in the environment's step.
    stacks = job.stderr.split(lines[0], 1)[1]
    assert re.search(r"File \"[^\"]*blocking_env\.py\", line \d+ in step", stacks), stacks[:3000]
    assert _survivors(job.run_dir) == ""


BUSY_LEARNER_TIMEOUT_S = 2
BUSY_LEARNER = declare("star-busy-learner", 3, [
    "topology=star", BLOCKING_ENV, "+env.kwargs.slow_rank=0", "+env.kwargs.slow_step_s=0.004",
    "env.max_episode_steps=20", f"run.rank_timeout_s={BUSY_LEARNER_TIMEOUT_S}", "run.max_env_steps=1024",
    "run.eval_every=1024", "run.eval_episodes=120", "run.stop_on_solve=false", "algo.learning_starts=256",
    "algo.hidden=[32,32]", "run.progress_every_s=0"])


def test_ranks_waiting_for_a_busy_peer_are_not_a_hang(runs):
    """Star with a 2 s timeout: while the learner evaluates (120 greedy episodes of at most 20
    steps on environments slowed to 4 ms a step: 4 to 10 s) the simulators sit in one collective
    for longer than the timeout and its grace period - legitimately, since the learner's rank
    makes progress all along - and the run ends normally (in the MPI pool: a watchdog that
    fired would end the pool and fail the test)."""
    timeout = BUSY_LEARNER_TIMEOUT_S
    run = runs.get(BUSY_LEARNER)
    summary = run.summary()
    assert summary["evaluations"] == 1 and summary["updates"] > 0
    # The evaluation kept the simulators waiting for longer than they would wait on their own.
    assert summary["eval_seconds"] > timeout + grace_for(timeout)
    assert not (run.run_dir / BOARD_DIR).exists()  # the progress board is cleaned up
