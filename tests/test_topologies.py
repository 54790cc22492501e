"""The topology contract: every topology, on several world sizes, with the same budget and
assertions.

Each run (tests/shared_runs.py, run once in the MPI pool) trains DQN on the tiny cue task. It must
write a complete summary and per-episode metrics from every simulator rank, move exactly the
experience it claims over the wire, and learn: the greedy evaluation reaches what only a learned
policy reaches, and the simulators' own training episodes improve (their weights arrive). What
only a real ``mpiexec`` job shows (the run directory of every rank, exit codes, crashes, hangs)
is in tests/test_cli.py and tests/test_rank_timeout.py; refusals in tests/test_refusals.py.
"""

from __future__ import annotations

import json
import statistics
from unittest.mock import patch

import numpy as np
import pytest

from drlmpi.mpi.wire import ChunkHeader, WeightsHeader
from tests.row_ledger import assert_every_row_once
from tests.shared_runs import (
    BUDGET_STEPS,
    CONTRACT,
    CUE,
    SAME_BUDGET,
    SAME_BUDGET_UPDATES,
    TINY_DQN,
    declare,
)

SUMMARY_KEYS = {
    "solved", "train_seconds_to_threshold", "env_steps_to_threshold", "updates_to_threshold",
    "env_steps", "updates", "train_seconds", "wall_seconds", "env_steps_per_s", "updates_per_s",
    "mpi_wait_share", "world_size", "topology", "algo", "env_id", "per_rank", "versions",
    "best_eval_return", "stop_reason", "second_half",
}
#: the cue task (episodes of 8 steps): 7 at best, about 3.5 acting at random
LEARNED_EVAL = 6.5
RANDOM_AT_MOST = 4.5
LEARNED_TRAINING = 5.5


def learned(returns: list[float]) -> tuple[float, float]:
    """Mean training return of the first and of the last quarter of the episodes."""
    n = len(returns) // 4
    return statistics.mean(returns[:n]), statistics.mean(returns[-n:])


SLOW_SIMULATOR = declare("async-slow-simulator", 3, ["topology=async", "env.sim_cost_ms_by_rank={1: 8}",
                                                     *TINY_DQN])
LAG_0 = declare("async-lag-0", 3, ["topology=async", "topology.utd_mode=free", "topology.max_policy_lag=0",
                                   "topology.publish_every=1000", *TINY_DQN])


