"""topology.batch_rule: how data-parallel ranks share the job's batch
(drlmpi/topologies/core/data_parallel/batch_rule.py).

``global`` (the default) must give the job sequential's learning per sample - its minibatch,
its updates per job-wide step, its replay size, its first update, its PPO rollout and its
learning rate - whatever the world size; ``per_rank`` keeps each rank's config as it is. The
arithmetic is checked per world size, then on the algorithms' own update accounting, then on a
real allgather / parameter_server job under mpiexec.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from drlmpi.algos.dqn import DQN
from drlmpi.algos.ppo import PPO
from drlmpi.config.errors import ConfigError
from drlmpi.config.schema import SETTINGS, group_config
from drlmpi.run.command_line import _launch_time_resolver
from drlmpi.run.preflight import make_plan
from drlmpi.topologies.allgather import Allgather
from drlmpi.topologies.core.data_parallel.batch_rule import per_rank_algo_config
from drlmpi.topologies.param_server import ParameterServer
from tests.conftest import CONF
from tests.shared_runs import declare

OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True)

WORLD_SIZES = (1, 2, 3, 4, 8)


def _algo(name: str):
    """The algorithm's typed settings, as the run plan hands them to a topology."""
    return SETTINGS[f"algo/{name}"].build(group_config("algo", name))


# (algo, N) -> per-rank batch_size, buffer_size / rollout_steps, learning_starts, updates_per_step
# from the schema's defaults: DQN B=64 S=100000 L=1000 U=0.5; TD3 B=256 S=200000 L=10000 U=1; PPO B=64 R=2048
GLOBAL_TABLE = {
    ("dqn", 1): (64, 100000, 1000, 0.5), ("dqn", 2): (32, 50000, 500, 1.0),
    ("dqn", 3): (21, 33334, 334, 1.5), ("dqn", 4): (16, 25000, 250, 2.0),
    ("dqn", 8): (8, 12500, 125, 4.0),
    ("td3", 1): (256, 200000, 10000, 1.0), ("td3", 2): (128, 100000, 5000, 2.0),
    ("td3", 3): (85, 66667, 3334, 3.0), ("td3", 4): (64, 50000, 2500, 4.0),
    ("td3", 8): (32, 25000, 1250, 8.0),
    ("ppo", 1): (64, 2048, None, None), ("ppo", 2): (32, 1024, None, None),
    ("ppo", 3): (21, 683, None, None), ("ppo", 4): (16, 512, None, None),
    ("ppo", 8): (8, 256, None, None),
}


@pytest.mark.parametrize(("name", "ranks"), sorted(GLOBAL_TABLE))
def test_global_rule_arithmetic(name, ranks):
    job = _algo(name)
    rule = per_rank_algo_config(job, ranks, "global")
    cfg = rule.algo_cfg
    batch, storage, starts, ups = GLOBAL_TABLE[(name, ranks)]
    storage_key = "rollout_steps" if name == "ppo" else "buffer_size"
    assert (cfg.batch_size, getattr(cfg, storage_key)) == (batch, storage)
    # The job's minibatch is the configured one (exactly when N divides it, else within 10%).
    assert abs(ranks * cfg.batch_size - job.batch_size) <= 0.1 * job.batch_size
    if job.batch_size % ranks == 0:
        assert ranks * cfg.batch_size == job.batch_size
    # Job-wide storage is the configured one, rounded up by less than one row per rank.
    assert 0 <= ranks * getattr(cfg, storage_key) - getattr(job, storage_key) < ranks
    if name == "ppo":
        # Minibatch updates per job-wide rollout: sequential's.
        assert cfg.rollout_steps // cfg.batch_size == job.rollout_steps // job.batch_size
    else:
        assert (cfg.learning_starts, cfg.updates_per_step) == (starts, ups)
        # Updates per job-wide step: per-rank updates per local step / N = sequential's.
        assert math.isclose(cfg.updates_per_step / ranks, job.updates_per_step)
        assert 0 <= ranks * cfg.learning_starts - job.learning_starts < ranks
    # Learning rates and everything else are untouched; the job's config is not modified.
    untouched = set(job.options()) - {"batch_size", storage_key, "learning_starts", "updates_per_step"}
    assert all(getattr(cfg, k) == getattr(job, k) for k in untouched)
    assert job == _algo(name)
    assert rule.stats()["global_batch_size"] == ranks * batch
    assert set(rule.stats()["per_rank_algo"]) == (set() if ranks == 1 else
                                                  {"batch_size", storage_key} | (set() if name == "ppo" else
                                                  {"learning_starts", "updates_per_step"}))


