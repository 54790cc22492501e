"""topology=groups: L learners, each fed by its own simulators (star, async or central wiring), averaging
gradients every update. The contract, on runs in the MPI pool: what crossed each communicator,
every simulator contributing and logged, the learners' parameters identical. (The learners'
averaged update against one process on the concatenated batch: tests/test_data_parallel.py, mode
groups; its refusals: tests/test_refusals.py.)"""

from __future__ import annotations

import pytest

from tests.row_ledger import assert_every_row_once
from tests.shared_runs import STAMPED_CUE, declare

# on the stamped cue task: the runs keep a ledger of every row (tests/row_ledger.py)
FAST = [STAMPED_CUE, "env.reward_threshold=null", "topology=groups", "run.max_env_steps=2048",
        "run.stop_on_solve=false", "algo.learning_starts=256", "algo.hidden=[32,32]",
        "run.eval_every=1000000", "run.progress_every_s=0", "topology.check_every=64", "seed=2"]


# 2 x (1 + 1), 2 x (1 + 2) ranks
CASES = [(wiring, ranks) for ranks in (4, 6) for wiring in ("star", "async", "central")]
for _wiring, _ranks in CASES:
    declare(f"groups-{_wiring}-n{_ranks}", _ranks, [*FAST, f"topology.group_wiring={_wiring}"])


@pytest.mark.parametrize(("wiring", "ranks"), CASES)
def test_every_row_reaches_its_groups_learner_exactly_once(runs, wiring, ranks):
    """Each row a group's simulator made was stored once, by a learner, under the rank that made
    it, with its own next observation (tests/row_ledger.py). Catches a group learner storing a
    part twice or not at all, or crediting its simulators' rows to itself."""
    result = runs.get(f"groups-{wiring}-n{ranks}")
    size = ranks // 2
    simulators = [r for r in range(ranks) if r % size]
    summary = result.summary()
    stats = summary["topology_stats"]
    dropped = {"async": ("discarded_chunks", "discarded_rows", "steps_after_stop"),
               "central": ("steps_after_stop",), "star": ()}[wiring]
    for key in dropped:  # what every group's learner received and did not store is the job's
        assert stats[key] == sum(row[key] for row in stats["per_learner"]), key
    assert_every_row_once(result.run_dir, summary, simulators, gaps_allowed=wiring == "async")


@pytest.mark.parametrize(("wiring", "ranks"), CASES)
def test_groups_contract(runs, wiring, ranks):
    result = runs.get(f"groups-{wiring}-n{ranks}")
    summary = result.summary()
    stats = summary["topology_stats"]
    size = ranks // 2
    assert summary["topology_label"] == f"groups[2x{wiring}]"
    assert stats["learners"] == 2 and stats["group_size"] == size and stats["backend"] == "mpi"
    rows = stats["param_checksums_per_rank"]
    assert len(rows) == 2 and rows[0] == rows[1]  # identical learners
    learners = {r["rank"]: r for r in summary["per_rank"] if r["role"] == "learner"}
    simulators = [r for r in summary["per_rank"] if r["role"] == "simulator"]
    assert sorted(learners) == [0, size] and len(simulators) == ranks - 2
    assert all(s["env_steps"] > 0 for s in simulators)  # every simulator contributed
    per_learner = {p["rank"]: p for p in stats["per_learner"]}
    assert sum(p["group_env_steps"] for p in per_learner.values()) == summary["env_steps"] >= 2048
    assert summary["updates"] > 0 and all(p["updates"] == summary["updates"] for p in per_learner.values())
    param_bytes = summary["policy_param_bytes"]  # DQN: one network, one all-reduce per update
    for rank, learner in learners.items():
        group = learner["group"]
        group_sims = [s for s in simulators if s["group"] == group]
        assert len(group_sims) == size - 1
        # the group's communicator: the experience (central: the step messages) its simulators
        # sent is what its learner got
        carrier = "observations" if wiring == "central" else "experience"
        sent = sum(s["group_comm"]["sent"][carrier][1] for s in group_sims)
        received = learner["group_comm"]["received"][carrier]
        assert received[1] == sent > 0
        if wiring == "star":  # Gatherv moves the rows alone
            assert received[1] == per_learner[rank]["group_env_steps"] * summary["experience_row_bytes"]
        # the learners' communicator: the gradients of every update, nothing else of size
        grads = learner["learners_comm"]["sent"]["gradients"]
        assert grads == [summary["updates"], summary["updates"] * param_bytes]
        assert carrier not in learner["learners_comm"]["sent"]
        if wiring == "central":  # no rows and no weights cross the group's communicator
            assert not {"experience", "weights"} & set(learner["group_comm"]["sent"])
        assert "gradients" not in learner["group_comm"]["sent"]
    # Every simulator's episodes were logged: group 0's under their own ranks, the other
    # groups' on rank 0 under their learner's rank.
    episode_ranks = {int(r["rank"]) for r in result.rows("episode")}
    assert episode_ranks == {s["rank"] for s in simulators if s["group"] == 0} | {size}


