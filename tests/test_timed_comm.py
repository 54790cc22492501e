"""The communicator: every call is timed, counted by payload kind, and bytes are measured.

Runs in-process on ``COMM_SELF`` (a rank talking to itself) and on a duplicate of it, so no
launcher is needed; the multi-rank counts are asserted by the topology contract tests.
"""

from __future__ import annotations

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI")

from drlmpi.mpi.timed import TimedComm  # noqa: E402
from drlmpi.mpi.wire import Control, int64_message  # noqa: E402
from tests.shared_runs import CUE, declare  # noqa: E402


@pytest.fixture
def comm():
    timed = TimedComm(MPI.COMM_SELF.Dup())
    yield timed
    timed.free()


def test_point_to_point_counts_the_bytes_that_arrived(comm):
    data = np.arange(10, dtype=np.float32)
    send = comm.Isend(data, dest=0, tag=7, kind="experience")
    # The receive buffer is larger than the message: the bytes that arrived are counted.
    buf = np.zeros(32, dtype=np.float32)
    assert comm.probe_count(0, 7, itemsize=4) == 10
    comm.Recv(buf, source=0, tag=7, kind="experience")
    comm.wait(send)
    assert np.array_equal(buf[:10], data)
    assert comm.sent == {"experience": [1, 40]}
    assert comm.received == {"experience": [1, 40]}
    assert {"Isend", "Probe", "Recv", "Wait"} <= comm.calls.keys()
    assert comm.wait_s > 0 and comm.wait_s == pytest.approx(sum(v[1] for v in comm.calls.values()))


def test_nonblocking_receives_are_counted_when_they_complete(comm):
    bufs = [np.zeros(len(Control), dtype=np.int64) for _ in range(3)]
    reqs = [comm.Irecv(b, source=0, tag=t, kind="control") for b, t in zip(bufs, (1, 2, 3))]
    assert comm.testsome(reqs) == []
    assert comm.received == {}  # posted, nothing arrived yet
    comm.Send(int64_message(Control, stop=1, env_steps=5), dest=0, tag=2, kind="control")
    assert comm.testsome(reqs) == [1]
    assert bufs[1][Control.STOP] == 1 and bufs[1][Control.ENV_STEPS] == 5
    assert comm.received == {"control": [1, 8 * len(Control)]}
    comm.Send(np.array([9], dtype=np.int64), dest=0, tag=3, kind="control")
    assert comm.waitany([reqs[0], reqs[2]]) == 1
    assert comm.received == {"control": [2, 8 * len(Control) + 8]}
    # A cancelled receive completes without counting anything.
    comm.cancel(reqs[0])
    assert comm.received == {"control": [2, 8 * len(Control) + 8]}
    assert comm.sent == {"control": [2, 8 * len(Control) + 8]}
    assert comm.calls["Testsome"][0] == 2 and comm.calls["Cancel"][0] == 1


def test_test_completes_a_request_once(comm):
    buf = np.zeros(2, dtype=np.float32)
    req = comm.Irecv(buf, source=0, tag=5, kind="weights")
    assert not comm.test(req)
    comm.Send(np.ones(2, dtype=np.float32), dest=0, tag=5, kind="weights")
    assert comm.test(req)
    assert comm.received == {"weights": [1, 8]}


def test_collectives_on_a_single_rank_move_nothing_to_others(comm):
    buf = np.ones(6, dtype=np.float32)
    comm.Bcast(buf, root=0, kind="weights")
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM, kind="gradients")
    table = np.zeros((1, 3), dtype=np.int64)
    comm.Allgather(np.array([1, 2, 3], dtype=np.int64), table, kind="counts")
    assert table.tolist() == [[1, 2, 3]]
    assert comm.sent["weights"] == [0, 0]  # root of a 1-rank Bcast sends to nobody
    assert comm.received["counts"] == [0, 0]
    assert comm.sent["gradients"] == [1, 24]
    assert comm.stats()["mpi_calls"]["Allgather"][0] == 1


def test_probe_refuses_a_message_of_partial_items(comm):
    send = comm.Isend(np.zeros(3, dtype=np.uint8), dest=0, tag=9, kind="odd")
    with pytest.raises(RuntimeError, match="not a whole number of 4-byte items"):
        comm.probe_count(0, 9, itemsize=4)
    comm.Recv(np.zeros(3, dtype=np.uint8), source=0, tag=9, kind="odd")
    comm.wait(send)


#: star where the learner keeps working after the simulators have left: the updates its last
#: round entitles (1,024: 512 rows x 2) run after the stop message, while the simulators wait in
#: the collectives that close the job
LATE_LEARNER = declare("star-late-learner", 3, [
    CUE, "topology=star", "topology.sync_every=256", "algo.updates_per_step=2", "algo.hidden=[32,32]",
    "algo.learning_starts=256", "run.max_env_steps=1024", "run.eval_every=100000000",
    "run.progress_every_s=0", "run.stop_on_solve=false", "env.reward_threshold=null"])


def test_every_share_lies_in_0_1_when_simulators_finish_long_before_the_learner(runs):
    summary = runs.get(LATE_LEARNER).summary()
    learner, *simulators = summary["per_rank"]
    assert learner["updates"] >= 1024 and learner["wall_s"] > max(s["wall_s"] for s in simulators)
    for sim in simulators:  # they waited for the learner's last updates, after their own part
        assert sim["mpi_wait_after_run_s"] > 0.3 * (learner["wall_s"] - sim["wall_s"])
    for rank in summary["per_rank"]:
        assert 0 <= rank["mpi_wait_s"] <= rank["wall_s"]
        assert rank["mpi_wait_share"] == pytest.approx(rank["mpi_wait_s"] / rank["wall_s"])
        assert 0 <= rank["mpi_wait_share"] <= 1 and 0 <= rank["busy_share"] <= 1
    assert 0 <= summary["mpi_wait_share"] <= 1
