"""Documented figures, recomputed from their raw outputs (a check of this repository's documents,
not part of the package).

A figure in a Markdown file names where it comes from with a marker right after it, invisible
once rendered::

    **205.4** <!-- figure train_return h100host_ppo_breakout_16/central_seed0 480 -->

:func:`check_file` finds every marker, takes the number written just before it on the same line
(``**``, ``,``, ``x``, ``%``, ``s``, ``ms``, ``M`` and ``k`` are read through; a ``%`` means the
value is a share, ``ms`` that the artifact's seconds are written in milliseconds; a minus right
after a digit, a letter or a marker is a range's dash: ``3.5 <!-- ... -->-31x <!-- ... -->``),
recomputes the value from the artifact under ``docs/results/`` and says where the two differ by
more than the printed rounding (half a unit of the last digit written). Kinds:

``field RUN KEY[.KEY...]``
    a field of ``RUN/summary.json`` (``env_steps_per_s``; ``topology_stats.inference_s``; a
    number names an item of a list: ``runs.0.ratio``); a ``RUN`` ending in ``.json`` is that
    JSON file itself (a summary, a benchmark's output).
``ratio RUN_A KEY_A RUN_B KEY_B``
    ``RUN_A``'s field over ``RUN_B``'s (a speedup, a share of the ceiling).
``bench FILE ALGO BATCH DEVICE MODE``
    a row's updates/s in a learner benchmark's JSON (``python -m drlmpi.bench.learner --json
    FILE``).
``bench_ratio FILE ALGO BATCH DEVICE_A MODE_A DEVICE_B MODE_B``
    row A's updates/s over row B's (fused over graph; a device mode over a CPU core).
``train_return RUN SECONDS [steps]``
    the mean of the last 100 training episodes ended by ``SECONDS`` of training, or with
    ``steps`` by that many job-wide env steps (``RUN/metrics.csv``;
    :func:`drlmpi.report.train_returns.return_at`).
``first_reaching RUN LEVEL [steps]``
    the training second (or job-wide env step, with ``steps``) at which that mean first
    reached ``LEVEL`` (:func:`drlmpi.report.train_returns.first_reaching_row`).
``cell FILE COLUMN[#N] KEY=VALUE...``
    a numeric cell of a table in ``FILE``: a CSV file (its header names the columns) or a
    Markdown report (each pipe table, its first row the header): the cell in column ``COLUMN``
    of the one row whose cells in the columns ``KEY`` read ``VALUE``, in a table that has
    every column named by a bare ``KEY`` (``**`` and runs of spaces do not count; an argument
    holding spaces is quoted: ``"env steps/s"``, ``"topology=allgather (captured
    segments)"``). The cell's first number, or its ``N``-th with ``#N`` (of ``26k
    [22k-38k]``, ``#3`` is 38,000); ``k``/``M`` after a number scale it, ``%`` makes it a
    share. Where several rows match (one row in two tables of a report), their cells must
    agree.
``text FILE WORDS [N]``
    the number right after ``WORDS`` (quoted) on the first line of a text output that holds
    them, or the ``N``-th number after them (runs of spaces count as one; units as for
    ``cell``): ``text bench.txt "run star on 4 rank(s)" 2``.
``over KIND_A ARGS_A... / KIND_B ARGS_B...``
    figure A over figure B, each one of the kinds here (a speedup or a share between two
    reports' cells: ``over cell a.md "env steps/s" topology=star / cell b.md "env steps/s"
    topology=star``).
``median|mean|min|max|sum KIND ARGS...``
    that statistic of one of the kinds above over several runs, named by one brace group in
    its arguments: ``median train_return study/central_seed{0,1,2} 480`` is the median of
    the three seeds' scores at 480 s (``min`` and ``max``: the ends of a range; ``sum``: a
    total over ranks; a ``ratio``'s
    two runs take the same item of the group; ``{0..15}`` is 0 to 15: ``mean ratio RUN
    per_rank.{0..15}.learn_s RUN per_rank.{0..15}.updates`` is the mean over 16 ranks of the
    seconds an update took, written in ``ms`` or ``s``).

``python -m tests.doccheck.claims docs/results.md docs/results/*/README.md`` checks files by hand
(and that every study folder names its provenance: :mod:`tests.doccheck.provenance`); the test
suite checks docs/results.md and every study folder's README (tests/test_documented_figures.py).
"""

