"""Figures as text: numbers (``fmt``, ``percent``) and markdown tables (``table``), the same in
the report (:mod:`drlmpi.report.markdown`) and in the sections a topology adds to it
(``report_section``, e.g. :class:`drlmpi.topologies.central.Central`); tables for a terminal
(``aligned``: the planner's)."""

from __future__ import annotations

from typing import Any


def fmt(value: Any, digits: Any = None) -> str:
    """``value`` with ``digits`` decimals and thousands separators (``"%"``: as a whole percent;
    ``None``: as it is); ``-`` when absent."""
    if value is None:
        return "-"
    if isinstance(value, str) or digits is None:
        return str(value)
    if digits == "%":
        return f"{100 * float(value):.0f}%"
    return f"{float(value):,.{digits}f}"


def percent(share: float) -> str:
    """A share as a percent: no decimals from 10 %, one below (so a small share is not 0%)."""
    return f"{100 * share:.0f}%" if share >= 0.1 else f"{100 * share:.1f}%"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table (``|`` in a cell escaped, line breaks joined)."""
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return lines


def aligned(header: list[str], rows: list[list[str]], right: set[int] = frozenset(),
            indent: int = 2) -> list[str]:
    """A table for a terminal: each column as wide as its widest cell, two spaces between
    columns, the columns numbered in ``right`` aligned right."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return (" " * indent + "  ".join(padded)).rstrip()
    return [line(header), *(line(row) for row in rows)]
