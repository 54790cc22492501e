"""``python -m drlmpi.plan [overrides] [--ranks 1,2,4] [--topologies a,b] [--seconds S]
[--no-calibrate] [--out plan.json] [--plan FILE] [--compare DIR ...]``: which topology pays,
before running any.

A short probe of the composed config on this machine (:mod:`drlmpi.planner.probe`: env step,
acting, update and message costs) feeds every registered topology's own pace model
(:mod:`drlmpi.planner.model`); a calibration (short real jobs at the largest size, one launch:
:mod:`drlmpi.planner.jobs`) adds how a full job loads this machine. It prints env steps/s, their
range and the speedup over sequential of each topology at each number of ranks, a
recommendation, the host's drift during the probe, and writes ``plan.json``. ``--compare`` puts
the measured throughput of finished runs next to the prediction: each cell's error, the share
within +-25%, the median signed error and how the recommended cell measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from drlmpi.planner.cells import cell_refusals, configs, plan_cells
from drlmpi.planner.compare import compare_saved, comparison, config_of, fmt_rate, measured
from drlmpi.planner.model import Prediction, recommended, topology_names

#: the probe's first figure measured again at the end: a change beyond this is reported as drift
DRIFT_TOLERANCE = 0.10


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m drlmpi.plan",
        description="Predict each topology's env steps/s and speedup from a short probe of the "
                    "config (overrides as for python -m drlmpi).")
    parser.add_argument("--ranks", default=None,
                        help="comma-separated world sizes (default: 1, 2, 4, ... up to this "
                             "machine's cores, and the cores)")
    parser.add_argument("--topologies", default=None,
                        help="comma-separated topologies (default: every registered one)")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="seconds per measured quantity (the probe takes about 6x this, the "
                             "calibration 4x this per topology, plus start-up)")
    parser.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                        help="skip the calibration jobs at the largest size (the model from the "
                             "probe alone)")
    parser.add_argument("--out", type=Path, default=Path("plan.json"), help="where to write the plan")
    parser.add_argument("--plan", type=Path, default=None,
                        help="compare a plan.json written earlier instead of probing again "
                             "(with --compare)")
    parser.add_argument("--compare", type=Path, nargs="+", default=[],
                        help="run or sweep directories whose measured env steps/s go next to "
                             "the prediction")
    return parser.parse_known_args(argv)


def default_ranks(cores: int) -> list[int]:
    ranks, n = {cores}, 1
    while n <= cores:
        ranks.add(n)
        n *= 2
    return sorted(ranks)


BOUND_CODES = {"simulators": "s", "learner": "l", "exchange": "x", "stepping and learning in turn": "t"}


def table(cells: list[Prediction], ranks: list[int]) -> list[str]:
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
                row.append("not modelled" if (c.refused or "").startswith("not modelled") else "")
                continue
            speed = f" {c.env_steps_per_s / base:.2f}x" if base else ""
            ranged = c.low is not None and c.high != c.low
            spread = f" ({fmt_rate(c.low)}-{fmt_rate(c.high)})" if ranged else ""
            row.append(f"{fmt_rate(c.env_steps_per_s)}{spread}{speed} {BOUND_CODES.get(c.bound, '?')}")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return lines


def recommend(cells: list[Prediction]) -> str:
    best = recommended(cells)
    if best is None:
        return "none: no topology runs with this config at these sizes"
    seq = next((c for c in cells if c.topology == "sequential" and c.env_steps_per_s), None)
    gain = f", {best.env_steps_per_s / seq.env_steps_per_s:.1f}x sequential" if seq else ""
    bound = best.bound if best.bound.startswith("stepping") else f"bound by the {best.bound}"
    return (f"topology={best.topology} on {best.ranks} ranks ({fmt_rate(best.env_steps_per_s)} env steps/s"
            f"{gain}; {bound})")


def check_request(args: argparse.Namespace, overrides: list[str]) -> tuple[list[str], list[int] | None]:
    """The topologies and sizes asked for; :class:`ConfigError` in one line for bad input."""
    from drlmpi.config.errors import ConfigError
    from drlmpi.run.arguments import check_command_line

    check_command_line(overrides)
    known = topology_names()
    topologies = [t for t in (args.topologies or ",".join(known)).split(",") if t]
    unknown = sorted(set(topologies) - set(known))
    if unknown:
        raise ConfigError(f"--topologies: unknown topology {', '.join(unknown)} (one of {', '.join(known)})")
    ranks = None
    if args.ranks:
        try:
            ranks = sorted({int(r) for r in args.ranks.split(",") if r.strip()})
        except ValueError:
            raise ConfigError(f"--ranks {args.ranks}: comma-separated whole numbers, e.g. 1,2,4") from None
        if not ranks or min(ranks) < 1:
            raise ConfigError(f"--ranks {args.ranks}: world sizes must be >= 1")
    if args.seconds <= 0:
        raise ConfigError(f"--seconds {args.seconds:g}: must be > 0")
    return topologies, ranks


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.plan is not None:
        return compare_saved(args.plan, args.compare, overrides)
    from drlmpi.config.errors import ConfigError

    try:
        topologies, ranks = check_request(args, overrides)
        cfgs, refused = configs(overrides, topologies)
        if not cfgs:
            raise ConfigError(f"no topology could be composed: {next(iter(refused.values()))}")
        first = next(iter(cfgs.values()))
        from drlmpi.planner.probe import smallest_world
        from drlmpi.run.preflight import make_plan

        make_plan(first, smallest_world(first))  # the config itself: one line if it is wrong
        from drlmpi.job_control.launchers import mpiexec_command

        mpiexec_command()  # the probes' and calibration's launch command (DRLMPI_MPIEXEC)
    except (ConfigError, ValueError) as exc:
        print(f"drlmpi.plan: error: {exc}", file=sys.stderr)
        return 2
    from drlmpi.job_control.process import set_thread_counts

    set_thread_counts(first.get("threads_per_rank"))  # as each rank of the run would
    import torch

    torch.set_num_threads(int(first.get("threads_per_rank") or 1))
    from drlmpi.planner.calibration import calibrate
    from drlmpi.planner.probe import probe as run_probe
    from drlmpi.planner.probe import remeasure

    print(f"drlmpi.plan: probing {first.algo.name} on {first.env.id} (device {first.device}) ...",
          file=sys.stderr, flush=True)
    p = run_probe(cfgs, args.seconds)
    ranks = ranks or default_ranks(p.cores)
    why = cell_refusals(cfgs, refused, ranks)
    calibrations: dict[str, dict] = {}
    if args.calibrate:
        with tempfile.TemporaryDirectory(prefix="drlmpi-plan-") as tmp:
            calibrations = calibrate(cfgs, overrides, why, p, args.seconds, Path(tmp))
    drift = remeasure(first, args.seconds) / p.sim_step_s - 1
    cells = plan_cells(cfgs, why, p, calibrations)
    lines = [probe_line(p), *calibration_lines(calibrations), "",
             "Predicted env steps/s (range from the probe's spread; speedup vs sequential; bound: "
             "s simulators, l learner, x exchange, t stepping and learning in turn):", "",
             *table(cells, ranks), ""]
    refusals = sorted({(c.topology, c.refused) for c in cells if c.refused and c.ranks == max(ranks)})
    lines += [f"- {name} on {max(ranks)} ranks: {why}" for name, why in refusals]
    verdict = recommend(cells)
    lines += ["", f"Recommendation: {verdict}.", describe_drift(drift, DRIFT_TOLERANCE)]
    lines += [f"Note: {n}" for n in p.notes]
    result: dict[str, Any] = {"overrides": overrides, "config": config_of(first), "probe": p.to_json(),
                              "calibration": calibrations, "drift": drift,
                              "cells": [c.to_json() for c in cells], "recommendation": verdict}
    if args.compare:
        found, _ = measured(args.compare, result["config"])
        compared, result["comparison"] = comparison(cells, found)
        lines += ["", "Measured (--compare):", "", *compared]
    print("\n".join(lines), flush=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"drlmpi.plan: wrote {args.out}", file=sys.stderr)
    return 0


def probe_line(p: Any) -> str:
    updates = (f"{p.update_at(p.batch_size) * 1e3:.3f} ms per update at batch {p.batch_size} "
               f"({p.learner_update_s * 1e3:.3f} ms through the run's learner), "
               f"{p.updates_per_step:g} updates per step" if p.update_s else "no updates (no learner)")
    spread = ", ".join(f"{k} +-{v:.0%}" for k, v in p.spread.items())
    return (f"Probe ({p.probe_seconds:.0f} s, {p.cores} cores, learner on {p.device}): "
            f"{p.sim_step_s * 1e3:.3f} ms per env step with acting ({p.env_step_s * 1e3:.3f} ms without), "
            f"{updates}, messages {p.latency_s * 1e6:.1f} us + {p.bandwidth_bytes_per_s / 1e9:.2f} GB/s "
            f"({p.comm_source}); spread between repeats: {spread or 'not measured'}.")


def calibration_lines(calibrations: dict[str, dict]) -> list[str]:
    if not calibrations:
        return ["Calibration: none (--no-calibrate, or no topology runs on more than one rank here)."]
    parts = []
    for name, c in calibrations.items():
        if "error" in c:
            parts.append(f"{name}: not calibrated ({c['error']})")
        else:
            parts.append(f"{name} on {c['ranks']}: measured {fmt_rate(c['measured'])} against "
                         f"{fmt_rate(c['modelled'])}"
                         f" modelled, load x{c['load']:.2f}")
    seconds = sum(c.get('seconds', 0) for c in calibrations.values())
    return [f"Calibration ({seconds:.0f} s, one short job per "
            "topology at its largest size): " + "; ".join(parts) + "."]


def describe_drift(drift: float, tolerance: float) -> str:
    """One line on how far the probe's first figure moved between the start and the end."""
    if abs(drift) > tolerance:
        return (f"Warning: the host drifted {drift:+.0%} during planning (a simulator's step measured "
                f"again at the end; tolerance +-{tolerance:.0%}): predictions are as unsteady as the "
                "host - plan again on a quieter machine or expect errors of that size.")
    return f"Host drift during planning: {drift:+.1%} (a simulator's step measured again at the end)."


if __name__ == "__main__":
    sys.exit(main())
