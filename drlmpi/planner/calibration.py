"""The planner's calibration: what a probe in one process cannot see, measured in a real job.

A full job loads the machine in ways one process does not: ranks waiting inside MPI poll, every
core busy lowers the clock, caches and memory bandwidth are shared, and a collective waits for its
slowest rank. For each topology the calibration runs ONE short real job (``4 x --seconds`` of
training whatever the config's step budget, at least :data:`IMAGE_JOB_SECONDS` for image
observations; no evaluation) at the largest size asked for, all of them in a single MPI launch
(:mod:`drlmpi.planner.jobs`), and compares its env steps/s over the job's second half (its
summary's ``second_half``: :func:`steady`) with the model's over the same steps. The ratio is the
topology's load factor at that size; the model spreads it over the smaller sizes
(:func:`drlmpi.planner.model.load_at`). A load far from 1 (outside
:data:`~drlmpi.planner.model.RECHECK`) need not spread so, nor belong to the size: that topology's
job runs again in a launch of its own, at the same size and at half of it, and the model goes
through both (:func:`calibrate`). The job's seconds beyond what the loaded model gives its steps
are its warm-up (graphs captured, kernels chosen, the first rollout or round: ``warmup_s``), which
every prediction of that topology pays once - a run shorter than the job's first half
(``warmup_steps``, where the warm-up fell) in that share. A job's first seconds can run
at a third of its later pace (PPO Breakout, central on 16 ranks), so a load measured over the
whole of a short job mistook the warm-up for the pace. What the job's ranks spent per update and
per step is kept beside it (``plan.json``, "calibration"), so a user can see where the load went.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from drlmpi.planner import plural
from drlmpi.planner.cells import topology_class
from drlmpi.planner.jobs import calibration_jobs, launch
from drlmpi.planner.model import RECHECK, bounded, model_seconds, paced_seconds
from drlmpi.sweep.jobs import read_summary

#: seconds of training of each calibration job, per --seconds
SECONDS_PER_JOB = 4.0
#: the least seconds of training of a calibration job for image observations: a CNN learner's
#: first seconds capture its graphs and let cuDNN choose kernels at each batch size (PPO Breakout
#: on 16 ranks: 2,100 env steps/s over its first 6 s, 7,000-8,800 later)
IMAGE_JOB_SECONDS = 30.0


def job_seconds(seconds: float, image: bool) -> float:
    """Seconds of training of each calibration job at ``--seconds`` (``image``: the config's
    observations are images)."""
    return max(SECONDS_PER_JOB * seconds, IMAGE_JOB_SECONDS if image else 0.0)


def steady(summary: dict[str, Any]) -> tuple[float, float]:
    """(env steps/s over the job's second half, the env steps where that half began): its
    ``summary.json``'s ``second_half`` (:func:`drlmpi.outputs.pace.second_half`); the whole job's
    rate and 0 where its episodes did not span the second half."""
    half = summary.get("second_half")
    if not half:
        return float(summary["env_steps_per_s"]), 0.0
    return float(half["env_steps_per_s"]), float(half["from_env_steps"])


def sizes_to_calibrate(cfgs: dict[str, Any], why: dict[tuple[str, int], str | None]) -> dict[str, int]:
    """Each modelled topology's largest size that it accepts (``why``: each cell's refusal,
    :func:`drlmpi.planner.cells.cell_refusals`), if more than one rank; and a topology that runs
    only on one rank (sequential) there, once: its job calibrates every cell of one rank
    (:func:`drlmpi.planner.model.one_rank`), which is one process stepping and learning in turn
    whatever its topology."""
    from drlmpi.planner.model import modelled

    sizes = {}
    for name, cfg in cfgs.items():
        if not modelled(topology_class(cfg)):
            continue
        fits = [n for (topology, n), reason in why.items() if topology == name and reason is None]
        if any(n > 1 for n in fits):
            sizes[name] = max(fits)
        elif fits and 1 not in sizes.values():
            sizes[name] = 1
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


def recheck_sizes(first: dict[str, dict[str, Any]], why: dict[tuple[str, int], str | None]) -> dict[str, int]:
    """Topologies whose load at their largest size N lies outside :data:`RECHECK`: the largest
    size of more than one rank, at most N / 2, that the plan asks for and they accept."""
    sizes = {}
    for name, c in first.items():
        if "load" not in c or RECHECK[0] <= c["load"] <= RECHECK[1]:
            continue
        fits = [n for (topology, n), reason in why.items()
                if topology == name and reason is None and 1 < n <= c["ranks"] // 2]
        if fits:
            sizes[name] = max(fits)
    return sizes


def calibrate(cfgs: dict[str, Any], overrides: list[str], why: dict[tuple[str, int], str | None], p: Any,
              seconds: float, root: Path) -> dict[str, dict[str, Any]]:
    """Per topology: ``{"ranks", "measured", "modelled", "load", "warmup_s", "warmup_steps", "job_rate",
    "job_seconds", "seconds", "env_steps", "in_job"}`` (``measured`` and ``modelled``: env steps/s
    over the job's second half; ``job_rate`` over the whole job), or ``{"ranks", "error"}``
    where its job did not finish. A load outside :data:`RECHECK` is measured again in a launch
    of that topology's own: first at the same size, then at the largest size up to half of it
    (:func:`recheck_sizes`). The job again at the largest size stands for it (the first one's
    figures kept as ``"first"``): the first launch runs every topology's job one after another,
    and a job alone tells whether a load far from 1 belongs to the size or to that launch
    (allgather's 16 CUDA learners on one GPU calibrated x0.16 after the other topologies' jobs,
    while their measured cell, a launch of its own, ran 2.8 times as fast from its first rows:
    the launch's jobs then ran unbound where the cell was pinned, which jobs.bind_for_job ended).
    The smaller size's job is kept as ``"points"`` (the same keys). A job
    of the second launch that did not finish leaves the first's figures."""
    sizes = sizes_to_calibrate(cfgs, why)
    out = dict(zip(sizes, _run_jobs(list(sizes.items()), cfgs, overrides, p, seconds, root, "calibration")))
    for name, half in recheck_sizes(out, why).items():
        jobs = [(name, out[name]["ranks"]), (name, half)]
        what = f"calibration of {name} again, alone and at a smaller size (its first load stands)"
        top, smaller = _run_jobs(jobs, cfgs, overrides, p, seconds, root / f"again_{name}", what)
        if "load" in top:
            first = out[name]
            out[name] = {**top, "seconds": first["seconds"] + top["seconds"], "first": first}
        if "load" in smaller:
            out[name]["seconds"] += smaller["seconds"]
            out[name]["points"] = [smaller]
    return out


def _run_jobs(cells: list[tuple[str, int]], cfgs: dict[str, Any], overrides: list[str], p: Any,
              seconds: float, root: Path, what: str) -> list[dict[str, Any]]:
    """One calibration job per (topology, size) of ``cells``, in one launch in that order, each
    against the model (:func:`calibrate`'s keys); ``what``: the launch's name in a failure's line."""
    train_s = job_seconds(seconds, p.image)
    jobs = calibration_jobs(overrides, cells, train_s, root)
    started = time.perf_counter()
    print(f"drlmpi.plan: {what}: {plural(len(jobs), 'job')} of {train_s:g} s of training, one after another "
          f"in one launch of {plural(max(n for _, n in cells), 'rank')} ...", file=sys.stderr, flush=True)

    def ended(run_dir: str, finished: bool) -> None:  # a line as each job ends: minutes pass
        name, n = next(cell for cell, job in zip(cells, jobs) if job["run_dir"] == run_dir)
        summary = read_summary(Path(run_dir)) if finished else None
        rate = f"{steady(summary)[0]:,.0f} env steps/s" if summary and summary.get("env_steps_per_s") else \
            "did not finish"
        print(f"drlmpi.plan:   {name} on {plural(n, 'rank')}: {rate} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)

    try:
        done = set(launch(jobs, timeout_s=120 + (90 + train_s) * len(jobs), on_job=ended))
    except RuntimeError as exc:
        print(f"drlmpi.plan: {what} failed: {exc}", file=sys.stderr, flush=True)
        return [{"ranks": n, "error": str(exc)} for _, n in cells]
    took = (time.perf_counter() - started) / max(1, len(jobs))
    out: list[dict[str, Any]] = []
    for (name, n), job in zip(cells, jobs):
        summary = read_summary(Path(job["run_dir"])) if job["run_dir"] in done else None
        if not summary or not summary.get("env_steps_per_s"):
            out.append({"ranks": n, "error": "the calibration job did not finish"})
            continue
        cls = topology_class(cfgs[name])
        model = cls.pace(n, p, cls.settings_of(cfgs[name].topology))
        total = float(summary["env_steps"])
        measured, begun = steady(summary)
        whole = model_seconds(model, p, total)
        if begun:  # the job's second half: its pace, no wait for a first round in it
            paced = paced_seconds(model, p, total) - paced_seconds(model, p, begun)
            modelled = (total - begun) / max(1e-12, paced)
        else:  # the whole job: its start too
            modelled = total / max(1e-12, whole)
        job_s = float(summary.get("train_seconds") or 0.0)
        out.append({"ranks": n, "measured": measured, "modelled": modelled, "load": measured / modelled,
                    "warmup_s": max(0.0, job_s - whole / bounded(measured / modelled)),
                    "warmup_steps": int(begun or total),
                    "job_rate": float(summary["env_steps_per_s"]), "job_seconds": job_s,
                    "seconds": took, "env_steps": int(total), "in_job": in_job_costs(summary)})
    return out
