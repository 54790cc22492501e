"""``python -m drlmpi.plan [overrides] [--ranks 1,2,4] [--topologies a,b] [--seconds S]
[--no-calibrate] [--out FILE_OR_DIR] [--plan FILE] [--compare DIR ...]``: which topology pays,
before running any.

A short probe of the composed config on this machine (:mod:`drlmpi.planner.probe`: env step,
acting, update and message costs) feeds every registered topology's own pace model
(:mod:`drlmpi.planner.model`); a calibration (short real jobs at the largest size, one launch,
where a load lay far from 1 again alone at that size and at half of it: :mod:`drlmpi.planner.jobs`)
adds how a full job loads this machine. It prints, in lines of at most :data:`WIDTH` characters,
what the probe and the calibration measured, a table of the env steps/s and the speedup over
sequential of each topology at each number of ranks, why a topology does not run at the largest
size, a recommendation (never a topology other than sequential on one rank: that is sequential
under another name) and the host's drift during the probe, and writes
``plan.json`` (:func:`plan_path`: under ``outputs/plan/`` unless ``--out`` says where).
``--compare`` puts the measured throughput of finished runs next to the prediction: each cell's
error, the share within +-25%, the median signed error and how the recommended cell measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from drlmpi.config.inputs import ArgumentParser
from drlmpi.outputs.figures import aligned
from drlmpi.planner import end_on_sigterm, plural
from drlmpi.planner.cells import cell_refusals, configs, games_cells, plan_cells
from drlmpi.planner.compare import check_compared, compare_saved, comparison, config_of, fmt_rate, measured
from drlmpi.planner.model import RECHECK, Prediction, recommended, sequential_in_name_only, topology_names

#: no line of the plan's text is longer than this (a wider table drops the ranges first)
WIDTH = 100
#: where plans go unless --out says: beside the runs' outputs/ (conf/config.yaml's hydra.run.dir)
PLAN_DIR = "outputs/plan/{now:%Y-%m-%d}/{now:%H-%M-%S}_{algo}_{env}"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = ArgumentParser(
        prog="python -m drlmpi.plan",
        description="Predict each topology's env steps/s and speedup from a short probe of the "
                    "config (overrides as for python -m drlmpi).")
    parser.add_argument("--ranks", default=None,
                        help="comma-separated world sizes (default: 1, 2, 4, ... up to this "
                             "machine's cores, and the cores)")
    parser.add_argument("--topologies", default=None,
                        help="comma-separated topologies (default: every registered one)")
    parser.add_argument("--games", default=None,
                        help="comma-separated env.num_envs (games or environments a simulator steps) "
                             "to plan each topology and size with (default: the config's own)")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="seconds per measured quantity (the probe takes about 6x this, the "
                             "calibration 4x this per topology, at least 30 s for image "
                             "observations, plus start-up)")
    parser.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                        help="skip the calibration jobs at the largest size (the model from the "
                             "probe alone)")
    parser.add_argument("--out", default=None,
                        help="where to write plan.json: a file, or a directory to write plan.json in "
                             "(default: outputs/plan/DATE/TIME_ALGO_ENV/plan.json)")
    parser.add_argument("--plan", type=Path, default=None,
                        help="compare a plan.json written earlier instead of probing again "
                             "(with --compare)")
    parser.add_argument("--again", action="store_true",
                        help="with --plan: predict its cells again by this version's model, from the "
                             "plan's probe and calibration, for its overrides followed by any given "
                             "(the file is left as it was)")
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


def wrapped(text: str, indent: int = 0, hang: int = 2) -> list[str]:
    """``text`` in lines of at most :data:`WIDTH` characters."""
    return textwrap.wrap(text, WIDTH, initial_indent=" " * indent, subsequent_indent=" " * (indent + hang),
                         break_on_hyphens=False, break_long_words=False)


def cell_text(c: Prediction, base: float | None, ranged: bool) -> str:
    """One cell of the table: ``646 (614-682) 1.00x t``; ``= sequential`` for another topology
    on one rank, ``not modelled``, or ``-`` where the topology does not run at that size."""
    if sequential_in_name_only(c) and c.env_steps_per_s:
        return "= sequential"
    if c.env_steps_per_s is None:
        return "not modelled" if (c.refused or "").startswith("not modelled") else "-"
    shown = ranged and c.low is not None and c.high != c.low
    spread = f" ({fmt_rate(c.low)}-{fmt_rate(c.high)})" if shown else ""
    speed = f" {c.env_steps_per_s / base:.2f}x" if base else ""
    return f"{fmt_rate(c.env_steps_per_s)}{spread}{speed} {BOUND_CODES.get(c.bound, '?')}"


def table(cells: list[Prediction], ranks: list[int]) -> list[str]:
    """The predicted env steps/s of each topology (rows) at each size (columns), with each
    figure's range from the probe's spread, the speedup over sequential on one rank and what
    bounds it; the ranges are left out where the table would be wider than :data:`WIDTH`."""
    base = next((c.env_steps_per_s for c in cells if c.topology == "sequential" and c.ranks == 1
                 and c.env_steps_per_s), None)
    by = {(c.label, c.ranks): c for c in cells}
    header = ["topology", *(plural(n, "rank") for n in ranks)]
    for ranged in (True, False):
        rows = [[name, *(cell_text(by[(name, n)], base, ranged) for n in ranks)]
                for name in dict.fromkeys(c.label for c in cells)]
        lines = aligned(header, rows)
        if max(map(len, lines)) <= WIDTH:
            break
    title = ("Predicted env steps/s" + (" (range from the probe's spread)" if ranged else "")
             + ", speedup over sequential on 1 rank, and what bounds it:")
    shown = {cell for row in rows for cell in row[1:]}
    key = ["bound: s simulators, l learner, x exchange, t stepping and learning in turn"]
    if "= sequential" in shown:
        key.append("= sequential: on 1 rank the topology is sequential under another name "
                   "(never recommended)")
    if "-" in shown:
        key.append("-: the topology does not run at that size")
    return [*wrapped(title), "", *lines, "", *(line for text in key for line in wrapped(text, 2))]


def refusal_lines(cells: list[Prediction], largest: int) -> list[str]:
    """Why each topology that does not run at the largest size does not, wrapped."""
    refusals = sorted({(c.label, c.refused) for c in cells if c.refused and c.ranks == largest
                       and not c.refused.startswith("not modelled")})
    if not refusals:
        return []
    out = ["", f"Not run on {plural(largest, 'rank')}:"]
    for name, why in refusals:
        out += wrapped(f"- {name}: {why}", 2, 2)
    return out


def recommend(cells: list[Prediction]) -> str:
    best = recommended(cells)
    if best is None:
        return "none: no topology runs with this config at these sizes"
    seq = next((c for c in cells if c.topology == "sequential" and c.env_steps_per_s), None)
    gain = (f", {best.env_steps_per_s / seq.env_steps_per_s:.1f}x sequential"
            if seq and best.topology != "sequential" else "")
    bound = best.bound if best.bound.startswith("stepping") else f"bound by the {best.bound}"
    games = "" if best.games is None else f" with env.num_envs={best.games}"
    return (f"topology={best.topology} on {plural(best.ranks, 'rank')}{games} "
            f"({fmt_rate(best.env_steps_per_s)} env steps/s{gain}; {bound})")


def plan_path(out: str | None, cfg: DictConfig, now: datetime) -> Path:
    """Where plan.json goes: ``--out`` (a directory, existing or written with a trailing ``/``:
    plan.json in it), else :data:`PLAN_DIR` under the current directory - beside the runs'
    ``outputs/``, never the current directory itself."""
    if out is None:
        return Path(PLAN_DIR.format(now=now, algo=cfg.algo.name, env=cfg.env.name)) / "plan.json"
    return out_path(out)


def out_path(out: str) -> Path:
    """plan.json's path for ``--out OUT``: in OUT if it is a directory or ends with ``/``."""
    path = Path(out).expanduser()
    return path / "plan.json" if out.endswith("/") or path.is_dir() else path


