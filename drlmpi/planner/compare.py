"""``python -m drlmpi.plan --compare``: a plan's cells next to the measured throughput of finished
runs of the same config - the error of each cell, the share within the tolerance, the median
signed error and how the recommended cell measured against the best one.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from drlmpi.config.scopes import EnvSettings, RootSettings
from drlmpi.planner.model import TOLERANCE, Prediction, recommended

#: the fields of a run's summary that must match the plan's config for --compare
CONFIG_KEYS = ("algo", "env_id", "device", "sim_cost_ms", "num_envs")


def fmt_rate(rate: float | None) -> str:
    """An env steps/s figure as the tables print it."""
    return "-" if rate is None else f"{rate:,.0f}"


def config_of(cfg: DictConfig) -> dict[str, Any]:
    """What a measured run must share with the plan to be compared with it."""
    env = EnvSettings.coerce(cfg.env)
    return {"algo": cfg.algo.name, "env_id": env.id, "device": RootSettings.coerce(cfg).device,
            "sim_cost_ms": env.sim_cost_ms, "num_envs": env.num_envs}


def _same_config(summary: dict[str, Any], config: dict[str, Any]) -> bool:
    for key in CONFIG_KEYS:
        want, got = config.get(key), summary.get(key)
        if want is None or got is None:
            continue
        if key == "device":  # a run records the resolved device (cuda:0), the plan the option
            if str(want) != "auto" and not str(got).startswith(str(want)):
                return False
        elif isinstance(want, float):
            if abs(float(got) - want) > 1e-9:
                return False
        elif str(got) != str(want):
            return False
    return True


#: measured env steps/s by (topology, world size, env.num_envs: ``None`` where a run did not say)
Measured = dict[tuple[str, int, Any], list[float]]


def measured(paths: list[Path], config: dict[str, Any] | None = None) -> tuple[Measured, int]:
    """Env steps/s of every finished run under ``paths`` by (topology, world size, games), and how
    many runs were left out as of another config than ``config`` (a plan over several games
    leaves ``num_envs`` out of its config: every setting of it is compared)."""
    from drlmpi.sweep.jobs import read_summary

    found: Measured = defaultdict(list)
    other = 0
    for root in paths:
        for path in sorted(Path(root).rglob("summary.json")):
            summary = read_summary(path.parent)
            if summary is None or summary.get("algo") == "random":
                continue
            if config and not _same_config(summary, config):
                other += 1
                continue
            games = None if summary.get("num_envs") is None else int(summary["num_envs"])
            key = (str(summary.get("topology")), int(summary.get("world_size", 0)), games)
            found[key].append(float(summary.get("env_steps_per_s") or 0.0))
    return found, other


def measured_for(cell: Prediction, runs: Measured) -> list[float]:
    """The measured rates of ``cell``'s topology and size, and of its games where both say."""
    return [rate for (topology, ranks, games), rates in runs.items() for rate in rates
            if (topology, ranks) == (cell.topology, cell.ranks)
            and (cell.games is None or games is None or games == cell.games)]


