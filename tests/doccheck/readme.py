"""The README's results table against its artifacts, with no markers in the README.

``tests/doccheck/readme_figures.txt`` names each figure of the table, one per line::

    STUDY | WRITTEN | SPEC

``STUDY`` is the folder under ``docs/results/`` that the table row links to (the row's first
cell holds a reference link to ``docs/results/STUDY/...``), ``WRITTEN`` the number as the row
writes it (``13.8x``, ``8.5``, ``11,382``), and ``SPEC`` either a figure kind of
:mod:`tests.doccheck.claims` that recomputes it from the artifacts, or ``setting: WHY`` for a
number that is no measurement (a threshold, a rank count). :func:`check_readme` says where a
row is missing, where a figure is not in its row's first cell or does not recompute within its
printed rounding, and where a row's first cell writes a number that no line of the file names.

``python -m tests.doccheck.readme [README.md [SPEC.txt]]`` prints each problem and exits 1 if any.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.doccheck import documents
from tests.doccheck.claims import Figure, check_figure, results_of, row_cells

SPEC = Path(__file__).with_name("readme_figures.txt")
#: a number as a document writes it: not part of a word (H200, TD3, v5) nor of a longer number
NUMBER = re.compile(r"(?<![\w.,])\d[\d,]*(?:\.\d+)?(?![\d])")
#: a reference link's definition: ``[name]: docs/results/STUDY/...``
REFERENCE = re.compile(r"^\[([^\]]+)\]:\s*docs/results/([^/\s]+)", re.M)
#: a reference link in a cell: ``[text][name]``
LINK = re.compile(r"\[[^\]]*\]\[([^\]]+)\]")


@dataclass
class Line:
    """One line of the spec: where it is, the study, the figure as written, how it is known."""

    number: int
    study: str
    written: str
    spec: str

    @property
    def setting(self) -> bool:
        return self.spec.startswith("setting:")


def read_spec(path: Path) -> list[Line]:
    lines = []
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in text.split("|", 2)]
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{path}:{number}: not 'STUDY | WRITTEN | SPEC': {text!r}")
        lines.append(Line(number, *parts))
    return lines


def table_rows(readme: str) -> dict[str, tuple[int, str]]:
    """The study each results-table row links to -> (line number, the row's first cell): every
    table row whose first cell holds a reference link to a folder of docs/results/."""
    studies = dict(REFERENCE.findall(readme))
    rows = {}
    for number, line in enumerate(readme.splitlines(), start=1):
        if not line.lstrip().startswith("|"):
            continue
        first = row_cells(line)[0]
        for name in LINK.findall(first):
            if name in studies:
                rows[studies[name]] = (number, first)
    return rows


def _value(written: str) -> str:
    match = NUMBER.search(written)
    return match.group() if match else written


def check_readme(readme: Path, spec: Path = SPEC, results: Path | None = None) -> list[str]:
    """Every problem of ``readme``'s results table against ``spec`` (none: all figures hold)."""
    results = results or results_of(readme)
    rows = table_rows(readme.read_text())
    lines = read_spec(spec)
    problems = [f"{spec}: no line names the row of {study} (README line {number})"
                for study, (number, _) in rows.items() if study not in {s.study for s in lines}]
    for line in lines:
        where = f"{spec}:{line.number}"
        if line.study not in rows:
            problems.append(f"{where}: the README has no results row linking to docs/results/{line.study}/")
            continue
        number, cell = rows[line.study]
        found = [m for m in NUMBER.finditer(cell) if m.group() == _value(line.written)
                 and cell[m.start():].startswith(line.written)]
        if not found:
            problems.append(f"{where}: README line {number} does not write {line.written!r}")
        elif not line.setting:
            figure = check_figure(Figure(readme, number, line.written, line.spec), line.written, results)
            if figure.problem:
                problems.append(f"{where}: {figure}")
    for study, (number, cell) in rows.items():
        named = {_value(s.written) for s in lines if s.study == study}
        problems += [f"README line {number}: {m.group()} is neither a figure nor a setting of {spec.name}"
                     for m in NUMBER.finditer(cell) if m.group() not in named]
    return problems


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv) or ["README.md"]
    files = documents("readme", args, "[README.md [SPEC.txt]]")
    if files is None:
        return 2
    try:
        problems = check_readme(files[0], *files[1:2])
    except (FileNotFoundError, ValueError) as exc:  # no docs/results/ above it; a spec line unread
        print(f"readme: error: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