@pytest.mark.parametrize("ranks", WORLD_SIZES)
@pytest.mark.parametrize("name", ["dqn", "td3", "ppo"])
def test_per_rank_rule_keeps_the_config_and_scales_learning_rates_on_request(name, ranks):
    job = _algo(name)
    assert per_rank_algo_config(job, ranks, "per_rank").algo_cfg == job
    lr_keys = [k for k in job.options() if k == "lr" or k.endswith("_lr")]
    assert lr_keys
    for scale, factor in (("linear", ranks), ("sqrt", math.sqrt(ranks)), ("none", 1)):
        cfg = per_rank_algo_config(job, ranks, "per_rank", scale).algo_cfg
        assert all(math.isclose(getattr(cfg, k), getattr(job, k) * factor) for k in lr_keys)
        assert all(getattr(cfg, k) == getattr(job, k) for k in job.options() if k not in lr_keys)


def test_an_algorithm_without_these_options_passes_through():
    random_cfg = _algo("random")
    assert per_rank_algo_config(random_cfg, 4, "global").algo_cfg == random_cfg
    assert per_rank_algo_config(random_cfg, 4, "global").stats()["per_rank_batch_size"] is None


@pytest.mark.parametrize(("batch", "ranks", "message"), [
    (8, 5, "topology.batch_rule=global needs algo.batch_size divisible by the 5 data-parallel ranks "
           "(within 10% once rounded): use algo.batch_size=5 or 10, or topology.batch_rule=per_rank, "
           "got algo.batch_size=8"),
    (4, 8, "use algo.batch_size=8, or topology.batch_rule=per_rank, got algo.batch_size=4"),
    (12, 8, "use algo.batch_size=8 or 16, or"),
])
def test_a_batch_the_rule_cannot_split_is_refused_in_one_line(batch, ranks, message):
    cfg = _algo("dqn").replace(batch_size=batch)
    with pytest.raises(ConfigError) as info:
        per_rank_algo_config(cfg, ranks, "global")
    assert message in str(info.value) and "\n" not in str(info.value)
    per_rank_algo_config(cfg, ranks, "per_rank")  # each rank keeps its batch: nothing to split


def test_lr_scale_is_refused_with_the_global_rule():
    with pytest.raises(ConfigError, match="topology.lr_scale=linear scales the learning rate for the N x "
                                          "larger minibatch of topology.batch_rule=per_rank"):
        per_rank_algo_config(_algo("dqn"), 2, "global", "linear")


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_refusals_come_from_validate_before_any_rank_starts():
    cfg = _compose("topology=allgather", "algo.batch_size=8")
    with pytest.raises(ConfigError, match="divisible by the 5 data-parallel ranks"):
        make_plan(cfg, 5)
    # A parameter server's rank 0 samples nothing: N is the workers.
    cfg = _compose("topology=parameter_server", "algo.batch_size=8")
    with pytest.raises(ConfigError, match="divisible by the 5 data-parallel ranks"):
        make_plan(cfg, 6)
    make_plan(cfg, 5)  # 4 workers: 2 each
    make_plan(_compose("topology=allgather", "algo.batch_size=8", "topology.batch_rule=per_rank"), 5)
    with pytest.raises(ConfigError, match="topology.lr_scale=sqrt scales the learning rate"):
        make_plan(_compose("topology=allgather", "topology.lr_scale=sqrt"), 2)
    make_plan(_compose("topology=allgather", "topology.lr_scale=sqrt", "topology.batch_rule=per_rank"), 2)
    assert ParameterServer.data_ranks(3) == 2 and Allgather.data_ranks(3) == 3