def comparison(cells: list[Prediction], runs: Measured) -> tuple[list[str], dict]:
    import numpy as np

    lines = ["| topology | ranks | predicted env steps/s (range) | measured | error |",
             "|---|---|---|---|---|"]
    rows, within = [], 0
    for c in cells:
        got = measured_for(c, runs)
        if not got or c.env_steps_per_s is None:
            continue
        value = sum(got) / len(got)
        error = c.env_steps_per_s / value - 1
        within += abs(error) <= TOLERANCE
        rows.append({"topology": c.topology, "ranks": c.ranks, "games": c.games, "label": c.label,
                     "predicted": c.env_steps_per_s, "low": c.low, "high": c.high, "measured": value,
                     "runs": len(got), "error": error})
        spread = f" ({fmt_rate(c.low)}-{fmt_rate(c.high)})" if c.low is not None else ""
        lines.append(f"| {c.label} | {c.ranks} | {fmt_rate(c.env_steps_per_s)}{spread} | "
                     f"{fmt_rate(value)} | "
                     f"{error:+.0%} |")
    share = within / len(rows) if rows else 0.0
    median = float(np.median([r["error"] for r in rows])) if rows else 0.0
    result = {"cells": rows, "within": within, "share_within": share, "tolerance": TOLERANCE,
              "median_error": median}
    lines += ["", f"{within} of {len(rows)} cells within +-{TOLERANCE:.0%} ({share:.0%}); "
                  f"median signed error {median:+.0%}"]
    best, pick = max(rows, key=lambda r: r["measured"], default=None), recommended(cells)
    chosen = next((r for r in rows if pick and (r["topology"], r["ranks"], r["games"])
                   == (pick.topology, pick.ranks, pick.games)), None)
    if best and chosen:
        result["recommended"] = {"topology": chosen["topology"], "ranks": chosen["ranks"],
                                 "games": chosen["games"], "measured": chosen["measured"],
                                 "best": best["measured"], "best_cell": [best["topology"], best["ranks"]],
                                 "best_games": best["games"],
                                 "share_of_best": chosen["measured"] / best["measured"]}
        lines.append(f"Recommended {chosen['label']} on {chosen['ranks']} ranks measured "
                     f"{fmt_rate(chosen['measured'])}: {chosen['measured'] / best['measured']:.0%} of the "
                     f"best measured cell ({best['label']} on {best['ranks']} ranks, "
                     f"{fmt_rate(best['measured'])})")
    return lines, result


def check_compared(paths: list[Path]) -> None:
    """``--compare``'s run or sweep directories exist; :class:`ConfigError` in one line if not."""
    from drlmpi.config.errors import ConfigError

    for path in paths:
        if not path.is_dir():
            why = "not a directory" if path.exists() else "no such directory"
            raise ConfigError(f"--compare {path}: {why} (name run or sweep directories)")


def compare_saved(path: Path, runs: list[Path], overrides: list[str], again: bool = False) -> int:
    """``--plan FILE --compare DIR ...``: the saved plan's cells next to measured runs (``again``:
    predicted again by this version's model for the plan's overrides followed by ``overrides``,
    :func:`~drlmpi.planner.cells.predict_again`; the file is then left as it was)."""
    from drlmpi.config.errors import ConfigError

    try:
        saved = json.loads(path.read_text())
        cells = [Prediction(**cell) for cell in saved["cells"]]
        if again:  # the overrides follow the plan's own
            from drlmpi.planner.cells import predict_again

            cells = predict_again(saved, overrides)
    except ConfigError as exc:
        print(f"drlmpi.plan: error: --plan {path} --again: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"drlmpi.plan: error: --plan {path}: not a plan.json ({exc})", file=sys.stderr)
        return 2
    if not again and overrides and sorted(overrides) != sorted(saved.get("overrides", [])):
        made_for = ' '.join(saved.get('overrides', [])) or 'no overrides'
        print(f"drlmpi.plan: error: --plan {path} was made for {made_for}"
              f", not {' '.join(overrides)}", file=sys.stderr)
        return 2
    try:
        check_compared(runs)
    except ConfigError as exc:
        print(f"drlmpi.plan: error: {exc}", file=sys.stderr)
        return 2
    found, other = measured(runs, saved.get("config"))
    if not found and other:
        print(f"drlmpi.plan: error: --compare: the {other} run(s) found are of another config than "
              f"{path} ({', '.join(f'{k}={v}' for k, v in saved.get('config', {}).items())})",
              file=sys.stderr)
        return 2
    lines, saved["comparison"] = comparison(cells, found)
    if other:
        lines.append(f"({other} run(s) of another config left out)")
    print("\n".join(lines), flush=True)
    if not again:  # a plan keeps the comparison of its own predictions
        path.write_text(json.dumps(saved, indent=2) + "\n")
    return 0
