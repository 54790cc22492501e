"""``topology.round_rows``: star's round sized job-wide (drlmpi/topologies/star.py).

Each simulator collects ``round_rows / (simulators x env.num_envs)`` steps, so a round holds the
same rows at every world size: the steps per simulator, the planner's pace (which must model the
round that runs), the refusals, the report label, and a real run whose rounds - read from the
policy lag each round records - are those of the equivalent ``sync_every``.
"""

from __future__ import annotations

from drlmpi.topologies.star import Star, StarSettings
from tests.conftest import RunResult, run_in_pool
from tests.test_refusals import refusal


def test_the_round_is_shared_among_every_simulators_environments():
    cfg = StarSettings(sync_every=256, round_rows=960)
    assert [Star.round_steps(cfg, sims, 1) for sims in (1, 3, 7, 15)] == [960, 320, 137, 64]
    assert Star.round_steps(cfg, 15, 8) == 8  # 15 simulators x 8 environments
    assert Star.round_steps(cfg.replace(round_rows=4), 15, 8) == 1  # at least one step
    assert Star.round_steps(cfg.replace(round_rows=None), 15, 8) == 256  # sync_every
    assert Star.report_label(cfg) == "star[round_rows=960]"


def test_the_planner_paces_the_round_that_runs():
    """Star's pace with ``round_rows`` is its pace at the ``sync_every`` that resolves to, world
    size by world size, and not the default's."""
    from types import SimpleNamespace

    probe = SimpleNamespace(num_envs=1, sim_step_s=1e-3, row_bytes=40, weight_bytes=20_000,
                            ingest_row_s=1e-6, updates_per_step=1.0, batch_size=64,
                            message_s=lambda nbytes: 1e-5 + nbytes / 1e9,
                            learner_update_at=lambda batch: 2e-3, slowdown_at=lambda ranks: 1.0)
    by_rows = StarSettings(sync_every=256, round_rows=960)
    for ranks, steps in ((4, 320), (16, 64)):
        paced = Star.pace(ranks, probe, by_rows)
        assert paced == Star.pace(ranks, probe, StarSettings(sync_every=steps))
        assert paced != Star.pace(ranks, probe, StarSettings(sync_every=256))


def test_round_rows_is_refused_with_episodes_or_beside_a_sync_every():
    assert refusal("topology=star", "topology.round_rows=960", "topology.sync_unit=episodes",
                   world_size=3) == ("topology.round_rows counts rows (environment steps): use "
                                     "topology.sync_unit=steps with it")
    assert refusal("topology=star", "topology.round_rows=960", "topology.sync_every=64",
                   world_size=3) == ("topology.round_rows=960 and topology.sync_every=64 both size "
                                     "star's round: set one of them")


CARTPOLE = ["algo=dqn", "env=cartpole", "seed=5", "run.max_env_steps=1536", "algo.learning_starts=256",
            "algo.hidden=[16,16]", "algo.updates_per_step=1", "run.eval_every=100000",
            "run.progress_every_s=0", "run.tensorboard=false", "topology=star"]


def test_a_star_run_collects_the_rounds_round_rows_asks_for(pool, tmp_path):
    """Star on 3 ranks (2 simulators) with ``round_rows=256`` runs rounds of 128 steps a
    simulator, exactly as ``sync_every=128``: the same job-wide steps and the same policy lags -
    each round's rows lag by the previous round's updates, 256 at one update a step."""
    jobs = {name: run_in_pool(pool, 3, [*CARTPOLE, override], tmp_path / name)
            for name, override in (("rows", "topology.round_rows=256"), ("every", "topology.sync_every=128"))}
    summaries = {name: RunResult(tmp_path / job.result()).summary() for name, job in jobs.items()}
    rows, every = summaries["rows"], summaries["every"]
    assert rows["env_steps"] == every["env_steps"] == 1536
    assert rows["policy_lag_max"] == every["policy_lag_max"] == 256
    assert rows["policy_lag_mean"] == every["policy_lag_mean"]
    assert (rows["topology_label"], every["topology_label"]) == ("star[round_rows=256]",
                                                                 "star[sync_every=128]")
