"""The learner benchmark's output: its rows as a printed table, with each row's ratio to the bare
CPU loop and to drlmpi's CPU path, and as JSON (:mod:`drlmpi.bench.learner` writes both).

A row is ``(algo, batch, device, mode, updates_per_s, note)``; ``updates_per_s`` is None for a
row that failed (its note says why).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

Row = tuple[str, int, str, str, "float | None", str]


def write_json(path: Path, results: list[Row],
               args: dict) -> None:
    """The table as JSON (the repository's figure checker under tests/doccheck/ reads its rows)."""
    rows = [{"algo": a, "batch": b, "device": d, "mode": m, "updates_per_s": r, "note": n}
            for a, b, d, m, r, n in results]
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in args.items()},
                                "gpu": gpu, "torch": torch.__version__,
                                "cpu_threads": torch.get_num_threads()}, indent=1))


def print_table(results: list[Row]) -> None:
    """The summary: updates/s and the ratios to the bare CPU loop and to drlmpi's CPU path."""
    base: dict[tuple[str, int, str], float | None] = {}
    for algo, batch, device, mode, rate, _ in results:
        if device == "cpu":
            base[(algo, batch, mode)] = rate

    def ratio(rate: float | None, ref: float | None) -> str:
        return "-" if not rate or not ref else f"{rate / ref:.2f}x"

    width = max([8, *(len(row[3]) for row in results)])  # "drlmpi stacked", "graph det"
    print()
    print(f"{'algo':5} {'batch':>5} {'device':8} {'mode':{width}} {'updates/s':>10} {'vs bare cpu':>12} "
          f"{'vs drlmpi cpu':>14}  note")
    for algo, batch, device, mode, rate, note in results:
        shown = "-" if rate is None else f"{rate:,.0f}"
        print(f"{algo:5} {batch:5d} {device:8} {mode:{width}} {shown:>10} "
              f"{ratio(rate, base.get((algo, batch, 'bare'))):>12} "
              f"{ratio(rate, base.get((algo, batch, 'drlmpi'))):>14}  {note}")
