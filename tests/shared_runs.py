"""Runs that tests share: each is declared once (a name, a world size, the overrides), run once per
session in the MPI pool, and asserted on by every test that names it.

A test gets a run with ``runs.get("name")`` (the ``runs`` fixture, conftest.py): the first test
that asks starts it and waits; the others read the same run directory.

The DQN contract runs live here: one per (topology, ranks) on the tiny cue task
(tests/tiny_env.py). tests/test_topologies.py checks each against the topology contract (what
crossed the wire, every simulator contributing, learning); tests/test_tensorboard.py reads the
event files of the sequential and star ones; the same-budget rule (one learner: sequential's
updates on the same experience) is checked on the four that share ``topology.sync_every=128``.
"""

from __future__ import annotations

#: name -> (ranks, overrides) of every declared run
CATALOGUE: dict[str, tuple[int, tuple[str, ...]]] = {}


def declare(name: str, ranks: int, overrides: list[str]) -> str:
    """Declare the shared run ``name`` (at import time); returns the name."""
    spec = (int(ranks), tuple(overrides))
    if CATALOGUE.setdefault(name, spec) != spec:
        raise ValueError(f"shared run {name!r} declared twice differently")
    return name


CUE = "env.id=tests.tiny_env:Cue-v0"
STAMPED_CUE = "env.id=tests.tiny_env:StampedCue-v0"
BUDGET_STEPS = 2048
LEARNING_STARTS = 500
#: DQN on the cue task: learns in a few hundred updates of a small network
TINY_DQN = [CUE, "env.reward_threshold=null", "algo.hidden=[32,32]", "algo.exploration_steps=1000",
            f"algo.learning_starts={LEARNING_STARTS}", f"run.max_env_steps={BUDGET_STEPS}",
            "run.eval_every=512", "run.progress_every_s=0", "run.stop_on_solve=false",
            "run.tensorboard_every_s=0.1"]
#: the same data for every one-learner topology: chunks of 128 job-wide steps
CHUNK = 128
SAME_BUDGET = [f"topology.sync_every={CHUNK}"]
#: 0.5 updates per step from the chunk that brings the replay to ``learning_starts`` (the fourth
#: chunk of 128): what sequential runs, and every one-learner topology on the same experience
SAME_BUDGET_UPDATES = (BUDGET_STEPS - 3 * CHUNK) // 2

# name -> (topology overrides, ranks, ranks that simulate, what carries experience to rank 0)
CONTRACT: dict[str, tuple[list[str], int, list[int], str | None]] = {
    "sequential-n1": (["topology=sequential", *SAME_BUDGET], 1, [0], None),
    "p2p-n2": (["topology=p2p", *SAME_BUDGET], 2, [1], "experience"),
    "star-n2": (["topology=star"], 2, [1], "experience"),
    "star-n3": (["topology=star", *SAME_BUDGET], 3, [1, 2], "experience"),
    "star-n4": (["topology=star"], 4, [1, 2, 3], "experience"),
    "parameter_server-n3": (["topology=parameter_server"], 3, [1, 2], "gradients"),
    "async-n2": (["topology=async"], 2, [1], "experience"),
    "async-n3": (["topology=async", *SAME_BUDGET], 3, [1, 2], "experience"),
    "async-n4": (["topology=async"], 4, [1, 2, 3], "experience"),
    "allgather-n2": (["topology=allgather"], 2, [0, 1], "gradients"),
    # checksums every 50 updates: tests/test_topologies.py checks the parameters stay identical
    "allgather-n3": (["topology=allgather", "topology.check_every=50"], 3, [0, 1, 2], "gradients"),
    "allgather[reduce=allgather]-n4": (["topology=allgather", "topology.reduce=allgather"], 4,
                                       [0, 1, 2, 3], "gradients"),
    # 3 environments per simulator: groups of 2 and 1 that take turns
    "central-n3": (["topology=central", "env.num_envs=3"], 3, [1, 2], "observations"),
}
#: the contract runs step the stamped cue task, whose observations name themselves, and keep a
#: ledger of every row made and stored (tests/row_ledger.py): the same learning problem as CUE's
STAMPED_DQN = [STAMPED_CUE, *TINY_DQN[1:]]
for _name, (_overrides, _ranks, _, _) in CONTRACT.items():
    declare(_name, _ranks, [*_overrides, *STAMPED_DQN])