def test_reports_label_a_per_rank_run():
    assert Allgather.report_label({"batch_rule": "global"}) == "allgather"
    both = {"batch_rule": "per_rank", "reduce": "allgather"}
    assert Allgather.report_label(both) == "allgather[allgather,per_rank]"
    assert ParameterServer.report_label({"batch_rule": "per_rank"}) == "parameter_server[per_rank]"
    assert ParameterServer.report_label({}) == "parameter_server"


def _job_updates(algo_cls, spec, cfg, ranks: int, rounds: int, rows_per_round: int) -> list[int]:
    """Job-wide updates after each round of a data-parallel job whose ``ranks`` learners each
    store ``rows_per_round`` rows, counted as allgather does (the minimum of the ranks' dues)."""
    learners = [algo_cls(spec, cfg, seed=r, learner=True) for r in range(ranks)]
    rows = np.zeros((rows_per_round, learners[0].layout.width), np.float32)
    total, out = 0, []
    for _ in range(rounds):
        dues = []
        for algo in learners:
            algo.observe(rows)
            dues.append(algo.updates_due(rows_per_round))
        total += min(dues)
        out.append(total)
    return out


@pytest.mark.parametrize("ranks", WORLD_SIZES)
def test_global_rule_gives_sequential_updates_per_job_wide_step(cartpole, ranks):
    """The algorithms' own accounting: after every round, a job of N ranks collecting
    ``240 / N`` steps each has run the updates one process collecting 240 has - DQN with
    ``learning_starts`` job-wide, PPO its minibatch updates per job-wide rollout."""
    dqn = _algo("dqn")
    dqn = dqn.replace(hidden=[8], learning_starts=1024, buffer_size=4096)
    sequential = _job_updates(DQN, cartpole, dqn, 1, 16, 240)
    rule = per_rank_algo_config(dqn, ranks, "global")
    assert _job_updates(DQN, cartpole, rule.algo_cfg, ranks, 16, 240 // ranks) == sequential
    assert sequential[-1] == (16 - 4) * 240 // 2  # 0.5 per step from the 5th round (1200 >= 1024)
    assert sequential[-1] == 1440
    ppo = _algo("ppo")
    ppo = ppo.replace(hidden=[8], rollout_steps=960, batch_size=48, epochs=2)
    sequential = _job_updates(PPO, cartpole, ppo, 1, 8, 240)
    rule = per_rank_algo_config(ppo, ranks, "global")
    assert _job_updates(PPO, cartpole, rule.algo_cfg, ranks, 8, 240 // ranks) == sequential
    assert sequential[-1] == 2 * 2 * (960 // 48)  # two rollouts of 20 minibatches, 2 epochs each
    if ranks > 1:  # per_rank: fewer updates per job-wide step (1/N once every replay is ready)
        per_rank = per_rank_algo_config(dqn, ranks, "per_rank").algo_cfg
        assert _job_updates(DQN, cartpole, per_rank, ranks, 16, 240 // ranks)[-1] < 1440 / ranks


SAME_BUDGET = ["run.max_env_steps=3072", "topology.sync_every=128", "run.eval_every=100000",
               "algo.hidden=[32,32]", "run.progress_every_s=0", "run.stop_on_solve=false",
               "algo.learning_starts=1000"]
SEQUENTIAL_UPDATES = (3072 - 768) // 2  # what sequential runs with chunks of 256: the first 768 steps
#                                         come before the replay holds 1000 transitions; 0.5 per step after


RULE_JOBS = [
    ("allgather", 2, "global", SEQUENTIAL_UPDATES, 32),
    # each rank waits for 1000 of its own transitions (local step 1024), then 0.5 per local step
    ("allgather", 2, "per_rank", (1536 - 896) // 2, 64),
    # the server runs the last round's updates at the budget stop, as sequential does
    ("parameter_server", 3, "global", SEQUENTIAL_UPDATES, 32),
]
for _topology, _ranks, _rule, _, _ in RULE_JOBS:  # global: the default
    declare(f"batch-rule-{_topology}-{_rule}", _ranks,
            [f"topology={_topology}", *([] if _rule == "global" else [f"topology.batch_rule={_rule}"]),
             *SAME_BUDGET])


@pytest.mark.parametrize(("topology", "ranks", "rule", "updates", "batch"), RULE_JOBS)
def test_a_data_parallel_job_runs_the_rule(runs, topology, ranks, rule, updates, batch):
    """2 data ranks, 128 steps each per round (256 job-wide, as sequential's chunks), DQN with a
    64-sample minibatch: ``global`` runs sequential's updates on the job's 3072 steps with 32
    samples per rank; ``per_rank`` half as many updates on 2 x 64."""
    summary = runs.get(f"batch-rule-{topology}-{rule}").summary()
    assert summary["env_steps"] == 3072
    assert summary["updates"] == updates
    stats = summary["topology_stats"]
    assert stats["batch_rule"] == rule and stats["data_ranks"] == 2
    assert stats["per_rank_batch_size"] == batch and stats["global_batch_size"] == 2 * batch
    if rule == "global":
        assert stats["per_rank_algo"] == {"batch_size": 32, "buffer_size": 50000,
                                          "learning_starts": 500, "updates_per_step": 1.0}
        assert summary["topology_label"] == topology
    else:
        assert stats["per_rank_algo"] == {}
        assert summary["topology_label"] == f"{topology}[per_rank]"
    # One gradient collective per update (one network) on every rank that computes gradients.
    for rank in summary["per_rank"]:
        if rank["role"] != "server":
            assert rank["sent"]["gradients"][0] == rank["updates"] == updates


@pytest.mark.parametrize("topology, ranks, stepping", [
    ("sequential", 1, 1), ("p2p", 2, 1), ("star", 4, 3), ("central", 4, 3), ("async", 4, 3),
    ("allgather", 4, 4), ("parameter_server", 4, 3), ("groups", 6, 4)])
def test_a_rollout_per_environment_counts_the_jobs_environments(topology, ranks, stepping):
    cfg = _compose("algo=ppo", f"topology={topology}", "env.num_envs=2",
                   "algo.rollout_steps_per_env=16", "algo.num_minibatches=4")
    configured = cfg.algo.rollout_steps
    plan = make_plan(cfg, ranks)
    rows = 16 * 2 * stepping  # 16 steps of each of the job's environments
    assert plan.job_options == {"rollout_steps": rows, "batch_size": rows // 4}
    assert (plan.cfg.algo.rollout_steps, plan.cfg.algo.batch_size) == (rows, rows // 4)
    assert cfg.algo.rollout_steps == configured != rows  # the caller's config is not modified
    if issubclass(plan.topology_cls, Allgather | ParameterServer):  # global rule: a rank's share
        settings = plan.topology_cls.settings_of(plan.cfg.topology)
        algo_cfg = plan.topology_cls.batch_rule(settings, plan.cfg.algo, ranks).algo_cfg
        per_rank = 16 * 2 * stepping // plan.topology_cls.data_ranks(ranks)
        assert (algo_cfg.rollout_steps, algo_cfg.batch_size) == (per_rank, per_rank // 4)
    algo = PPO(plan.spec, plan.cfg.algo, learner=False)
    assert algo.updates_per_rollout(rows) == 4 * int(plan.cfg.algo.epochs)


def test_a_rollout_per_environment_is_refused_in_one_line_when_it_cannot_be_split():
    with pytest.raises(ConfigError, match="algo.num_minibatches=100 is more than the rollout's 64 rows"):
        make_plan(_compose("algo=ppo", "topology=star", "env.num_envs=2",
                           "algo.rollout_steps_per_env=16", "algo.num_minibatches=100"), 3)
    plan = make_plan(_compose("algo=ppo", "topology=star", "algo.rollout_steps=2048",
                              "algo.num_minibatches=8"), 3)
    assert plan.job_options == {"batch_size": 2048 // 8}  # of rollout_steps when per env is unset
    assert make_plan(_compose("algo=ppo", "topology=star"), 3).job_options == {}
