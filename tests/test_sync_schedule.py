"""An update that strays from its ``sync_schedule`` ends the job clearly, never hangs it.

A parameter server follows the schedule without computing gradients, and allgather peers
enter one collective per scheduled sync: a rank that skips or adds a sync would leave the
others waiting forever. ``Algorithm.run_updates`` checks every update and detects it on the
rank that strays.
"""

from __future__ import annotations

import pytest

from drlmpi.algos.exchange import LOCAL, SyncScheduleError
from drlmpi.config.schema import group_config
from drlmpi.envs.make import probe_spec
from tests.exchanges import Recording
from tests.mpirun import run_job
from tests.skipping_algo import SKIPPED_UPDATE, SkippingDQN


def _algo(**cfg_changes) -> SkippingDQN:
    cfg = group_config("algo", "dqn")
    cfg.learning_starts = 0
    for key, value in cfg_changes.items():
        cfg[key] = value
    algo = SkippingDQN(probe_spec("CartPole-v1"), cfg, seed=0)
    algo.observe(algo.layout.empty(64))
    return algo


def test_a_skipped_sync_is_detected_when_the_update_returns():
    algo = _algo()
    exchange = Recording()
    algo.run_updates(SKIPPED_UPDATE, exchange)
    assert exchange.calls == ["q"] * SKIPPED_UPDATE
    expected = r"update 3 synced \[\] but sync_schedule\(3\) promised \['q'\]"
    with pytest.raises(SyncScheduleError, match=expected):
        algo.update(exchange)


@pytest.mark.parametrize("per_graph", [1, 4])
def test_a_single_learner_is_checked_on_the_same_path(per_graph):
    """The local exchange goes through the same check, one update at a time or in blocks of
    ``updates_per_graph`` (the block of updates 0-3 holds the straying update 3)."""
    algo = _algo(updates_per_graph=per_graph)
    with pytest.raises(SyncScheduleError, match=r"update 3 synced \[\]"):
        algo.run_updates(SKIPPED_UPDATE + 2, LOCAL)
    assert algo.updates == (SKIPPED_UPDATE if per_graph == 1 else 0)


def test_an_unexpected_sync_is_refused_before_its_collective():
    algo = _algo()
    algo.sync_schedule = lambda index: ()  # promises nothing, but the update syncs "q"
    exchange = Recording()
    with pytest.raises(SyncScheduleError, match=r"synced \['q'\] but sync_schedule\(0\) promised \[\]"):
        algo.update(exchange)
    assert exchange.calls == []  # the collective itself was never entered


@pytest.mark.parametrize(("topology", "ranks"), [("parameter_server", 3), ("allgather", 2)])
def test_a_straying_update_ends_the_job(tmp_path, topology, ranks):
    job = run_job(ranks, [f"topology={topology}", "algo._target_=tests.skipping_algo.SkippingDQN",
                          "algo.learning_starts=100", "run.max_env_steps=3000",
                          "run.progress_every_s=0"], tmp_path / "run", timeout=120)
    assert job.returncode != 0
    assert "SyncScheduleError: algo=dqn update 3 synced [] but sync_schedule(3) promised ['q']" in job.stderr
