"""``python -m drlmpi.plan [overrides] [--ranks 1,2,4] [--seconds S] [--out plan.json]
[--compare SWEEP_DIR ...]``: which topology pays, before running any.

A short probe of the composed config on this machine (:mod:`drlmpi.planner.probe`: env step,
acting, update and message costs; under a minute) feeds a model of every topology
(:mod:`drlmpi.planner.model`) that predicts env steps/s, updates/s and the speedup over
sequential at each number of ranks. It prints the table and a recommendation and writes
``plan.json``. ``--compare`` puts the measured throughput of finished runs (a
``topology_throughput`` sweep, say) next to the prediction, with the error of each cell.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

TOPOLOGIES = ("sequential", "p2p", "star", "async", "allgather", "parameter_server", "groups", "central")
#: a prediction within this share of the measured throughput counts as right (docs/results.md)
TOLERANCE = 0.25


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m drlmpi.plan",
        description="Predict each topology's env steps/s and speedup from a short probe of the "
                    "config (overrides as for python -m drlmpi).")
    parser.add_argument("--ranks", default=None,
                        help="comma-separated world sizes (default: 1, 2, 4, ... up to this "
                             "machine's cores, and the cores)")
    parser.add_argument("--topologies", default=",".join(TOPOLOGIES), help="comma-separated topologies")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="seconds per measured quantity (the probe takes about 6x this plus "
                             "start-up)")
    parser.add_argument("--out", type=Path, default=Path("plan.json"), help="where to write the plan")
    parser.add_argument("--plan", type=Path, default=None,
                        help="compare a plan.json written earlier instead of probing again "
                             "(with --compare)")
    parser.add_argument("--compare", type=Path, nargs="+", default=[],
                        help="run or sweep directories whose measured env steps/s go next to "
                             "the prediction")
    return parser.parse_known_args(argv)


def compose(overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from drlmpi.config.schema import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def default_ranks(cores: int) -> list[int]:
    ranks, n = {cores}, 1
    while n <= cores:
        ranks.add(n)
        n *= 2
    return sorted(ranks)


def configs(overrides: list[str], topologies: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """One composed config per topology (the user's overrides plus ``topology=NAME``), and
    why a topology could not be composed."""
    from omegaconf.errors import OmegaConfBaseException

    base = [o for o in overrides if not o.startswith(("topology=", "world_size="))]
    cfgs, refused = {}, {}
    for name in topologies:
        try:
            cfgs[name] = compose([*base, f"topology={name}"])
        except (OmegaConfBaseException, ValueError, KeyError) as exc:
            refused[name] = str(exc).splitlines()[0]
    return cfgs, refused


def plan_cells(cfgs: dict[str, Any], refused: dict[str, str], ranks: list[int], probe: Any) -> list:
    from drlmpi.config.errors import ConfigError
    from drlmpi.planner.model import Prediction, predict
    from drlmpi.run.plan import make_plan

    cells = []
    for name in [*cfgs, *refused]:
        for n in ranks:
            if name in refused:
                cells.append(Prediction(name, n, refused=refused[name]))
                continue
            try:
                make_plan(cfgs[name], n)
            except ConfigError as exc:
                cells.append(Prediction(name, n, refused=str(exc)))
                continue
            cells.append(predict(name, n, probe, cfgs[name]))
    return cells


def _fmt(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


BOUND_CODES = {"simulators": "s", "learner": "l", "exchange": "x", "stepping and learning in turn": "t"}


def table(cells: list, ranks: list[int]) -> list[str]:
    base = next((c.env_steps_per_s for c in cells if c.topology == "sequential" and c.ranks == 1
                 and c.env_steps_per_s), None)
    lines = ["| topology | " + " | ".join(f"{n} ranks" for n in ranks) + " |",
             "|---|" + "---|" * len(ranks)]
    by = {(c.topology, c.ranks): c for c in cells}
    for name in dict.fromkeys(c.topology for c in cells):
        row = []
        for n in ranks:
            c = by[(name, n)]
            if c.env_steps_per_s is None:
                row.append("")
                continue
            speed = f" {c.env_steps_per_s / base:.2f}x" if base else ""
            row.append(f"{_fmt(c.env_steps_per_s)}{speed} {BOUND_CODES.get(c.bound, '?')}")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return lines


def recommend(cells: list, ranks: int) -> str:
    ok = [c for c in cells if c.ranks == ranks and c.env_steps_per_s]
    if not ok:
        return f"no topology runs on {ranks} ranks with this config"
    best = max(ok, key=lambda c: c.env_steps_per_s)
    seq = next((c for c in cells if c.topology == "sequential" and c.env_steps_per_s), None)
    gain = f", {best.env_steps_per_s / seq.env_steps_per_s:.1f}x sequential" if seq else ""
    bound = best.bound if best.bound.startswith("stepping") else f"bound by the {best.bound}"
    return (f"on {ranks} ranks: topology={best.topology} ({_fmt(best.env_steps_per_s)} env steps/s"
            f"{gain}; {bound})")


def measured(paths: list[Path]) -> dict[tuple[str, int], list[float]]:
    """Env steps/s of every finished run under ``paths``, by (topology, world size)."""
    from drlmpi.sweep.jobs import read_summary

    found: dict[tuple[str, int], list[float]] = defaultdict(list)
    for root in paths:
        for path in sorted(Path(root).rglob("summary.json")):
            summary = read_summary(path.parent)
            if summary is None or summary.get("algo") == "random":
                continue
            found[(str(summary.get("topology")), int(summary.get("world_size", 0)))].append(
                float(summary.get("env_steps_per_s") or 0.0))
    return found


def comparison(cells: list, runs: dict[tuple[str, int], list[float]]) -> tuple[list[str], dict]:
    lines = ["| topology | ranks | predicted env steps/s | measured | error |", "|---|---|---|---|---|"]
    rows, within = [], 0
    for c in cells:
        got = runs.get((c.topology, c.ranks))
        if not got or c.env_steps_per_s is None:
            continue
        value = sum(got) / len(got)
        error = c.env_steps_per_s / value - 1
        within += abs(error) <= TOLERANCE
        rows.append({"topology": c.topology, "ranks": c.ranks, "predicted": c.env_steps_per_s,
                     "measured": value, "runs": len(got), "error": error})
        lines.append(f"| {c.topology} | {c.ranks} | {_fmt(c.env_steps_per_s)} | {_fmt(value)} | "
                     f"{error:+.0%} |")
    share = within / len(rows) if rows else 0.0
    lines.append("")
    lines.append(f"{within} of {len(rows)} cells within +-{TOLERANCE:.0%} ({share:.0%})")
    return lines, {"cells": rows, "within": within, "share_within": share, "tolerance": TOLERANCE}


def compare_saved(path: Path, runs: list[Path]) -> int:
    """``--plan FILE --compare DIR ...``: the saved plan's cells next to measured runs."""
    from drlmpi.planner.model import Prediction

    try:
        saved = json.loads(path.read_text())
        cells = [Prediction(**cell) for cell in saved["cells"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"drlmpi.plan: error: --plan {path}: not a plan.json ({exc})", file=sys.stderr)
        return 2
    lines, saved["comparison"] = comparison(cells, measured(runs))
    print("\n".join(lines), flush=True)
    path.write_text(json.dumps(saved, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.plan is not None:
        return compare_saved(args.plan, args.compare)
    from drlmpi.config.errors import ConfigError
    from drlmpi.run.arguments import check_command_line

    try:
        check_command_line(overrides)
        topologies = [t for t in args.topologies.split(",") if t]
        unknown = sorted(set(topologies) - set(TOPOLOGIES))
        if unknown:
            raise ConfigError(f"--topologies: no model for {', '.join(unknown)} "
                              f"(one of {', '.join(TOPOLOGIES)})")
        ranks = sorted({int(r) for r in args.ranks.split(",")}) if args.ranks else None
        if ranks is not None and min(ranks) < 1:
            raise ConfigError("--ranks: world sizes must be >= 1")
        cfgs, refused = configs(overrides, topologies)
        if not cfgs:
            raise ConfigError(f"no topology could be composed: {next(iter(refused.values()))}")
        first = next(iter(cfgs.values()))
        from drlmpi.planner.probe import smallest_world
        from drlmpi.run.plan import make_plan

        make_plan(first, smallest_world(first))  # the config itself: one line if it is wrong
    except (ConfigError, ValueError) as exc:
        print(f"drlmpi.plan: error: {exc}", file=sys.stderr)
        return 2
    from drlmpi.mpi.process import set_thread_counts

    set_thread_counts(first.get("threads_per_rank"))  # as each rank of the run would
    import torch

    torch.set_num_threads(int(first.get("threads_per_rank") or 1))
    from drlmpi.planner.probe import probe as run_probe

    print(f"drlmpi.plan: probing {first.algo.name} on {first.env.id} (device {first.device}) ...",
          file=sys.stderr, flush=True)
    p = run_probe(cfgs, args.seconds)
    ranks = ranks or default_ranks(p.cores)
    cells = plan_cells(cfgs, refused, ranks, p)
    lines = [f"Probe ({p.probe_seconds:.0f} s, {p.cores} cores, learner on {p.device}): "
             f"{p.sim_step_s * 1e3:.3f} ms per env step with acting ({p.env_step_s * 1e3:.3f} ms without), "
             + (f"{p.update_at(p.batch_size) * 1e3:.3f} ms per update at batch {p.batch_size}, "
                f"{p.updates_per_step:g} updates per step" if p.update_s else "no updates (no learner)")
             + f", messages {p.latency_s * 1e6:.1f} us + "
             f"{p.bandwidth_bytes_per_s / 1e9:.2f} GB/s ({p.comm_source}).", "",
             "Predicted env steps/s (speedup vs sequential; bound: s simulators, l learner, "
             "x exchange, t stepping and learning in turn):", "", *table(cells, ranks), ""]
    refusals = sorted({(c.topology, c.refused) for c in cells if c.refused and c.ranks == max(ranks)})
    lines += [f"- {name} on {max(ranks)} ranks: {why}" for name, why in refusals]
    verdict = recommend(cells, max(ranks))
    lines += ["", f"Recommendation {verdict}."] + [f"Note: {n}" for n in p.notes]
    result: dict[str, Any] = {"overrides": overrides, "probe": p.to_json(),
                              "cells": [c.to_json() for c in cells], "recommendation": verdict}
    if args.compare:
        compared, result["comparison"] = comparison(cells, measured(args.compare))
        lines += ["", "Measured (--compare):", "", *compared]
    print("\n".join(lines), flush=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"drlmpi.plan: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
