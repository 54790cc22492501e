"""The planner's calibration: what a probe in one process cannot see, measured in a real job.

A full job loads the machine in ways one process does not: ranks waiting inside MPI poll, every
core busy lowers the clock, caches and memory bandwidth are shared, and a collective waits for its
slowest rank. For each topology the calibration runs ONE short real job (``4 x --seconds`` of
training whatever the config's step budget, no evaluation) at the largest size asked for, all
of them in a single MPI launch
(:mod:`drlmpi.planner.jobs`), and compares its measured env steps/s with the model's prediction
at that size from the probe alone. The ratio is the topology's load factor at that size; the
model spreads it over the smaller sizes (:func:`drlmpi.planner.model.load_at`). What the job's
ranks spent per update and per step is kept beside it (``plan.json``, "calibration"), so a
user can see where the load went.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from drlmpi.planner.cells import topology_class
from drlmpi.planner.jobs import calibration_jobs, launch
from drlmpi.planner.model import predict
from drlmpi.sweep.jobs import read_summary

#: seconds of training of each calibration job, per --seconds
SECONDS_PER_JOB = 4.0


def sizes_to_calibrate(cfgs: dict[str, Any], why: dict[tuple[str, int], str | None]) -> dict[str, int]:
    """Each modelled topology's largest size that it accepts (``why``: each cell's refusal,
    :func:`drlmpi.planner.cells.cell_refusals`), if more than one rank."""
    from drlmpi.planner.model import modelled

    sizes = {}
    for name, cfg in cfgs.items():
        if not modelled(topology_class(cfg)):
            continue
        fits = [n for (topology, n), reason in why.items() if topology == name and n > 1 and reason is None]
        if fits:
            sizes[name] = max(fits)
    return sizes


def in_job_costs(summary: dict[str, Any]) -> dict[str, float]:
    """What the job's ranks spent: seconds per update on the learning ranks, per env step on
    the simulating ranks, and the share of wall time inside MPI."""
    ranks = summary.get("per_rank") or []
    learning = [r["learn_s"] / r["updates"] for r in ranks if r.get("updates")]
    stepping = [r["simulate_s"] / r["env_steps"] for r in ranks if r.get("env_steps") and r.get("simulate_s")]
    out = {"mpi_wait_share": float(summary.get("mpi_wait_share") or 0.0)}
    if learning:
        out["update_s"] = sum(learning) / len(learning)
    if stepping:
        out["sim_step_s"] = sum(stepping) / len(stepping)
    return out


def calibrate(cfgs: dict[str, Any], overrides: list[str], why: dict[tuple[str, int], str | None], p: Any,
              seconds: float, root: Path) -> dict[str, dict[str, Any]]:
    """Per topology: ``{"ranks", "measured", "modelled", "load", "seconds", "in_job"}`` (or
    ``{"ranks", "error"}`` where its job did not finish)."""

    sizes = sizes_to_calibrate(cfgs, why)
    jobs = calibration_jobs(overrides, sizes, SECONDS_PER_JOB * seconds, root)
    started = time.perf_counter()
    try:
        done = set(launch(jobs, timeout_s=120 + 90 * len(jobs)))
    except RuntimeError as exc:
        print(f"drlmpi.plan: calibration failed: {exc}", file=sys.stderr, flush=True)
        return {name: {"ranks": n, "error": str(exc)} for name, n in sizes.items()}
    took = (time.perf_counter() - started) / max(1, len(jobs))
    out: dict[str, dict[str, Any]] = {}
    for (name, n), job in zip(sizes.items(), jobs):
        summary = read_summary(Path(job["run_dir"])) if job["run_dir"] in done else None
        if not summary or not summary.get("env_steps_per_s"):
            out[name] = {"ranks": n, "error": "the calibration job did not finish"}
            continue
        modelled = predict(topology_class(cfgs[name]), n, p, cfgs[name],
                           budget=int(summary["env_steps"])).env_steps_per_s
        measured = float(summary["env_steps_per_s"])
        out[name] = {"ranks": n, "measured": measured, "modelled": modelled, "load": measured / modelled,
                     "seconds": took, "env_steps": int(summary["env_steps"]),
                     "in_job": in_job_costs(summary)}
    return out