@pytest.mark.parametrize("name", list(CONTRACT))
def test_topology_contract(runs, name):
    overrides, ranks, simulators, carrier = CONTRACT[name]
    run = runs.get(name)
    summary = run.summary()

    # The summary is complete and describes this job.
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["topology"] == overrides[0].split("=")[1]
    assert summary["world_size"] == ranks == len(summary["per_rank"])
    assert summary["stop_reason"] == "max_env_steps"
    assert summary["env_steps"] >= BUDGET_STEPS
    for key in ("torch", "mpi4py", "mpi_library"):
        assert summary["versions"][key]
    assert (run.run_dir / "policy.pt").is_file()

    # Every simulator rank contributed episodes; job-wide steps add up.
    rows = run.rows("episode")
    half = summary["second_half"]  # its ends are episodes the learner logged (the pace's notes)
    if half is not None:  # (none where the episodes came in rounds too few to span it: star here)
        for t, steps in ((half["from_train_seconds"], half["from_env_steps"]),
                         (half["train_seconds"], half["env_steps"])):
            assert any(int(r["env_steps"]) == steps and abs(float(r["train_seconds"]) - t) < 1e-3
                       for r in rows)
        assert half["from_train_seconds"] <= summary["train_seconds"] / 2 <= half["train_seconds"]
    assert {int(r["rank"]) for r in rows} == set(simulators)
    per_rank = {r["rank"]: r for r in summary["per_rank"]}
    simulated = sum(per_rank[r]["env_steps"] for r in simulators)
    if summary["topology"] == "async":  # chunks that arrived or were ready as the run stopped
        simulated -= summary["topology_stats"]["steps_after_stop"]
        simulated -= sum(per_rank[r]["unsent_steps"] for r in simulators)
    assert simulated == summary["env_steps"]

    # What crossed the wire.
    row_bytes = summary["experience_row_bytes"]
    if carrier == "experience":
        # Exactly the experience rows counted (async adds a header per chunk and per weights
        # message), and whole weight buffers to each simulator.
        is_async = summary["topology"] == "async"
        header = 8 * len(ChunkHeader) if is_async else 0
        weights_header = 8 * len(WeightsHeader) if is_async else 0
        learner = per_rank[0]
        messages, nbytes = learner["received"]["experience"]
        after_stop = summary["topology_stats"].get("steps_after_stop", 0)
        assert nbytes == (summary["env_steps"] + after_stop) * row_bytes + messages * header
        for r in simulators:
            messages, nbytes = per_rank[r]["sent"]["experience"]
            sent_steps = per_rank[r]["env_steps"] - per_rank[r].get("unsent_steps", 0)
            assert nbytes == sent_steps * row_bytes + messages * header
            weights = per_rank[r]["received"]["weights"]
            assert weights[0] >= 1
            assert weights[1] == weights[0] * (summary["policy_param_bytes"] + weights_header)
        # Every weights message the learner sent arrived at a simulator, and nothing else did.
        received = [sum(per_rank[r]["received"]["weights"][i] for r in simulators) for i in (0, 1)]
        assert received == per_rank[0]["sent"]["weights"]
    elif carrier == "gradients":
        # No experience moves; every learning rank sent gradients; nobody sent rows.
        for rank in per_rank.values():
            assert "experience" not in rank["sent"] and "experience" not in rank["received"]
        for r in simulators:
            messages, nbytes = per_rank[r]["sent"]["gradients"]
            assert messages >= per_rank[r]["updates"] > 0
    elif carrier == "observations":
        assert_central_wire(summary, per_rank, simulators)
    else:
        assert per_rank[0]["received"] == {} and per_rank[0]["sent"] == {}
    if summary["topology"] in ("p2p", "star"):  # the round clock: one entry per round
        stats = summary["topology_stats"]
        assert stats["rounds"] * len(simulators) == per_rank[0]["sent"]["weights"][0]
        assert stats["first_gather_s"] > 0 and stats["train_s_median"] > 0 and stats["gather_s_median"] >= 0

    # It learned: the greedy evaluation reaches what only a learned policy does, and the
    # simulators' own (exploring) episodes improved - their weights arrived.
    evals = run.returns("eval")
    assert len(evals) >= 3 and max(evals) >= LEARNED_EVAL, evals
    first, last = learned(run.returns("episode"))
    assert first < RANDOM_AT_MOST and last > LEARNED_TRAINING, (first, last)


def assert_central_wire(summary: dict, per_rank: dict, simulators: list[int]) -> None:
    """topology=central: no experience rows and no weights move. Each environment group of a
    simulator sends its first observations, then one message per step (a row per environment,
    plus a final-observation row per ended episode), and gets exactly one answer per message
    (actions, or the stop flag at the end): the bytes follow from the steps and episodes."""
    from drlmpi.algos.dqn import DQN
    from drlmpi.envs.make import probe_spec
    from drlmpi.topologies.central.wire import StepWire, env_groups

    layout = DQN.experience_layout(probe_spec(CUE.split("=")[1]))
    width = StepWire(layout).width
    assert [count for _, count in env_groups(3, 2)] == [2, 1]
    for rank in per_rank.values():
        assert not {"experience", "weights"} & (rank["sent"].keys() | rank["received"].keys())
    for r in simulators:
        sim = per_rank[r]
        messages, nbytes = sim["sent"]["observations"]
        assert nbytes == 4 * width * (sim["env_steps"] + 3 + sim["episodes"])
        answers, answer_bytes = sim["received"]["actions"]
        assert answers == messages
        # group A (2 environments) took k_a steps and group B (1) k_b, in turns: 1 + k messages
        # each, answered by as many messages of 1 + n * action_dim floats
        k_a = sim["env_steps"] - (messages - 2)
        k_b = messages - 2 - k_a
        assert k_a > 0 and abs(k_a - k_b) <= 1, (k_a, k_b)
        dim = layout.action_dim
        assert answer_bytes == 4 * ((1 + k_a) * (1 + 2 * dim) + (1 + k_b) * (1 + dim))
        assert sim["round_trip_ms"] > 0
    learner = per_rank[0]
    for kind, direction in (("observations", "sent"), ("actions", "received")):
        total = [sum(per_rank[r][direction][kind][i] for r in simulators) for i in (0, 1)]
        assert total == learner["received" if direction == "sent" else "sent"][kind]
    # every step was acted on by one of the learner's batched forward passes
    stats = summary["topology_stats"]
    assert stats["rows_served"] == summary["env_steps"] == sum(per_rank[r]["env_steps"] for r in simulators)
    assert 0 < stats["serves"] < stats["rows_served"] and stats["inference_s"] > 0
    # the learner's acting is its simulation time (its busy share shows it)
    assert learner["role"] == "learner+acting" and learner["simulate_s"] == stats["inference_s"]