def check_request(args: argparse.Namespace, overrides: list[str]
                  ) -> tuple[list[str], list[int] | None, list[int] | None]:
    """The topologies, sizes and games asked for; :class:`ConfigError` in one line for bad input."""
    from drlmpi.config.errors import ConfigError, did_you_mean
    from drlmpi.run.arguments import check_command_line

    known = topology_names()  # the planner's own options first: checked without importing torch
    topologies = [t for t in (args.topologies or ",".join(known)).split(",") if t]
    unknown = sorted(set(topologies) - set(known))
    if unknown:
        hint = did_you_mean(unknown[0], known)
        raise ConfigError(f"--topologies: unknown topology {', '.join(unknown)} ({hint + ' ' if hint else ''}"
                          f"one of {', '.join(known)})")
    ranks = whole_numbers("--ranks", args.ranks, "world sizes") if args.ranks else None
    games = whole_numbers("--games", args.games, "games per simulator") if args.games else None
    if not args.seconds > 0 or args.seconds == float("inf"):  # nan too: a probe that never ends
        raise ConfigError(f"--seconds {args.seconds:g}: must be a finite number > 0")
    check_compared(args.compare)
    if args.again:
        raise ConfigError("--again predicts a saved plan's cells again: give the plan with --plan FILE")
    if args.out is not None:
        from drlmpi.config.inputs import check_writable

        check_writable("--out", str(out_path(args.out).parent))
    check_command_line(overrides)  # registers every topology (imports their classes)
    return topologies, ranks, games