from __future__ import annotations

import csv
import json
import re
import shlex
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from drlmpi.report.runs import read_returns
from drlmpi.report.train_returns import first_reaching_row, return_at
from tests.doccheck import documents
from tests.doccheck.provenance import provenance_problems

MARKER = re.compile(r"<!--\s*figure\s+(?P<spec>[^>]*?)\s*-->")
#: the number a marker stands after: digits with thousands commas and a decimal part (a minus
#: right after a word, a bracket or a marker is a range's dash: 20k-28k), then a
#: unit the documents write (x: a ratio, %: a share, s: seconds, ms: milliseconds of an artifact's
#: seconds, M/k: millions/thousands)
NUMBER = re.compile(r"(?P<num>(?:(?<![\w>)\]])-)?\d[\d,]*(?:\.\d+)?)\s*(?P<unit>%|x|ms|s|M|k)?[*\s]*$")
SCALE = {"%": 100.0, "ms": 1e3, "M": 1e-6, "k": 1e-3}


@dataclass
class Figure:
    """One marked figure: where it is, what is written and what the artifact gives."""

    path: Path
    line: int
    written: str
    spec: str
    value: float | None = None
    problem: str | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}"
        if self.problem:
            return f"{where}: {self.written!r} <- {self.spec}: {self.problem}"
        return f"{where}: {self.written!r} <- {self.spec} = {self.value:.6g}"


@cache
def _summary(run: Path) -> dict[str, Any]:
    """``RUN/summary.json``, or ``RUN`` itself where it names a ``.json`` file."""
    return json.loads((run if run.suffix == ".json" else run / "summary.json").read_text())


@cache
def _episodes(run: Path) -> np.ndarray:
    if not (run / "metrics.csv").is_file():
        raise FileNotFoundError(f"{run / 'metrics.csv'} does not exist")
    return read_returns(run / "metrics.csv")["episode"]


def _field(run: Path, key: str) -> float:
    value: Any = _summary(run)
    for part in key.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]  # an item of a list: runs.0.ratio
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise KeyError(f"{run if run.suffix == '.json' else run / 'summary.json'} has no {key}")
    return float(value)


def _bench(path: Path, algo: str, batch: str, device: str, mode: str) -> float:
    rows = json.loads(path.read_text())["rows"]
    for row in rows:
        if (row["algo"], str(row["batch"]), row["device"], row["mode"]) == (algo, batch, device, mode):
            if row["updates_per_s"] is None:
                raise ValueError(f"{path}: the {algo} {batch} {device} {mode} row failed: {row['note']}")
            return float(row["updates_per_s"])
    raise KeyError(f"{path} has no row {algo} {batch} {device} {mode}")


#: a number in a table cell or a line of text, with the unit that scales it
CELL_NUMBER = re.compile(r"(?<![\w.])(-?\d[\d,]*(?:\.\d+)?)(?:(k|M)(?![A-Za-z])|\s*(%))?")
CELL_SCALE = {"k": 1e3, "M": 1e6, "%": 1e-2}


def _numbers(text: str) -> list[float]:
    """The numbers of ``text`` in reading order, ``k``/``M`` and ``%`` applied."""
    return [float(m.group(1).replace(",", "")) * CELL_SCALE.get(m.group(2) or m.group(3) or "", 1.0)
            for m in CELL_NUMBER.finditer(text)]


def _plain(text: str) -> str:
    return " ".join(text.replace("**", " ").split())


def row_cells(line: str) -> list[str]:
    """The cells of a Markdown table row, each :func:`_plain`."""
    return [_plain(c) for c in line.strip().strip("|").split("|")]