@pytest.mark.parametrize("name", list(CONTRACT))
def test_every_row_reaches_a_learner_exactly_once(runs, name):
    """Each row a simulator made was stored by a learner exactly once, under the rank that made
    it, paired with its own next observation; what never arrived is exactly what the summary
    says was not sent at the stop (or, async, discarded as stale). The stamped task's ledger
    (tests/row_ledger.py) proves it row by row. Catches a chunk stored twice while another is
    dropped (the byte counts above stay equal), rows credited to the wrong simulator, a
    next_obs column shifted by one row, and a drop the summary does not report."""
    _, _, simulators, _ = CONTRACT[name]
    run = runs.get(name)
    assert_every_row_once(run.run_dir, run.summary(), simulators, gaps_allowed=name.startswith("async"))


@pytest.mark.parametrize("name", [n for n, case in CONTRACT.items() if SAME_BUDGET[0] in case[0]])
def test_same_data_budget_same_number_of_updates(runs, name):
    """Topologies with one learner run exactly the updates the sequential loop runs on the same
    experience: chunks of 128 job-wide steps, 0.5 updates per step from the chunk that brings the
    replay to ``learning_starts``. The pipelined ones train the last chunk's updates at the budget
    stop (``Learner.finish``)."""
    summary = runs.get(name).summary()
    assert summary["env_steps"] == BUDGET_STEPS
    assert summary["updates"] == SAME_BUDGET_UPDATES


def test_allgather_keeps_parameters_identical(runs):
    summary = runs.get("allgather-n3").summary()
    checksums = summary["topology_stats"]["param_checksums_per_rank"]
    assert len(checksums) == 3 and checksums[0] == checksums[1] == checksums[2]
    per_rank = summary["per_rank"]
    assert all(r["updates"] == per_rank[0]["updates"] > 100 for r in per_rank)
    # check_every=50: a checksum Allgather at the first round boundary after every 50 updates
    # (96 updates per round here: batch_rule=global gives each rank 0.5 x 3 updates per local
    # step, 64 local steps per round), plus one at the end.
    assert per_rank[0]["sent"]["checksums"][0] >= per_rank[0]["updates"] // 96 + 1


def test_async_learner_does_not_wait_for_a_slow_simulator(runs):
    """Rank 1 spends 8 ms of CPU per step; rank 2 is fast. The run finishes and the fast
    simulator contributes more."""
    summary = runs.get(SLOW_SIMULATOR).summary()
    per_rank = {r["rank"]: r for r in summary["per_rank"]}
    assert per_rank[2]["env_steps"] > 2 * per_rank[1]["env_steps"] > 0
    chunks = summary["topology_stats"]["chunks_received"]
    assert chunks["2"] > 2 * chunks["1"] > 0
    assert summary["policy_lag_max"] is not None and summary["policy_lag_mean"] >= 0