def whole_numbers(option: str, text: str, what: str) -> list[int]:
    """``text`` (``1,2,4``) as sorted distinct numbers >= 1; :class:`ConfigError` in one line if not."""
    from drlmpi.config.errors import ConfigError

    try:
        numbers = sorted({int(r) for r in text.split(",") if r.strip()})
    except ValueError:
        raise ConfigError(f"{option} {text}: comma-separated whole numbers, e.g. 1,2,4") from None
    if not numbers or min(numbers) < 1:
        raise ConfigError(f"{option} {text}: {what} must be >= 1")
    return numbers


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.plan is not None:
        return compare_saved(args.plan, args.compare, overrides, again=args.again)
    from drlmpi.config.errors import ConfigError

    try:
        topologies, ranks, games = check_request(args, overrides)
        cfgs, refused = configs(overrides, topologies)
        if not cfgs:
            raise ConfigError(f"no topology could be composed: {next(iter(refused.values()))}")
        first = next(iter(cfgs.values()))
        from drlmpi.config.inputs import check_writable
        from drlmpi.planner.probe import smallest_world
        from drlmpi.run.preflight import make_plan

        make_plan(first, smallest_world(first))  # the config itself: one line if it is wrong
        out = plan_path(args.out, first, datetime.now())
        if args.out is None:  # --out was checked with the planner's own options
            check_writable("the plan's directory", str(out.parent))
        from drlmpi.job_control.launchers import mpiexec_command

        mpiexec_command()  # the probes' and calibration's launch command (DRLMPI_MPIEXEC)
    except (ConfigError, ValueError) as exc:
        print(f"drlmpi.plan: error: {exc}", file=sys.stderr)
        return 2
    from drlmpi.job_control.process import set_thread_counts

    end_on_sigterm()  # a launch under way is ended with its ranks
    set_thread_counts(first.get("threads_per_rank"))  # as each rank of the run would
    import torch

    torch.set_num_threads(int(first.get("threads_per_rank") or 1))
    from drlmpi.job_control.process import usable_cpus
    from drlmpi.planner.calibration import calibrate
    from drlmpi.planner.host import DRIFT_TOLERANCE, busy_cores, describe_busy, describe_drift
    from drlmpi.planner.probe import probe as run_probe
    from drlmpi.planner.probe import remeasure

    cpus = usable_cpus()
    busy = busy_cores(cpus)
    busy_warning = describe_busy(busy, len(cpus))
    if busy_warning:
        print(f"drlmpi.plan: {busy_warning[0].lower()}{busy_warning[1:]}", file=sys.stderr, flush=True)
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
    cells = (plan_cells(cfgs, why, p, calibrations) if games is None
             else games_cells(overrides, topologies, ranks, games, p, calibrations))
    lines = [*probe_lines(p), "", *calibration_lines(calibrations), "", *table(cells, ranks),
             *refusal_lines(cells, max(ranks))]
    verdict = recommend(cells)
    lines += ["", *wrapped(f"Recommendation: {verdict}."), *wrapped(describe_drift(drift, DRIFT_TOLERANCE))]
    if busy_warning:
        lines += wrapped(busy_warning)
    for note in p.notes:
        lines += wrapped(f"Note: {note}")
    config = {**config_of(first), **({"num_envs": None} if games else {})}  # --games: every setting
    result: dict[str, Any] = {"overrides": overrides, "config": config, "games": games, "probe": p.to_json(),
                              "calibration": calibrations, "drift": drift, "busy_cores": busy,
                              "cells": [c.to_json() for c in cells], "recommendation": verdict}
    if args.compare:
        found, _ = measured(args.compare, result["config"])
        compared, result["comparison"] = comparison(cells, found)
        lines += ["", "Measured (--compare):", "", *compared]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    lines += ["", *wrapped(f"Plan written to {out}"),
              *wrapped(f"(next to measured runs: python -m drlmpi.plan --plan {out} --compare RUN_DIR ...)")]
    print("\n".join(lines), flush=True)
    return 0


