"""Every row a simulator makes reaches a learner exactly once: a ledger of the rows of a run on
``tests.tiny_env:StampedCue-v0``, whose observations name themselves (environment, observation
number; see tests/tiny_env.py).

While a pool job runs (tests/pool_worker.py ``experiment``, for runs on the stamped task), each
rank records what its environments stepped (``tiny_env.STEPS``) and, through a wrapper around
:meth:`drlmpi.roles.learner.Learner.store` - where every topology's experience reaches an
algorithm - every row its learner stored: the rank it came from and the stamps of its observation
and next observation. At the end each rank writes ``RUN/ledger/rank<r>.npz``; :func:`read` joins
them and :func:`audit` says what a test asserts on.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests import tiny_env
from tests.shared_runs import STAMPED_CUE

#: ranks per environment id (tiny_env.StampedCue: env id = rank * 16 + number in the process)
IDS_PER_RANK = 16


@contextlib.contextmanager
def recording(run_dir: Path, rank: int):
    """Record this rank's stepped transitions and stored rows while the block runs; write them to
    ``run_dir/ledger/rank<rank>.npz`` when it ends (also when it raises)."""
    from drlmpi.roles.learner import Learner

    tiny_env.STEPS.clear()
    tiny_env.MADE[0] = 0
    stored: list[np.ndarray] = []
    original = Learner.store

    def store(self, rows: np.ndarray, sources: list[int] | None = None) -> int:
        due = original(self, rows, sources)  # raises before storing anything it refuses
        if rows.shape[0]:
            layout = self.algo.layout
            env_ids, numbers = tiny_env.read_stamps(layout.column(rows, "obs"))
            next_ids, next_numbers = tiny_env.read_stamps(layout.column(rows, "next_obs"))
            source = np.full(rows.shape[0], self.rank) if sources is None else np.asarray(sources)
            stream = layout.column(rows, "stream")[:, 0].astype(np.int64)
            stored.append(np.stack([source, env_ids, numbers, next_ids, next_numbers, stream], axis=1))
        return due

    Learner.store = store
    try:
        yield
    finally:
        Learner.store = original
        folder = run_dir / "ledger"
        folder.mkdir(parents=True, exist_ok=True)
        made = np.asarray(tiny_env.STEPS, dtype=np.int64).reshape(-1, 2)
        rows = np.concatenate(stored) if stored else np.zeros((0, 6), dtype=np.int64)
        np.savez(folder / f"rank{rank}.npz", made=made, stored=rows)


@dataclass
class Ledger:
    """A run's ledger: ``made`` (env id, observation number) of every transition stepped, in each
    environment's order; ``stored`` one row per stored row: source rank, env id, number, next
    observation's env id and number, stream."""

    made: np.ndarray
    stored: np.ndarray


def read(run_dir: Path) -> Ledger:
    files = sorted((run_dir / "ledger").glob("rank*.npz"))
    if not files:
        raise FileNotFoundError(f"no ledger in {run_dir}: was it a run on {STAMPED_CUE}?")
    parts = [np.load(f) for f in files]
    return Ledger(np.concatenate([p["made"] for p in parts]), np.concatenate([p["stored"] for p in parts]))


@dataclass
class Audit:
    """What a ledger shows (each field a list of offending items, empty when all is well)."""

    stored_twice: list[tuple[int, int]]
    never_made: list[tuple[int, int]]
    wrong_source: list[tuple[int, int, int]]  # (source the learner was told, env id, number)
    wrong_next: list[tuple[int, int, int, int]]  # (env id, number, next env id, next number)
    streams_not_one_to_one: list[tuple[int, int]]  # (stream, env id) pairs of a shared id
    not_a_suffix: list[int]  # env ids whose unstored steps are not the last ones they made
    missing: int  # transitions of learning environments made but never stored
    stored: int
    learning_envs: set[int]


def audit(ledger: Ledger, gaps_allowed: bool = False) -> Audit:
    """Compare what was stored with what was made. Environments none of whose transitions were
    stored (the evaluator's) are left out. ``gaps_allowed``: steps may be missing in the middle
    of an environment's sequence (async discards whole stale chunks), not only at its end."""
    stored = ledger.stored
    keys = [(int(e), int(n)) for e, n in stored[:, 1:3]]
    counts = Counter(keys)
    learning = {e for e, _ in keys}
    made_keys = [(int(e), int(n)) for e, n in ledger.made if int(e) in learning]
    made_set = set(made_keys)
    pairs = {(int(s), int(e)) for s, e in stored[:, [5, 1]]}
    stream_of, env_of = Counter(s for s, _ in pairs), Counter(e for _, e in pairs)
    not_suffix = []
    if not gaps_allowed:
        for env in sorted(learning):
            stored_numbers = {n for e, n in keys if e == env}
            kept = [n in stored_numbers for e, n in made_keys if e == env]
            # stored steps first, then only unstored ones: no stored step after an unstored one
            if any(not a and b for a, b in zip(kept, kept[1:])):
                not_suffix.append(env)
    return Audit(
        stored_twice=sorted(k for k, c in counts.items() if c > 1),
        never_made=sorted(k for k in counts if k not in made_set),
        wrong_source=sorted({(int(s), int(e), int(n)) for s, e, n in stored[:, :3]
                             if s != e // IDS_PER_RANK}),
        wrong_next=sorted({(int(e), int(n), int(e2), int(n2)) for _, e, n, e2, n2, _ in stored
                           if e2 != e or n2 != n + 1}),
        streams_not_one_to_one=sorted(p for p in pairs if stream_of[p[0]] > 1 or env_of[p[1]] > 1),
        not_a_suffix=not_suffix,
        missing=len(made_set - set(counts)),
        stored=len(keys),
        learning_envs=learning,
    )


def summary_counts(summary: dict[str, Any]) -> tuple[int, int]:
    """(rows the simulators made but never sent, rows a learner received and did not store) as
    the run's summary reports them: async discards stale chunks (``discarded_rows``) and drops
    what arrives after the step budget is reached (``steps_after_stop``)."""
    unsent = sum(r.get("unsent_steps", 0) for r in summary["per_rank"])
    stats = summary.get("topology_stats", {})
    return unsent, stats.get("discarded_rows", 0) + stats.get("steps_after_stop", 0)


def assert_every_row_once(run_dir: Path, summary: dict[str, Any], simulators: list[int],
                          gaps_allowed: bool = False) -> Audit:
    """The whole check: every stored row was made, stored once, under the rank that made it,
    with its own next observation; each environment id names one stream; every simulator's rows
    arrived; and what was made but not stored is exactly what the summary reports as never sent
    (at the stop) or dropped (async's stale chunks and what arrives after the stop) - the last
    steps of each environment, unless ``gaps_allowed``."""
    result = audit(read(run_dir), gaps_allowed=gaps_allowed)
    assert result.stored > 0
    assert not result.stored_twice, f"stored twice: {result.stored_twice[:5]}"
    assert not result.never_made, f"stored but never made: {result.never_made[:5]}"
    assert not result.wrong_source, f"stored under the wrong rank: {result.wrong_source[:5]}"
    assert not result.wrong_next, f"paired with another observation: {result.wrong_next[:5]}"
    assert not result.streams_not_one_to_one, f"streams: {result.streams_not_one_to_one[:5]}"
    assert not result.not_a_suffix, f"rows missing before the end of environments {result.not_a_suffix}"
    assert {e // IDS_PER_RANK for e in result.learning_envs} == set(simulators)
    unsent, discarded = summary_counts(summary)
    assert result.missing == unsent + discarded, (result.missing, unsent, discarded)
    return result
