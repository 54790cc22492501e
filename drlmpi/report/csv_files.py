"""The report's CSV files: every column outside the text columns holds a number or nothing, and a
``note`` column says why a cell is empty (a spreadsheet or pandas reads them as numbers)."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any


def is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def numeric_cells(row: dict[str, Any], columns: list[str], text: tuple[str, ...]) -> dict[str, Any]:
    """``row``'s cells with every column outside ``text`` a number or empty: a value that is not
    one (``n/a (sequential not solved)``, ``3000/100000``) leaves its cell empty and says why in
    the ``note`` column (``speedup_threshold, efficiency_threshold: sequential not solved``)."""
    out: dict[str, Any] = {}
    why: dict[str, list[str]] = defaultdict(list)
    for column in columns:
        value = row.get(column)
        if column != "note" and column not in text and value is not None and not is_number(value):
            reason = str(value)
            if reason.startswith("n/a (") and reason.endswith(")"):
                reason = reason[len("n/a ("):-1]
            why[reason].append(column)
            value = None
        out[column] = "" if value is None else value
    out["note"] = "; ".join(f"{', '.join(cols)}: {reason}" for reason, cols in why.items())
    return out


def write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str],
              text: tuple[str, ...] | None = None) -> None:
    """``rows`` as CSV; with ``text`` (the columns of words), every other column holds a number
    or nothing, and a ``note`` column says why a cell is empty (:func:`numeric_cells`)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            if text is not None:
                writer.writerow(numeric_cells(row, columns, text))
            else:
                writer.writerow({c: "" if row.get(c) is None else row.get(c) for c in columns})