@cache
def _tables(path: Path) -> list[list[dict[str, str]]]:
    """The tables of a CSV file (one) or of a Markdown file (every pipe table), each a list of
    rows keyed by the header's cells."""
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return [[{_plain(k): _plain(v or "") for k, v in row.items() if isinstance(k, str)}
                     for row in csv.DictReader(f)]]
    tables, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and i + 1 < len(lines) and re.fullmatch(
                r"\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*", lines[i + 1]):
            header, rows, i = row_cells(lines[i]), [], i + 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(dict(zip(header, row_cells(lines[i]))))
                i += 1
            tables.append(rows)
        else:
            i += 1
    return tables


def _cell(path: Path, column: str, keys: list[str]) -> float:
    column, _, item = column.rpartition("#") if re.search(r"#\d+$", column) else (column, "", "1")
    wanted, having = {}, {_plain(column)}
    for key in keys:
        name, sep, value = key.partition("=")
        if sep:
            wanted[_plain(name)] = _plain(value)
        else:
            having.add(_plain(name))  # a column the row's table has
    column = _plain(column)
    found = [row[column] for table in _tables(path) for row in table
             if having <= row.keys() and all(row.get(k) == v for k, v in wanted.items())]
    if not found:
        raise KeyError(f"{path} has no row {' '.join(keys)} with a column {column!r}")
    if len(set(found)) > 1:
        raise ValueError(f"{path}: the rows {' '.join(keys)} disagree in {column!r}: {found}")
    numbers = _numbers(found[0])
    if len(numbers) < int(item):
        raise ValueError(f"{path}: the cell {found[0]!r} has no number {item}")
    return numbers[int(item) - 1]


def _text(path: Path, words: str, item: str = "1") -> float:
    words = " ".join(words.split())
    for line in path.read_text().splitlines():
        line = " ".join(line.split())
        if words in line:
            numbers = _numbers(line[line.index(words) + len(words):])
            if len(numbers) < int(item):
                raise ValueError(f"{path}: no number {item} after {words!r}")
            return numbers[int(item) - 1]
    raise KeyError(f"{path} has no line holding {words!r}")


BRACES = re.compile(r"\{([^{}]*)\}")
AGGREGATES = {"median": np.median, "mean": np.mean, "min": np.min, "max": np.max, "sum": np.sum}


def _expand(args: list[str]) -> list[list[str]]:
    """One argument list per item of the brace group ``{a,b,c}`` the arguments hold (the
    same item in every argument that holds the group)."""
    groups = {match.group(1) for a in args for match in BRACES.finditer(a)}
    if len(groups) != 1:
        raise ValueError("an aggregate figure needs one brace group naming its runs: run{0,1,2}")
    group = groups.pop()
    span = re.fullmatch(r"(\d+)\.\.(\d+)", group)
    items = ([str(i) for i in range(int(span.group(1)), int(span.group(2)) + 1)] if span
             else group.split(","))
    return [[a.replace("{" + group + "}", item) for a in args] for item in items]


def compute(spec: str, results: Path) -> float:
    """The value a marker's ``spec`` names, from the artifacts under ``results``."""
    return _compute(shlex.split(spec), results)