def test_async_discards_chunks_beyond_max_policy_lag(runs):
    summary = runs.get(LAG_0).summary()
    stats = summary["topology_stats"]
    assert stats["utd_mode"] == "free" and stats["discarded_chunks"] > 0
    assert summary["policy_lag_max"] == 0  # every chunk it learned from was fresh


class _TakingLearner:
    """The part of a Learner that ``AsyncLearner._take`` drives, recording what became of each
    chunk."""

    def __init__(self, updates: int) -> None:
        self.updates = updates
        self.taken: list[tuple[str, int | None]] = []

    def ingest(self, rows, source_rank, policy_lag=None) -> int:
        self.taken.append(("learned", policy_lag))
        return 1

    def discard(self, rows, source_rank) -> None:
        self.taken.append(("discarded", None))


class _RoundLearner:
    """The part of a Learner that ``learn_in_rounds`` drives: each ``train`` runs 5 updates, the
    fourth round stops."""

    layout = None

    def __init__(self, updates: int) -> None:
        self.updates, self.rounds, self.lags, self.sent_with = updates, 0, [], []

    def policy_weights(self):
        self.sent_with.append(self.updates)
        return np.zeros(1, dtype=np.float32)

    def ingest(self, rows, source_rank, policy_lag=None) -> int:
        self.lags.append((source_rank, policy_lag))
        return rows.shape[0]

    def maybe_evaluate(self) -> bool:
        self.rounds += 1
        return False

    def stop_reason(self):
        return "max_env_steps" if self.rounds == 4 else None

    def train(self, settle: bool = True) -> None:
        self.updates += 5

    def settle(self) -> float:
        return 0.0

    def finish(self) -> None:
        pass


class _TwoSimulatorLink:
    """Two simulators' rows every round; weights and control go nowhere."""

    def gather(self, layout):
        return [(1, np.zeros((3, 2), np.float32)), (2, np.zeros((4, 2), np.float32))]

    def send_weights(self, weights) -> None:
        pass

    def send_control(self, control) -> None:
        pass


def test_a_round_records_the_updates_run_since_its_weights_were_sent():
    """Star's and p2p's rows are acted with the weights sent a round earlier: the first round's
    with the starting weights (lag 0), each later round's with weights 5 updates old - counted
    from the send, not from the start of the run (a resumed learner starts at 100 updates)."""
    from drlmpi.topologies.core.rounds import learn_in_rounds

    learner = _RoundLearner(updates=100)
    with patch("drlmpi.topologies.core.rounds.control_message", lambda stop, learner: np.zeros(2)):
        learn_in_rounds(learner, _TwoSimulatorLink(), after_round=lambda: None)
    assert learner.lags == [(1, 0), (2, 0)] + [(1, 5), (2, 5)] * 3
    assert learner.sent_with == [100, 100, 105, 110] and learner.updates == 115


def test_async_keeps_a_chunk_exactly_at_the_lag_bound_and_discards_the_next():
    """``AsyncLearner._take`` at ``max_policy_lag=8``: a chunk acted 8 updates ago is learned
    from, one acted 9 ago is discarded and counted (rows too). Catches an off-by-one in the
    compare either way (``>=`` discards lag 8; ``> bound + 1`` keeps lag 9)."""
    from drlmpi.topologies.asynchronous.learner import AsyncLearner

    taking = AsyncLearner.__new__(AsyncLearner)  # no MPI: only the take path's own state
    taking.learner = _TakingLearner(updates=20)
    taking.max_lag, taking.next_sequence, taking.most_owed_by_a_chunk = 8, {1: 0}, 1
    taking.discarded = taking.discarded_rows = 0
    rows = np.zeros((5, 3), dtype=np.float32)
    for version in (20, 12, 11, 0, 13):  # lags 0, 8, 9, 20, 7
        taking._take(1, rows, version)
    assert taking.learner.taken == [("learned", 0), ("learned", 8), ("discarded", None),
                                    ("discarded", None), ("learned", 7)]
    assert (taking.discarded, taking.discarded_rows, taking.next_sequence[1]) == (2, 10, 5)


