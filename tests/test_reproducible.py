"""Same seed, same config, same result (CPU): a second run of a shared run writes the same
metrics.csv - every row and column but the two clocks - and the same policy.pt, tensor for
tensor, under every topology whose data order does not depend on timing. (async and central
learn from whatever arrives first, so they are not bit-reproducible: docs/runs.md,
"Reproducibility".) Each repeat is one more pool run of the same overrides."""

from __future__ import annotations

import csv

import pytest
import torch

from tests.shared_runs import CATALOGUE, declare

#: the first run -> the topology it uses (contract runs, a groups run with star wiring)
FIRST = {"sequential-n1": "sequential", "p2p-n2": "p2p", "star-n3": "star",
         "parameter_server-n3": "parameter_server", "allgather-n2": "allgather", "groups-star-n4": "groups"}
CLOCKS = ("train_seconds", "wall_seconds")

import tests.test_groups  # noqa: E402,F401 (declares the groups runs)

for _name in FIRST:
    declare(f"again-{_name}", *CATALOGUE[_name])


def metric_rows(run) -> list[dict[str, str]]:
    with open(run.run_dir / "metrics.csv", newline="") as fh:
        return [{k: v for k, v in row.items() if k not in CLOCKS} for row in csv.DictReader(fh)]


def tensors(obj, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested checkpoint dict, by path."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, dict):
        return {k: v for key, value in obj.items() for k, v in tensors(value, f"{prefix}/{key}").items()}
    return {}


@pytest.mark.parametrize("name", list(FIRST))
def test_the_same_seed_gives_the_same_run(runs, name):
    first, again = runs.get(name), runs.get(f"again-{name}")
    assert first.summary()["topology"] == FIRST[name]
    rows = metric_rows(first)
    assert len(rows) > 50 and rows == metric_rows(again)
    mine = tensors(torch.load(first.run_dir / "policy.pt", weights_only=False))
    theirs = tensors(torch.load(again.run_dir / "policy.pt", weights_only=False))
    assert mine and mine.keys() == theirs.keys()
    assert all(torch.equal(mine[key], theirs[key]) for key in mine), name
    assert first.summary()["updates"] == again.summary()["updates"] > 0