def _compute(words: list[str], results: Path) -> float:
    spec = " ".join(words)
    kind, *args = words
    if kind in AGGREGATES and args:
        values = [_compute(one, results) for one in _expand(args)]
        return float(AGGREGATES[kind](values))
    if kind == "over" and args.count("/") == 1 and args[0] != "/" and args[-1] != "/":
        cut = args.index("/")
        below = _compute(args[cut + 1:], results)
        if below == 0:
            raise ValueError(f"{' '.join(args[cut + 1:])} is 0")
        return _compute(args[:cut], results) / below
    runs = [results / a for a in args]
    if kind == "field" and len(args) == 2:
        return _field(runs[0], args[1])
    if kind == "ratio" and len(args) == 4:
        return _field(runs[0], args[1]) / _field(runs[2], args[3])
    if kind == "bench" and len(args) == 5:
        return _bench(runs[0], *args[1:])
    if kind == "bench_ratio" and len(args) == 7:
        return (_bench(runs[0], *args[1:3], *args[3:5])
                / _bench(runs[0], *args[1:3], *args[5:7]))
    if kind == "cell" and len(args) >= 2:
        return _cell(runs[0], args[1], args[2:])
    if kind == "text" and len(args) in (2, 3):
        return _text(runs[0], *args[1:])
    # train_return and first_reaching read training seconds, or env steps with "steps"
    column = 1 if args[2:] == ["steps"] else 0
    if kind == "train_return" and len(args) in (2, 3) and args[2:] in ([], ["steps"]):
        value = return_at(_episodes(runs[0]), float(args[1]), column=column)
        if value is None:
            raise ValueError(f"no training episode ended by {args[1]} {'env steps' if column else 's'}")
        return value
    if kind == "first_reaching" and len(args) in (2, 3) and args[2:] in ([], ["steps"]):
        row = first_reaching_row(_episodes(runs[0]), float(args[1]))
        if row is None:
            raise ValueError(f"the mean of the last 100 games never reached {args[1]}")
        return float(_episodes(runs[0])[row, column])
    raise ValueError(f"unknown figure kind or arguments: {spec!r} (see tests/doccheck/claims.py)")


def _written_value(text: str) -> tuple[float, float, float]:
    """The number at the end of ``text``: (value in the document's unit, its rounding
    tolerance, the scale from the artifact's unit to the document's)."""
    match = NUMBER.search(text.replace("**", " ").rstrip())
    if match is None:
        raise ValueError("no number before the marker")
    digits = match.group("num").replace(",", "")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits), 0.5 * 10.0 ** -decimals, SCALE.get(match.group("unit") or "", 1.0)


def check_figure(figure: Figure, text: str, results: Path) -> Figure:
    """``figure`` with its value recomputed from the artifacts under ``results``, or its problem:
    ``text`` ends with the number as written (its unit read as :data:`NUMBER` reads it)."""
    try:
        shown, tolerance, scale = _written_value(text)
        figure.value = compute(figure.spec, results) * scale
    except (OSError, KeyError, ValueError) as exc:
        figure.problem = str(exc)
        return figure
    if abs(figure.value - shown) > tolerance * (1 + 1e-9):
        figure.problem = f"the artifact gives {figure.value:.6g}, not {shown:g}"
    return figure


def check_file(path: Path, results: Path) -> list[Figure]:
    """Every marked figure of ``path``, each with its recomputed value or its problem."""
    figures = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        start = 0
        for marker in MARKER.finditer(line):
            before = line[start:marker.start()]
            start = marker.end()
            written = before.strip().split("|")[-1].strip()
            figure = Figure(Path(path), number, written, marker.group("spec"))
            figures.append(check_figure(figure, line[:marker.start()], results))
    return figures


def results_of(path: Path) -> Path:
    """The ``docs/results/`` folder whose artifacts a document's markers name: the one the
    document lies in (a study folder's README) or the one of the repository above it."""
    for folder in Path(path).resolve().parents:
        if folder.name == "results" and folder.parent.name == "docs":
            return folder
        if (folder / "docs" / "results").is_dir():
            return folder / "docs" / "results"
    raise FileNotFoundError(f"{path}: no docs/results/ folder above it")


def main(argv: list[str] | None = None) -> int:
    files = documents("claims", list(sys.argv[1:] if argv is None else argv),
                      "FILE.md [...]  (artifacts under docs/results/)")
    if files is None:
        return 2
    bad, folders = 0, set()
    for path in files:
        try:
            results = results_of(path)
        except FileNotFoundError as exc:
            print(f"claims: error: {exc}", file=sys.stderr)
            return 2
        folders.add(results)
        for figure in check_file(path, results):
            bad += figure.problem is not None
            print(("FAIL " if figure.problem else "ok   ") + str(figure))
    for results in sorted(folders):
        for problem in provenance_problems(results):
            bad += 1
            print(f"FAIL provenance: {problem}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
