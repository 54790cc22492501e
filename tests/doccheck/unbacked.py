"""Table figures with no source: the rows of a Markdown document's tables that state a number but
carry no figure marker (:mod:`tests.doccheck.claims`), outside the parts that say why not.

A part declares itself with a line ``<!-- not figures: WHY -->`` (settings rather than
measurements: machines, versions, a paper's own numbers) or ``<!-- by hand: HOW -->`` (a
committed output no marker kind can recompute, such as a growth over samples); each covers the
text up to the next heading, and :func:`unbacked_rows` does not report it. A figure whose raw
output was not kept has no such declaration: it is withdrawn from the document, not kept as
history (``<!-- unrecorded: ... -->`` declares nothing). Every other table row that writes a
number after its first cell (the row's label) must carry at least one ``<!-- figure ... -->``
marker. Header rows, separators and fenced code are not figures.

Prose is scanned for measurements only (:func:`unbacked_prose`): a speedup (``5.2x``), a share
(``93%``) or a rate (``6,441 env steps/s``, ``updates/s``) with no marker right after it, outside
the declared parts. A target (``goal >= 6x``, ``at least 1.5x``) or a rounded restatement
(``about 380 updates/s``) is not a measurement; a figure that has no artifact says why right
after it, ``<!-- unmarked: WHY -->``. Other numbers in sentences (settings, counts, budgets) are
left to the writer.

``python -m tests.doccheck.unbacked [--prose] FILE.md ...`` prints each such row (and, with
``--prose``, each such sentence figure) and exits 1 if any.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator

from tests.doccheck import documents
from tests.doccheck.claims import row_cells

#: a part that says why its numbers carry no marker (a missing raw output is no reason)
DECLARED = re.compile(r"<!--\s*(not figures|by hand):\s*[^\s-][^>]*-->")
SEPARATOR = re.compile(r"\|(\s*:?-{3,}:?\s*\|)+")
CODE = re.compile(r"`[^`]*`")
COMMENT = re.compile(r"<!--.*?-->")
#: a measurement in a sentence: a speedup, a share or a rate, then whatever follows it
#: (a rate's marker sits between the number and its unit: ``688 <!-- figure ... --> env steps/s``);
#: a range's end is one too (``81-84%``, ``11,188-11,667 env steps/s``: the unit belongs to both)
MEASURED = re.compile(r"(?<![\w.,])\d[\d,]*(?:\.\d+)?"
                      r"(?:x|%|(?P<mark>\s*<!--[^>]*-->)?\s(?:env steps/s|updates/s|steps/s))(?!\w)")
#: a figure marker, or a sentence figure's own reason for having none: ``6.96x <!-- unmarked:
#: the figure this replaced; its output was not kept -->``
MARKER_NEXT = re.compile(r"\**\)?\s*<!-- (figure|unmarked:\s*[^\s-])")
#: not a measurement of its own: a target (``goal >= 6x``, ``(the goal: 70%)``, ``at least
#: 1.5x``, a tolerance ``within +-10%``) or a rounded restatement (``about 380 updates/s``,
#: ``~2,500 env steps/s``)
GOAL_BEFORE = re.compile(r"(>=|\+-|goal:?|goal of|at least|above|below|under|over|about|around|within|~)"
                         r"\s*\**$")


def _states_a_number(row: str) -> bool:
    return any(ch.isdigit() for ch in CODE.sub("", "|".join(row_cells(row)[1:])))


def _undeclared(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line number, line, all lines) of every line outside fenced code, headings, declarations
    and the parts they declare."""
    lines = text.splitlines()
    fenced = declared = False
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        elif fenced:
            continue
        elif stripped.startswith("#"):
            declared = False
        elif DECLARED.search(stripped):
            declared = True
        elif not declared:
            yield number, line, lines


def unbacked_rows(text: str) -> list[tuple[int, str]]:
    """(line number, row) of every table row that writes a number with no marker on it, outside
    fenced code and outside the declared parts."""
    rows = []
    for number, line, lines in _undeclared(text):
        stripped = line.strip()
        if stripped.startswith("|") and "<!-- figure" not in stripped:
            following = lines[number].strip() if number < len(lines) else ""
            if SEPARATOR.fullmatch(stripped) or SEPARATOR.fullmatch(following):
                continue  # a separator, or the header above one
            if _states_a_number(stripped):
                rows.append((number, line))
    return rows


def unbacked_prose(text: str) -> list[tuple[int, str]]:
    """(line number, figure) of every speedup, share or rate written in a sentence (not a table,
    not code, not a heading) with no marker right after it, outside the declared parts."""
    found = []
    for number, line, _lines in _undeclared(text):
        if line.strip().startswith("|"):
            continue
        prose = CODE.sub(lambda m: " " * len(m.group()), line)
        comments = [c.span() for c in COMMENT.finditer(prose)]  # a marker's own arguments
        found += [(number, m.group()) for m in MEASURED.finditer(prose)
                  if not any(start <= m.start() < end for start, end in comments)
                  and not (m.group("mark") and MARKER_NEXT.match(m.group("mark")))
                  and not MARKER_NEXT.match(prose, m.end())
                  and not GOAL_BEFORE.search(prose[max(0, m.start() - 16):m.start()])]
    return found


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    prose = "--prose" in args
    files = documents("unbacked", [a for a in args if a != "--prose"], "[--prose] FILE.md [...]")
    if files is None:
        return 2
    found = 0
    for path in files:
        text = path.read_text()
        for number, row in unbacked_rows(text):
            found += 1
            print(f"{path}:{number}: {row.strip()[:160]}")
        for number, figure in unbacked_prose(text) if prose else []:
            found += 1
            print(f"{path}:{number}: {figure} (in a sentence)")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
