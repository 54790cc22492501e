"""Where each artifact under ``docs/results/`` came from (a check of this repository's documents,
not part of the package): every study is a folder with a ``provenance.json`` (or several,
``provenance_<part>.json``) at its top.

A record names the ``command`` that produced the folder, the ``commit`` it ran, the ``date``, the
``machine`` and the library ``versions`` (the sweep launcher, :mod:`drlmpi.sweep.provenance`,
writes one into every sweep directory).
A record written after the run, from what the documents state, says so in ``recorded``; where it
cannot give the command or the commit, the value is ``null`` and ``recorded`` says why.
:func:`provenance_problems` lists every way the folder layout falls short of that; the test suite
holds the repository's ``docs/results/`` to it (``tests/test_documented_figures.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

#: the keys every provenance record holds (a value may be null only where ``recorded`` says why)
KEYS = ("command", "commit", "date", "machine", "versions")


def record_problems(path: Path) -> list[str]:
    """What one provenance record lacks."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return [f"{path}: not JSON ({exc})"]
    if not isinstance(record, dict):
        return [f"{path}: not a JSON object"]
    problems = [f"{path}: no {key!r}" for key in KEYS if key not in record]
    unknown = [key for key in ("command", "commit") if key in record and not record[key]]
    if unknown and not record.get("recorded"):
        problems.append(f"{path}: {' and '.join(unknown)} unknown, and no 'recorded' says why")
    problems += [f"{path}: {key!r} is empty" for key in ("date", "machine")
                 if key in record and not record[key]]
    return problems


def provenance_problems(results: Path) -> list[str]:
    """Every file directly in ``results`` (a study must be a folder), every study folder without a
    provenance record at its top, and every record's own problems."""
    problems = []
    for entry in sorted(results.iterdir()):
        if entry.name.startswith("."):
            continue
        if not entry.is_dir():
            problems.append(f"{entry}: a file outside any study folder")
            continue
        records = sorted(entry.glob("provenance*.json"))
        if not records:
            problems.append(f"{entry}: no provenance.json")
        for record in records:
            problems += record_problems(record)
    return problems
