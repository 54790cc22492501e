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
    named: the usage; a file that does not exist)."""
    files = [Path(a) for a in args]
    missing = [str(f) for f in files if not f.is_file()]
    if not files:
        print(f"usage: python -m tests.doccheck.{name} {usage}", file=sys.stderr)
    elif missing:
        print(f"{name}: error: no such file: {', '.join(missing)}", file=sys.stderr)
    return files if files and not missing else None
