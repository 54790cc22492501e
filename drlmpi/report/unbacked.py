"""Table figures with no source: the rows of a Markdown document's tables that state a number but
carry no figure marker (:mod:`drlmpi.report.claims`), outside the parts that say why not.

A part declares itself with a line ``<!-- unrecorded: WHY -->`` (its raw output was not kept),
``<!-- not figures: WHY -->`` (settings rather than measurements: machines, versions, a paper's
own numbers) or ``<!-- by hand: HOW -->`` (a committed output no marker kind can recompute, such
as a growth over samples); each covers the text up to the next heading. Their numbers stay in
the document (the unrecorded ones as history) and :func:`unbacked_rows` does not report them;
every other table row that writes a number after its first cell (the row's label) must carry at
least one ``<!-- figure ... -->`` marker. Header rows, separators and fenced code are not
figures. Prose is not scanned: a sentence's numbers are marked by hand.

``python -m drlmpi.report.unbacked FILE.md ...`` prints each such row and exits 1 if any.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from drlmpi.report.claims import row_cells

UNRECORDED = re.compile(r"<!--\s*(unrecorded|not figures|by hand):\s*[^\s-][^>]*-->")
SEPARATOR = re.compile(r"\|(\s*:?-{3,}:?\s*\|)+")
CODE = re.compile(r"`[^`]*`")


def _states_a_number(row: str) -> bool:
    return any(ch.isdigit() for ch in CODE.sub("", "|".join(row_cells(row)[1:])))


def unbacked_rows(text: str) -> list[tuple[int, str]]:
    """(line number, row) of every table row that writes a number with no marker on it, outside
    fenced code and outside the parts that declare themselves unrecorded."""
    lines = text.splitlines()
    rows = []
    fenced = unrecorded = False
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        elif fenced:
            continue
        elif stripped.startswith("#"):
            unrecorded = False
        elif UNRECORDED.search(stripped):
            unrecorded = True
        elif stripped.startswith("|") and not unrecorded and "<!-- figure" not in stripped:
            following = lines[number].strip() if number < len(lines) else ""
            if SEPARATOR.fullmatch(stripped) or SEPARATOR.fullmatch(following):
                continue  # a separator, or the header above one
            if _states_a_number(stripped):
                rows.append((number, line))
    return rows


def main(argv: list[str] | None = None) -> int:
    files = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not files:
        print("usage: python -m drlmpi.report.unbacked FILE.md [...]")
        return 2
    found = 0
    for path in files:
        for number, row in unbacked_rows(path.read_text()):
            found += 1
            print(f"{path}:{number}: {row.strip()[:160]}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
