"""Relative links of the repository's documents: every ``[text](path)``, ``![alt](path)`` and
``[name]: path`` outside code names a file or folder that exists, and a ``#anchor`` a heading of
the Markdown file it points into (GitHub's anchors: lower case, punctuation dropped, spaces as
hyphens). Web addresses are not followed.

``python -m tests.doccheck.links FILE.md ...`` prints each broken link and exits 1 if any.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

from tests.doccheck import documents

INLINE = re.compile(r"\]\(([^)\s]+)\)")
REFERENCE = re.compile(r"^\[[^\]]+\]:\s*(\S+)", re.M)
CODE = re.compile(r"`[^`]*`")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"<!--.*?-->", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _prose(path: Path) -> list[str]:
    """The lines of ``path`` outside fenced code."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


@cache
def anchors(path: Path) -> frozenset[str]:
    return frozenset(slug(line.lstrip("#")) for line in _prose(path) if line.startswith("#"))


def broken_links(path: Path) -> list[str]:
    """Each broken relative link of the Markdown file ``path``, as ``path: target (why)``."""
    text = "\n".join(CODE.sub("", line) for line in _prose(path))
    problems = []
    for target in INLINE.findall(text) + REFERENCE.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        name, _, anchor = target.partition("#")
        dest = (path.parent / name).resolve() if name else path.resolve()
        if not dest.exists():
            problems.append(f"{path}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{path}: {target} (no heading with that anchor)")
    return problems


def main(argv: list[str] | None = None) -> int:
    files = documents("links", list(sys.argv[1:] if argv is None else argv), "FILE.md [...]")
    if files is None:
        return 2
    problems = [p for f in files for p in broken_links(f)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
