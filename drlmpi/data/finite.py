"""The finite check of experience as a learner stores it (:func:`first_non_finite`): a simulator
whose observations or rewards turn NaN or infinite would otherwise train the networks into NaN
without a word. One pass of ``np.isfinite`` over the chunk; the columns are looked at only when
it fails.
"""

from __future__ import annotations

import numpy as np

from drlmpi.data.layout import ExperienceLayout

#: how a column is named in the stop's message (others by their own name)
WHAT = {"obs": "observation", "next_obs": "observation"}


def checked_columns(layout: ExperienceLayout) -> list[str]:
    """The columns that hold floats: every one but packed image bytes, whose float32 slots may
    hold any bit pattern (NaN ones included) by design."""
    return [name for name in layout.slices if not (layout.packed and name in ("obs", "next_obs"))]


def first_non_finite(rows: np.ndarray, layout: ExperienceLayout) -> tuple[int, str] | None:
    """``(row index, what)`` of the first row of ``rows`` holding a NaN or an infinity, ``what``
    naming its first such column (``observation``, ``reward``, ``action``, an extra column's
    name...); ``None`` when every checked value is finite."""
    if len(rows) == 0:
        return None
    columns = checked_columns(layout)
    if len(columns) == len(layout.slices):
        if np.isfinite(rows).all():  # the common case: one pass, nothing else
            return None
    elif all(np.isfinite(rows[:, layout.slices[name]]).all() for name in columns):
        return None
    bad = {name: ~np.isfinite(rows[:, layout.slices[name]]).all(axis=1) for name in columns}
    row = min(int(np.argmax(flags)) for flags in bad.values() if flags.any())
    first = next(name for name in columns if bad[name][row])
    return row, WHAT.get(first, first)
