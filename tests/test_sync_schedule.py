"""An update that strays from its ``sync_schedule`` ends the job clearly, never hangs it.

A parameter server follows the schedule without computing gradients, and allgather peers
enter one collective per scheduled sync: a rank that skips or adds a sync would leave the
others waiting forever. ``Algorithm.checked_update`` detects it on the rank that strays.
"""

from __future__ import annotations

import pytest

from drlmpi.algos.sync import SyncScheduleError, local_sync
from drlmpi.config.schema import group_config
from drlmpi.envs.make import probe_spec
from tests.mpirun import run_job
from tests.skipping_algo import SKIPPED_UPDATE, SkippingDQN


def _algo() -> SkippingDQN:
    cfg = group_config("algo", "dqn")
    cfg.learning_starts = 0
    algo = SkippingDQN(probe_spec("CartPole-v1"), cfg, seed=0)
    algo.observe(algo.layout.empty(64))
    return algo


def test_a_skipped_sync_is_detected_when_the_update_returns():
    algo = _algo()
    calls = []

    def sync(name, group):
        calls.append(name)
        local_sync(name, group)

    for _ in range(SKIPPED_UPDATE):
        algo.checked_update(sync)
    assert calls == ["q"] * SKIPPED_UPDATE
    expected = r"update 3 synced \[\] but sync_schedule\(3\) promised \['q'\]"
    with pytest.raises(SyncScheduleError, match=expected):
        algo.checked_update(sync)


def test_a_single_process_is_not_checked():
    algo = _algo()
    for _ in range(SKIPPED_UPDATE + 2):
        algo.checked_update(local_sync)  # nobody waits for a single process: no error
    assert algo.updates == SKIPPED_UPDATE + 2


def test_an_unexpected_sync_is_refused_before_its_collective():
    algo = _algo()
    algo.sync_schedule = lambda index: ()  # promises nothing, but update() syncs "q"
    entered = []
    with pytest.raises(SyncScheduleError, match=r"synced \['q'\] but sync_schedule\(0\) promised \[\]"):
        algo.checked_update(lambda name, group: entered.append(name))
    assert entered == []  # the collective itself was never entered


@pytest.mark.parametrize(("topology", "ranks"), [("parameter_server", 3), ("allgather", 2)])
def test_a_straying_update_ends_the_job(tmp_path, topology, ranks):
    job = run_job(ranks, [f"topology={topology}", "algo._target_=tests.skipping_algo.SkippingDQN",
                          "algo.learning_starts=100", "run.max_env_steps=3000",
                          "run.progress_every_s=0"], tmp_path / "run", timeout=120)
    assert job.returncode != 0
    assert "SyncScheduleError: algo=dqn update 3 synced [] but sync_schedule(3) promised ['q']" in job.stderr