def test_async_replay_holds_the_rows_received_less_those_discarded(pool, tmp_path):
    """A run at ``max_policy_lag=8`` whose simulators keep their first weights (no publication
    within the budget): chunks from before the 9th update are learned from, later ones
    discarded. The replay (read from the learner's algorithm at the end) holds exactly the rows
    received less the discarded ones and those that arrived after the stop; the summary's
    counts add up. Catches a discarded chunk that is stored anyway, or a count of rows that
    misses some."""
    overrides = ["topology=async", "algo._target_=tests.recording_algo.ReplayRecordingDQN",
                 "topology.utd_mode=free", "topology.max_policy_lag=8", "topology.publish_every=100000",
                 *TINY_DQN]
    replay_rows = pool.submit(3, "tests.pool_worker:call_with_attribute", call="tests.pool_worker:experiment",
                              attribute="tests.recording_algo:REPLAY_ROWS", overrides=overrides,
                              run_dir=str(tmp_path / "run")).result()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    stats = summary["topology_stats"]
    assert stats["max_policy_lag"] == 8 and stats["discarded_rows"] > 0
    learned = stats["received_rows"] - stats["discarded_rows"] - stats["steps_after_stop"]
    assert replay_rows == [learned] and learned > 0
    assert summary["env_steps"] == stats["received_rows"] - stats["steps_after_stop"]
    assert summary["policy_lag_max"] <= 8


@pytest.mark.parametrize(("algo", "bursts"), [("RecordingDQN", False), ("QueuingDQN", True)])
def test_async_learner_bursts_only_on_a_device_that_queues_updates(pool, tmp_path, algo, bursts):
    """A CPU learner takes one owed update between polls; a learner that queues its updates on
    a device (here a DQN that says so) runs up to the next publication in one call - one GPU
    wait per burst, not per update - and never past it."""
    calls = pool.submit(2, "tests.pool_worker:call_with_attribute", call="tests.pool_worker:experiment",
                        attribute="tests.recording_algo:CALLS",
                        overrides=["topology=async", f"algo._target_=tests.recording_algo.{algo}",
                                   "topology.publish_every=32", *TINY_DQN],
                        run_dir=str(tmp_path / "run")).result()
    updates = json.loads((tmp_path / "run" / "summary.json").read_text())["updates"]
    assert sum(calls) == updates > 0
    assert max(calls) <= 32  # never past the next publication
    if bursts:
        assert statistics.mean(calls) > 4, calls
    else:
        # Learner.finish runs what the last chunks entitled at the end, in parts of at most 32
        # (UPDATES_PER_PROGRESS): full parts of 32, then the rest (1 to 32). How much is owed at
        # the end depends on timing, so the number of parts does; the loop's calls before are
        # all 1. The last call is the rest (or, with nothing owed, a loop call of 1).
        end = len(calls) - 1
        while end > 0 and calls[end - 1] == 32:
            end -= 1
        assert end > 0 and set(calls[:end]) == {1}, calls
        assert 1 <= calls[-1] <= 32, calls[end:]


def test_the_printed_summary_says_which_side_set_the_pace_of_the_rounds():
    """The round clock's line in the printed summary (p2p and star): the learner's median wait for
    rows against its median training says who set the pace; other topologies print none."""
    from drlmpi.outputs.summary import round_line

    def line(gather: float, train: float) -> str:
        (text,) = round_line({"rounds": 12, "first_gather_s": 0.5, "gather_s_median": gather,
                              "train_s_median": train})
        return text

    assert "the learner set the pace" in line(0.001, 1.2) and "rounds: 12;" in line(0.001, 1.2)
    assert "the simulators set the pace" in line(1.7, 0.1)
    assert "about even" in line(0.4, 0.5) and "first round's wait 0.50 s" in line(0.4, 0.5)
    assert round_line({}) == [] and round_line({"rounds": 3}) == []
