"""Checks of this repository's own documents, run by the test suite and by hand; not part of the
package.

- :mod:`tests.doccheck.claims`: every ``<!-- figure ... -->`` marker's figure recomputed from its
  artifact under docs/results/ (``python -m tests.doccheck.claims FILE.md ...``);
- :mod:`tests.doccheck.unbacked`: table rows and sentence measurements with no marker
  (``python -m tests.doccheck.unbacked [--prose] FILE.md ...``);
- :mod:`tests.doccheck.provenance`: every study folder's ``provenance.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path


def documents(name: str, args: list[str], usage: str) -> list[Path] | None:
    """The files a checker's command line names, or None after one line saying why not (no file
    named: the usage; a file that does not exist, a folder, a file that is not UTF-8 text)."""
    files = [Path(a) for a in args]
    if not files:
        print(f"usage: python -m tests.doccheck.{name} {usage}", file=sys.stderr)
        return None
    problems: dict[str, list[str]] = {}  # why -> the files it holds for
    for f in files:
        why = unreadable(f)
        if why is not None:
            problems.setdefault(why, []).append(str(f))
    if problems:
        said = "; ".join(f"{why}: {', '.join(named)}" for why, named in problems.items())
        print(f"{name}: error: {said}", file=sys.stderr)
        return None
    return files


def unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be checked (``None``: it can)."""
    if path.is_dir():
        return "a folder, not a file"
    if not path.is_file():
        return "no such file"
    try:
        path.read_text()
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except OSError as exc:
        return exc.strerror
    return None
