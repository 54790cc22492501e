"""An update's metrics as ONE device tensor (:class:`Metrics`), converted to floats only when read:
no host synchronisation per update; :func:`mean_metrics` averages a batch of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import torch


class Metrics(Mapping):
    """An update's scalar metrics, held as one tensor until read.

    Building it costs no host synchronisation: the values stay a device tensor (a snapshot,
    never overwritten by later updates) and are converted to Python floats, all at once, on
    the first read. It is a read-only mapping ``name -> float``, so ``metrics["loss"]``,
    ``dict(metrics)`` and ``float(metrics["loss"])`` work as with a plain dict.
    """

    __slots__ = ("_names", "_tensor", "_floats")

    def __init__(self, names: Sequence[str], values: torch.Tensor | Sequence[torch.Tensor]) -> None:
        self._names = tuple(names)
        if not isinstance(values, torch.Tensor):
            values = torch.stack([v.detach().reshape(()) for v in values])
        self._tensor = values.detach()
        self._floats: dict[str, float] | None = None

    def _resolve(self) -> dict[str, float]:
        if self._floats is None:
            self._floats = dict(zip(self._names, self._tensor.tolist()))
        return self._floats

    def __getitem__(self, key: str) -> float:
        return self._resolve()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"Metrics({self._resolve()})"


def mean_metrics(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each metric over ``samples`` (update metrics kept over a logging interval),
    NaNs left out (TD3's actor loss before the first actor step); a metric that is NaN in
    every sample is left out. See :func:`read_metrics` for how they are read."""
    return table_means(read_metrics(samples))


def read_metrics(samples: Sequence[Mapping[str, float]]) -> dict[tuple[str, ...], np.ndarray]:
    """``samples`` as tables, one per tuple of metric names: ``(samples, names)`` float64. The
    :class:`Metrics` among them are stacked and read in ONE device-to-host transfer (one host
    synchronisation for the whole interval); plain mappings are read as they are."""
    rows: dict[tuple[str, ...], list[np.ndarray]] = {}
    lazy: dict[tuple[tuple[str, ...], torch.device], list[torch.Tensor]] = {}
    for sample in samples:
        if isinstance(sample, Metrics):
            lazy.setdefault((sample._names, sample._tensor.device), []).append(sample._tensor)
        elif sample:
            names = tuple(sample)
            rows.setdefault(names, []).append(np.array([float(sample[k]) for k in names]))
    for (names, _), tensors in lazy.items():
        values = torch.stack(tensors).to("cpu", torch.float64).numpy()
        rows.setdefault(names, []).extend(values)
    return {names: np.asarray(values, dtype=np.float64).reshape(-1, len(names))
            for names, values in rows.items()}


def table_means(tables: Mapping[tuple[str, ...], np.ndarray]) -> dict[str, float]:
    """:func:`mean_metrics` of tables :func:`read_metrics` read."""
    out: dict[str, float] = {}
    for names, table in tables.items():
        finite = ~np.isnan(table)
        counts = finite.sum(axis=0)
        sums = np.where(finite, table, 0.0).sum(axis=0)
        for name, total, count in zip(names, sums, counts):
            if count:
                out[name] = float(total / count)
    return out


def non_finite_metrics(tables: Mapping[tuple[str, ...], np.ndarray],
                       must_be_finite: Sequence[str]) -> dict[str, float]:
    """The metrics among ``must_be_finite`` (an algorithm's losses) that were NaN or infinite in
    a sample of ``tables``, each with its first such value."""
    out: dict[str, float] = {}
    for names, table in tables.items():
        for j, name in enumerate(names):
            if name in must_be_finite and name not in out:
                bad = table[~np.isfinite(table[:, j]), j]
                if len(bad):
                    out[name] = float(bad[0])
    return out
