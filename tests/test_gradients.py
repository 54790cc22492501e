"""Gradient synchronisation pieces, tested in-process with a stand-in communicator."""

from __future__ import annotations

import numpy as np
import pytest

from drlmpi.algos.dqn import DQN
from drlmpi.config.schema import group_config
from drlmpi.envs.make import probe_spec
from drlmpi.topologies.data_parallel.exchanges import AllgatherExchange, check_identical_params


class FakeComm:
    """Pretends to be ``size`` ranks whose Allgather contributions are given rows."""

    def __init__(self, size: int, rows: np.ndarray | None = None):
        self.size = size
        self.rank = 0
        self.rows = rows

    def Allgather(self, sendbuf, recvbuf, kind):  # noqa: N802
        recvbuf[0] = sendbuf
        for r in range(1, self.size):
            recvbuf[r] = sendbuf if self.rows is None else self.rows[r]


def _dqn() -> DQN:
    return DQN(probe_spec("CartPole-v1"), group_config("algo", "dqn"), seed=0)


def test_checksum_check_detects_divergence():
    algo = _dqn()
    assert check_identical_params(FakeComm(3), algo).shape == (3, 1)
    local = algo.policy.flat.checksum()
    with pytest.raises(RuntimeError, match="parameters diverged across ranks"):
        check_identical_params(FakeComm(3, rows=np.array([[local], [local], [local + 1e-9]])), algo)


def test_allgather_sync_averages_in_rank_order():
    """float32 addition is not associative: 1 + 1e8 rounds to 1e8, so the rank-order sum
    ((1 + 1e8) + -1e8) is 0 while reverse order ((-1e8 + 1e8) + 1) gives 1. Every rank must
    get the rank-order result, whatever order the MPI library would reduce in."""
    algo = _dqn()
    group = algo.policy
    n = group.flat.numel
    values = np.array([1.0, 1e8, -1e8], dtype=np.float32)
    assert (values[0] + values[1]) + values[2] != (values[2] + values[1]) + values[0]  # order matters
    others = np.stack([np.full(n, v, dtype=np.float32) for v in values])
    comm = FakeComm(3, rows=others)
    group.flat.grads.fill_(float(values[0]))  # this rank's (rank 0's) gradient
    group.max_grad_norm = None
    captured = {}
    group.apply_gradients = lambda: captured.setdefault("g", group.flat.grads.clone())
    AllgatherExchange(comm)("q", group)
    assert np.all(captured["g"].numpy() == np.float32(0.0))
