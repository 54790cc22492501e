"""What every plot of the report shares: its figure, its panels and its colours.

Each plot is a matplotlib :class:`~matplotlib.figure.Figure` of its own (the Agg canvas, no
pyplot state) with one panel per env+algo pair (:func:`by_pair`, :func:`new_figure`), saved at
one resolution; each topology label keeps one colour in every plot of a report
(:func:`assign_colors`, :func:`topology_color`).
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from pathlib import Path

from matplotlib.figure import Figure

from drlmpi.report.tables import Group

DPI = 110


_COLORS: dict[str, str] = {}


def assign_colors(groups: list[Group]) -> None:
    """One colour per topology label, in topology order, the same in every plot of a report."""
    labels = sorted({(g.order, g.topology) for g in groups})
    _COLORS.clear()
    for _, label in labels:
        _COLORS.setdefault(label, f"C{len(_COLORS) % 10}")


def topology_color(label: str) -> str:
    return _COLORS.get(label) or f"C{sum(map(ord, label)) % 10}"


def by_pair(groups: list[Group]) -> dict[tuple[str, str], list[Group]]:
    """The groups of each (env, algo) pair, pairs in sorted order: one panel each."""
    pairs: dict[tuple[str, str], list[Group]] = defaultdict(list)
    for g in groups:
        pairs[g.pair].append(g)
    return dict(sorted(pairs.items()))


def new_figure(n_panels: int, width: float = 7.0, height: float = 4.6):
    """A figure of ``n_panels`` panels, two a row (one alone), and its axes as a flat array;
    the cells left over are hidden."""
    ncols = 1 if n_panels <= 1 else 2
    nrows = max(1, math.ceil(n_panels / ncols))
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes


def save_figure(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=DPI)


#: characters a line of a panel's note holds (:func:`say`)
NOTE_WIDTH = 44


def say(ax, text: str) -> None:
    """A panel with nothing to draw says why, in plain words, in its middle."""
    ax.text(0.5, 0.5, textwrap.fill(text, NOTE_WIDTH), ha="center", va="center", fontsize=9,
            transform=ax.transAxes)


def empty_figure(path: Path, title: str) -> None:
    """The plot ``title`` saved to ``path`` with no panel but a note: no complete run."""
    fig, axes = new_figure(1)
    axes[0].set_title(title)
    say(axes[0], "Nothing to draw: no run under the paths given has finished (a summary.json). "
                 "report.md lists the runs still going or failed; report again once they have finished.")
    axes[0].set_axis_off()
    save_figure(fig, path)
