"""The MPI pool that runs the suite's multi-rank jobs (tests/mpi_pool.py) reports what went wrong
instead of hiding it: a job that raises on any rank fails with that rank's traceback, one that
hangs fails after its timeout, and the jobs after either still run (on a new pool when the old
one had to end). A small pool of its own, so that its restarts cost little."""

from __future__ import annotations

import time

import pytest

from tests.mpi_pool import Pool, PoolError


def ranks_and_sum(comm, value: int) -> list[int]:
    """The job's size and the sum of ``value`` over its ranks (an Allreduce on ``comm``)."""
    from mpi4py import MPI

    return [comm.Get_size(), comm.allreduce(value, op=MPI.SUM)]


def raise_on(comm, rank: int) -> None:
    """Raise on ``rank``; the others wait in a collective it never joins."""
    if comm.Get_rank() == rank:
        raise RuntimeError(f"deliberate failure on rank {rank}")
    comm.Barrier()


def sleep(comm, seconds: float) -> None:
    time.sleep(seconds)


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory):
    pool = Pool(size=2, root=tmp_path_factory.mktemp("small-pool"))
    yield pool
    pool.close()


def test_jobs_run_on_their_first_k_ranks_and_return_rank_0s_value(small_pool):
    one, two = (small_pool.submit(k, "tests.test_pool:ranks_and_sum", value=3) for k in (1, 2))
    assert one.result() == [1, 3] and two.result() == [2, 6]
    with pytest.raises(ValueError, match="the pool has 2 ranks"):
        small_pool.submit(3, "tests.test_pool:ranks_and_sum", value=1)


def test_a_failure_is_reported_with_its_traceback_and_the_next_jobs_run(small_pool):
    alone = small_pool.submit(1, "tests.test_pool:raise_on", rank=0)
    after = small_pool.submit(2, "tests.test_pool:ranks_and_sum", value=1)
    with pytest.raises(PoolError, match=r"(?s)raised:.*RuntimeError: deliberate failure on rank 0"):
        alone.result()
    assert after.result() == [2, 2]  # a one-rank failure leaves the pool running
    generation = small_pool.generation
    peer = small_pool.submit(2, "tests.test_pool:raise_on", rank=1)  # rank 0 waits in a Barrier
    queued = small_pool.submit(2, "tests.test_pool:ranks_and_sum", value=2)
    with pytest.raises(PoolError, match=r"(?s)on 2 rank\(s\) raised:.*deliberate failure on rank 1"):
        peer.result()
    assert queued.result() == [2, 4] and small_pool.generation == generation + 1  # on a new pool


def test_a_job_that_outlives_its_timeout_fails_and_the_next_jobs_run(small_pool):
    small_pool.submit(1, "tests.test_pool:ranks_and_sum", value=0).result()  # not the pool's first job
    stuck = small_pool.submit(1, "tests.test_pool:sleep", timeout=1.0, seconds=60)
    queued = small_pool.submit(1, "tests.test_pool:ranks_and_sum", value=5)
    started = time.monotonic()
    with pytest.raises(PoolError, match="did not finish within 1 s"):
        stuck.result()
    assert time.monotonic() - started < 30
    assert queued.result() == [1, 5]