def probe_lines(p: Any) -> list[str]:
    """What the probe measured, a line a quantity."""
    updates = (f"{p.update_at(p.batch_size) * 1e3:.3f} ms at batch {p.batch_size} "
               f"({p.learner_update_s * 1e3:.3f} ms through the run's learner), "
               f"{p.updates_per_step:.2f} per env step" if p.update_s else "none (no learner)")
    spread = ", ".join(f"{k} +-{v:.0%}" for k, v in p.spread.items())
    rows = [("env step", f"{p.sim_step_s * 1e3:.3f} ms with acting, {p.env_step_s * 1e3:.3f} ms without"),
            ("update", updates),
            ("messages", f"{p.latency_s * 1e6:.1f} us + {p.bandwidth_bytes_per_s / 1e9:,.2f} GB/s "
                         f"({p.comm_source})"),
            ("repeat spread", spread or "not measured")]
    lines = [f"Probe ({p.probe_seconds:.0f} s, {plural(p.cores, 'core')}, learner on {p.device}):"]
    for name, text in rows:
        lines += wrapped(f"{name:<15}{text}", 2, 15)
    return lines


def calibration_lines(calibrations: dict[str, dict]) -> list[str]:
    """The calibration's jobs: each topology's measured and modelled env steps/s over the second
    half of its job at its largest size, the load factor between them, and its warm-up."""
    if not calibrations:
        return ["Calibration: none (--no-calibrate, or no topology runs on more than one rank here)."]
    seconds = sum(c.get('seconds', 0) for c in calibrations.values())
    rows, failed = [], []
    for name, c in calibrations.items():
        if "error" in c:
            why = f"- {name} on {plural(c['ranks'], 'rank')}: not calibrated ({c['error']})"
            failed += wrapped(why, 2, 2)
        else:  # a first job measured again (a load far from 1), the largest size, a smaller one
            jobs = [(f"{name}*", c["first"])] if "first" in c else []
            jobs += [(name, q) for q in [c, *(c.get("points") or ())]]
            rows += [[label, str(q["ranks"]), fmt_rate(q["measured"]), fmt_rate(q["modelled"]),
                      f"x{q['load']:.2f}", f"{q.get('warmup_s', 0.0):.1f} s"] for label, q in jobs]
    lines = wrapped(f"Calibration ({seconds:.0f} s, one short job per topology at its largest size, "
                    f"where the load lay outside x{RECHECK[0]:g}-x{RECHECK[1]:g} again alone at that size "
                    "and at half of it; env steps/s over each job's second half, and the seconds its start "
                    "cost beyond that pace):")
    if rows:
        lines += aligned(["topology", "ranks", "measured", "modelled", "load", "warm-up"], rows,
                         right={1, 2, 3, 4, 5})
    if any("first" in c for c in calibrations.values()):
        lines += wrapped("* its first job, in the launch shared with the other topologies' jobs (the job "
                         "again alone stands for that size)", 2, 4)
    return lines + failed


if __name__ == "__main__":
    sys.exit(main())