def test_groups_settings_inherit_the_wirings_fields():
    """groups' settings class is composed by inheritance of its own fields, the data-parallel
    learners' and the fields each wiring reads inside a group (``GroupWiring.fields``: the same
    options, declared once): async's chunk options but not its ``utd_mode``, none of star's round
    sizing; ``group_wiring`` chooses among the wirings; a wiring reads its fields of groups'
    typed settings, an instance of them."""
    from drlmpi.config.settings import options_of
    from drlmpi.topologies.asynchronous import Asynchronous
    from drlmpi.topologies.central import Central
    from drlmpi.topologies.core.data_parallel.batch_rule import BatchRuleFields
    from drlmpi.topologies.core.data_parallel.learners import AveragingFields
    from drlmpi.topologies.groups import WIRINGS, Groups

    groups, options = Groups.settings_class, options_of(Groups.settings_class)
    assert list(WIRINGS) == ["star", "async", "central"]
    assert options["group_wiring"].choices == ("star", "async", "central")
    assert options["group_wiring"].default == "star"
    assert issubclass(groups, AveragingFields) and issubclass(groups, BatchRuleFields)
    for wiring in WIRINGS.values():
        assert issubclass(groups, wiring.fields)
        assert all(options[key] is option for key, option in options_of(wiring.fields).items()
                   if key != "sync_every")  # (groups says what sync_every means in a group)
    async_options = options_of(Asynchronous.settings_class)
    assert [key for key in options if key in async_options and key not in ("_target_", "name", "sync_every",
            "sync_unit")] == ["publish_every", "max_policy_lag", "max_pending_updates", "slots"]
    assert options["reduce"] is options_of(AveragingFields)["reduce"] and "utd_mode" not in options
    assert not {"round_rows", "ramp_from"} & set(options)
    # central's env_groups and updates_per_serve, declared once for both; not its overlap (the
    # updates exchange gradients as they run) nor its max_pending_updates (async's key in a group)
    central = options_of(Central.settings_class)
    assert all(options[key] is central[key] for key in ("env_groups", "updates_per_serve"))
    assert "overlap" not in options and options["max_pending_updates"] is not central["max_pending_updates"]
    assert (options["sync_every"].default, async_options["sync_every"].default) == (64, 64)
    settings = Groups.settings_of({"group_wiring": "async", "slots": 3})
    assert isinstance(settings, WIRINGS["async"].fields) and settings.slots == 3


def test_utd_mode_is_refused_in_an_async_group_and_ignored_in_a_star_one():
    """``++topology.utd_mode=free`` (async's option) in a group: the async wiring refuses it in
    one line (its learners train what the meetings agree); the star wiring has no such mode and,
    as for any other topology's key, says it ignores it."""
    from hydra import compose, initialize_config_dir

    from drlmpi.config.errors import ConfigError
    from drlmpi.run.preflight import make_plan
    from tests.conftest import CONF

    def plan(wiring: str):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                "topology=groups", f"topology.group_wiring={wiring}", "++topology.utd_mode=free"])
        return make_plan(cfg, world_size=4)

    with pytest.raises(ConfigError, match=r"^topology=groups trains what the learners agree on each meeting: "
                                          r"topology.utd_mode=free is not available there$"):
        plan("async")
    assert "topology.utd_mode is not an option of topology=groups: ignored" in plan("star").warnings
