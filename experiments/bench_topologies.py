"""Throughput and MPI waiting of every drlmpi topology, per world size, at a fixed step budget.

Run from the repository root::

    python experiments/bench_topologies.py                          # sizes 1 2 3 4, 20000 steps
    python experiments/bench_topologies.py --sizes 1 2 --steps 3000  # a quick check
    python experiments/bench_topologies.py --sim-cost-ms 1          # simulator-bound regime
    # Open MPI (as root, more ranks than cores allowed):
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 python experiments/bench_topologies.py \
        --launcher "mpirun --oversubscribe -n {n}" --sizes 1 2 4 8 16

For every topology variant (``--variants``; default all eight: ``sequential``, ``p2p``,
``star``, ``star_gradients`` (``topology.payload=gradients``), ``async``, ``async_free``
(``topology.utd_mode=free``), ``allgather``, ``allgather_gather`` (``topology.reduce=allgather``))
and every world size of ``--sizes`` the topology accepts (the others are skipped with a line
saying why; accepted sizes are read from the topology class), ONE job runs, one at a time, in its
own process group with a timeout::

    <launcher> python -m mpi4py -m drlmpi algo=A env=E topology=T <variant overrides>
        seed=S run.max_env_steps=STEPS run.stop_on_solve=false run.eval_every=10**9
        run.progress_every_s=0 env.sim_cost_ms=C <--extra ...> hydra.run.dir=<out-dir>/runs/<variant>_n<N>

``--launcher`` is a template with ``{n}`` (default ``mpiexec -n {n}``); a 1-rank job runs without
a launcher (MPI singleton) unless ``--launcher-for-one``. The script reads each job's
``summary.json``. ``--repeats R`` runs the whole sweep R times, round-robin (so drifting load
hits every job alike), and shows the median-throughput run of each (variant, size).

Reading the output (stdout table, ``<out-dir>/bench_topologies.md``, ``--json``):

* ``env steps/s``, ``updates/s``: job-wide totals / the learner's training clock (evaluation
  excluded; with ``run.eval_every`` at 1e9 no evaluation runs). What an update is differs:
  ``allgather`` does ``updates_per_step / N`` synchronised updates per job-wide step, each
  averaging N minibatches; ``async_free`` trains flat out whatever the data rate.
* ``wait mean`` / ``wait r0``: the share of wall time spent inside MPI calls, mean over ranks and
  for rank 0 (the learner, server or root peer). A simulator waiting for weights shows here.
* ``lag mean/max``: policy lag in learner updates (async only; ``-`` elsewhere).
* ``speedup``: env steps/s divided by the ``sequential`` job's of the same invocation (the
  reference; ``-`` if it did not run or failed). Fixed step budgets, so this is throughput, not
  time to the reward threshold.
* ``busy r0/r1/...``: per rank (simulate + learn seconds) / wall seconds; a rank below 0.2 is
  flagged idle by drlmpi itself (``idle_ranks`` in the JSON).
* ``status``: ``ok`` or ``FAILED rc=..`` (``timeout`` when killed); failed jobs stay in the table
  and the JSON with the tail of their stderr, and the script exits 1 at the end.

Numbers from an oversubscribed machine (more ranks than free cores) measure contention, not the
topology: compare sizes up to the core count, and rerun the ``sequential`` reference in the same
invocation (it is in the default variant list) rather than across machines.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "outputs" / "bench_topologies"
NO_EVAL_EVERY = 1_000_000_000  # run.eval_every large enough that no evaluation runs
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                  "PYTHONUNBUFFERED": "1"}
TAIL_CHARS = 2000


@dataclass(frozen=True)
class Variant:
    """One topology configuration: a name, the Hydra topology group and extra overrides."""

    name: str
    topology: str
    overrides: tuple[str, ...] = ()


VARIANTS: tuple[Variant, ...] = (
    Variant("sequential", "sequential"),
    Variant("p2p", "p2p"),
    Variant("star", "star"),
    Variant("star_gradients", "star", ("topology.payload=gradients",)),
    Variant("async", "async"),
    Variant("async_free", "async", ("topology.utd_mode=free",)),
    Variant("allgather", "allgather"),
    Variant("allgather_gather", "allgather", ("topology.reduce=allgather",)),
)
# Used only if the topology class cannot be imported: (min ranks, max ranks or None).
FALLBACK_SIZES: dict[str, tuple[int, int | None]] = {
    "sequential": (1, 1), "p2p": (2, 2), "star": (2, None), "async": (2, None), "allgather": (1, None),
}


@dataclass
class Job:
    """One (variant, world size) job and what came of it."""

    variant: str
    topology: str
    ranks: int
    repeat: int = 0
    status: str = "pending"  # ok | failed | timeout | skipped
    reason: str = ""
    command: list[str] = field(default_factory=list)
    returncode: int | None = None
    seconds: float = 0.0
    run_dir: str = ""
    stderr_tail: str = ""
    stdout_tail: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "timeout")


# ---------------------------------------------------------------------------------------------
# Which sizes a topology takes


def topology_sizes(topology: str) -> tuple[int, int | None]:
    """``(min_ranks, max_ranks)`` of a topology, read from the class its YAML names."""
    path = REPO_ROOT / "conf" / "topology" / f"{topology}.yaml"
    try:
        target = next(line.split(":", 1)[1].strip() for line in path.read_text().splitlines()
                      if line.startswith("_target_:"))
        module_name, _, class_name = target.rpartition(".")
        cls = getattr(importlib.import_module(module_name), class_name)
        return int(cls.min_ranks), (None if cls.max_ranks is None else int(cls.max_ranks))
    except Exception:  # noqa: BLE001 (any failure: use the table)
        return FALLBACK_SIZES[topology]


def size_refusal(topology: str, ranks: int, limits: tuple[int, int | None]) -> str | None:
    """Why ``topology`` cannot run on ``ranks`` ranks (``None`` if it can)."""
    low, high = limits
    if ranks < low or (high is not None and ranks > high):
        accepted = f"exactly {low}" if low == high else (f"at least {low}" if high is None
                                                         else f"{low} to {high}")
        return f"topology={topology} needs {accepted} rank(s)"
    return None


# ---------------------------------------------------------------------------------------------
# Running one job


def job_command(args: argparse.Namespace, variant: Variant, ranks: int, run_dir: Path) -> list[str]:
    """The full command line of one job."""
    launcher: list[str] = []
    if ranks > 1 or args.launcher_for_one:
        launcher = [token.format(n=ranks) for token in shlex.split(args.launcher)]
    overrides = [
        f"algo={args.algo}", f"env={args.env}", f"topology={variant.topology}", *variant.overrides,
        f"seed={args.seed}", f"run.max_env_steps={args.steps}", "run.stop_on_solve=false",
        f"run.eval_every={NO_EVAL_EVERY}", "run.progress_every_s=0",
        f"env.sim_cost_ms={args.sim_cost_ms:g}", *args.extra, f"hydra.run.dir={run_dir}",
    ]
    return [*launcher, args.python, "-m", "mpi4py", "-m", "drlmpi", *overrides]


def run_job(job: Job, command: list[str], run_dir: Path, timeout: float) -> None:
    """Run ``command`` in its own session; fill ``job`` with the outcome and the summary."""
    if run_dir.exists():
        shutil.rmtree(run_dir)  # never read a stale summary.json from an earlier invocation
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    job.command = command
    job.run_dir = str(run_dir)
    env = {**os.environ, **ONE_THREAD_ENV, "MPIEXEC_TIMEOUT": str(int(timeout) + 30)}
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the job's own process group (launcher + ranks)
        stdout, stderr = proc.communicate()
        timed_out = True
    job.seconds = time.perf_counter() - start
    job.returncode = proc.returncode
    job.stderr_tail = stderr[-TAIL_CHARS:]
    job.stdout_tail = stdout[-TAIL_CHARS:]
    summary_path = run_dir / "summary.json"
    if timed_out:
        job.status, job.reason = "timeout", f"killed after {timeout:g} s"
    elif proc.returncode != 0:
        job.status, job.reason = "failed", f"exit code {proc.returncode}"
    elif not summary_path.is_file():
        job.status, job.reason = "failed", "exit code 0 but no summary.json"
    else:
        job.status = "ok"
        job.summary = json.loads(summary_path.read_text())
        job.metrics = job_metrics(job.summary)
        job.stdout_tail = job.stderr_tail = ""  # keep the JSON small for good runs


def job_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """The table's figures from one ``summary.json``."""
    per_rank = sorted(summary.get("per_rank", []), key=lambda r: r["rank"])
    rank0 = next((r for r in per_rank if r["rank"] == 0), None)
    return {
        "env_steps": summary["env_steps"],
        "updates": summary["updates"],
        "env_steps_per_s": summary["env_steps_per_s"],
        "updates_per_s": summary["updates_per_s"],
        "updates_per_env_step": summary.get("updates_per_env_step"),
        "mpi_wait_share_mean": summary["mpi_wait_share"],
        "mpi_wait_share_rank0": rank0["mpi_wait_share"] if rank0 else None,
        "policy_lag_mean": summary.get("policy_lag_mean"),
        "policy_lag_max": summary.get("policy_lag_max"),
        "train_seconds": summary["train_seconds"],
        "wall_seconds": summary["wall_seconds"],
        "stop_reason": summary.get("stop_reason"),
        "busy_share_per_rank": [r["busy_share"] for r in per_rank],
        "mpi_wait_share_per_rank": [r["mpi_wait_share"] for r in per_rank],
        "roles": [r["role"] for r in per_rank],
        "idle_ranks": summary.get("idle_ranks", []),
        "topology_stats": summary.get("topology_stats", {}),
    }


# ---------------------------------------------------------------------------------------------
# Reporting

HEADERS = ("topology", "ranks", "env steps/s", "updates/s", "wait mean", "wait r0", "lag mean/max",
           "train s", "speedup", "busy r0/r1/...", "status")


def representative(group: list[Job]) -> Job:
    """The run of a (variant, size) group the table shows: a failed one if any failed, else the
    one with the median env steps/s (the lower median for an even count)."""
    failed = [j for j in group if j.status != "ok"]
    if failed:
        return failed[0]
    ranked = sorted(group, key=lambda j: j.metrics["env_steps_per_s"])
    return ranked[(len(ranked) - 1) // 2]


def grouped(jobs: list[Job]) -> list[list[Job]]:
    """Jobs grouped by (variant, ranks), in first-run order, skipped ones left out."""
    groups: dict[tuple[str, int], list[Job]] = {}
    for job in jobs:
        if job.status != "skipped":
            groups.setdefault((job.variant, job.ranks), []).append(job)
    return list(groups.values())


def table_rows(jobs: list[Job]) -> list[list[str]]:
    """One row of strings per (variant, size) that ran (skipped sizes are listed separately).

    With ``--repeats`` > 1 the row is the median-throughput repeat and ``status`` gives the
    spread of env steps/s over the repeats, ``(max - min) / median``.
    """
    shown = [(representative(g), g) for g in grouped(jobs)]
    reference = next((j.metrics["env_steps_per_s"] for j, _ in shown
                      if j.variant == "sequential" and j.status == "ok"), None)
    rows = []
    for job, group in shown:
        if job.status != "ok":
            status = "timeout" if job.status == "timeout" else f"FAILED rc={job.returncode}"
            if len(group) > 1:
                status += f" ({sum(j.status != 'ok' for j in group)}/{len(group)} runs)"
            rows.append([job.variant, str(job.ranks), *["-"] * 8, status])
            continue
        status = "ok"
        if len(group) > 1:
            rates = [j.metrics["env_steps_per_s"] for j in group]
            spread = (max(rates) - min(rates)) / job.metrics["env_steps_per_s"]
            status = f"ok x{len(group)}, spread {spread:.0%}"
        m = job.metrics
        lag = ("-" if m["policy_lag_mean"] is None
               else f"{m['policy_lag_mean']:.1f}/{m['policy_lag_max']}")
        speedup = f"{m['env_steps_per_s'] / reference:.2f}x" if reference else "-"
        rank0 = m["mpi_wait_share_rank0"]
        rows.append([
            job.variant, str(job.ranks), f"{m['env_steps_per_s']:,.0f}", f"{m['updates_per_s']:,.0f}",
            f"{m['mpi_wait_share_mean']:.1%}", "-" if rank0 is None else f"{rank0:.1%}", lag,
            f"{m['train_seconds']:.1f}", speedup,
            "/".join(f"{b:.2f}" for b in m["busy_share_per_rank"]), status,
        ])
    return rows


def text_table(rows: list[list[str]]) -> str:
    """A fixed-width table for the terminal."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADERS)]
    left = {0, 9, 10}

    def fmt(cells: list[str] | tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt(HEADERS), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)])


def markdown(jobs: list[Job], rows: list[list[str]], meta: dict[str, Any]) -> str:
    """The Markdown report: context, table, skipped sizes, failures."""
    lines = [
        "# drlmpi topology throughput",
        "",
        f"- command: `{meta['command_line']}`",
        f"- date: {meta['date']}",
        f"- host: {meta['host']}, {meta['cpu_count']} cores (`os.cpu_count()`), "
        f"load average before {meta['load_average_before']}",
        f"- MPI library: {', '.join(meta['mpi_library']) or 'unknown (no job finished)'}",
        f"- launcher: `{meta['launcher']}` (1 rank: {meta['one_rank_launch']})",
        f"- job: algo={meta['algo']} env={meta['env']} steps={meta['steps']} "
        f"sim_cost_ms={meta['sim_cost_ms']:g} seed={meta['seed']} repeats={meta['repeats']} "
        f"extra={meta['extra'] or 'none'}",
        f"- versions: {meta['versions'] or 'unknown'}",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "|".join("---" if i in (0, 9, 10) else "---:" for i in range(len(HEADERS))) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
        "env steps/s and updates/s per training second; wait = share of wall time inside MPI calls "
        "(mean over ranks, rank 0); speedup = env steps/s / sequential's in this invocation; busy = "
        "(simulate + learn) / wall per rank.",
    ]
    skipped = [j for j in jobs if j.status == "skipped"]
    if skipped:
        lines += ["", "Skipped:", "", *(f"- {j.variant} on {j.ranks} rank(s): {j.reason}" for j in skipped)]
    failed = [j for j in jobs if j.failed]
    if failed:
        lines += ["", "## Failed jobs", ""]
        for j in failed:
            lines += [f"### {j.variant} on {j.ranks} rank(s), repeat {j.repeat}: {j.reason}", "",
                      f"`{shlex.join(j.command)}`", "", "```", j.stderr_tail.strip() or "(no stderr)",
                      "```", ""]
    return "\n".join(lines) + "\n"


def collect_meta(args: argparse.Namespace, jobs: list[Job], load_before: str) -> dict[str, Any]:
    """Context for the reports: command, machine, MPI library and versions from the summaries."""
    versions = [j.summary["versions"] for j in jobs if j.summary and "versions" in j.summary]
    mpi_libraries = sorted({v.get("mpi_library", "") for v in versions} - {""})
    first = versions[0] if versions else {}
    return {
        "command_line": shlex.join([sys.executable, *sys.argv]),
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "mpi_library": mpi_libraries,
        "versions": ", ".join(f"{k} {first[k]}" for k in ("python", "torch", "numpy", "mpi4py", "gymnasium")
                              if k in first),
        "launcher": args.launcher,
        "one_rank_launch": "launcher" if args.launcher_for_one else "singleton (no launcher)",
        "algo": args.algo, "env": args.env, "steps": args.steps, "sim_cost_ms": args.sim_cost_ms,
        "seed": args.seed, "repeats": args.repeats, "extra": args.extra, "timeout_s": args.timeout,
    }


def load_average() -> str:
    """The 1/5/15-minute load average, or ``n/a``."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    names = [v.name for v in VARIANTS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 3, 4], help="world sizes")
    parser.add_argument("--variants", nargs="+", default=names, choices=names, metavar="VARIANT",
                        help=f"topology variants to run (default all: {' '.join(names)})")
    parser.add_argument("--algo", default="dqn", help="Hydra algo group option (default dqn)")
    parser.add_argument("--env", default="cartpole", help="Hydra env group option (default cartpole)")
    parser.add_argument("--steps", type=int, default=20000, help="run.max_env_steps per job")
    parser.add_argument("--sim-cost-ms", type=float, default=0.0,
                        help="env.sim_cost_ms (CPU ms per env step; >= 1 for the simulator-bound regime)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the whole sweep this many times, round-robin; the table shows the "
                             "median-throughput run of each (variant, size) (default 1)")
    parser.add_argument("--extra", nargs="*", default=[], metavar="KEY=VALUE",
                        help="Hydra overrides appended to every job")
    parser.add_argument("--launcher", default="mpiexec -n {n}",
                        help="launcher template, {n} = ranks (e.g. 'mpirun --oversubscribe -n {n}')")
    parser.add_argument("--launcher-for-one", action="store_true",
                        help="start 1-rank jobs with the launcher too (default: MPI singleton)")
    parser.add_argument("--python", default=sys.executable, help="Python interpreter of the ranks")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per job before it is killed")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR,
                        help="run directories and reports (default outputs/bench_topologies)")
    parser.add_argument("--json", type=Path, default=None,
                        help="JSON report (default <out-dir>/bench_topologies.json)")
    args = parser.parse_args(argv)
    if "{n}" not in args.launcher:
        parser.error("--launcher must contain {n} (the number of ranks)")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if any(n < 1 for n in args.sizes):
        parser.error("--sizes must be >= 1")
    args.out_dir = args.out_dir.resolve()
    args.json = (args.json or args.out_dir / "bench_topologies.json").resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = load_average()
    variants = [v for v in VARIANTS if v.name in args.variants]
    limits = {v.topology: topology_sizes(v.topology) for v in variants}
    print(f"bench_topologies: {len(variants)} variant(s) x sizes {args.sizes}, {args.algo} on {args.env}, "
          f"{args.steps} steps, sim_cost_ms={args.sim_cost_ms:g}; {os.cpu_count()} cores, "
          f"load {load_before}", flush=True)
    jobs: list[Job] = []
    for repeat in range(args.repeats):
        if args.repeats > 1:
            print(f" round {repeat + 1}/{args.repeats}", flush=True)
        for variant in variants:
            for ranks in args.sizes:
                refusal = size_refusal(variant.topology, ranks, limits[variant.topology])
                if refusal:
                    if repeat == 0:
                        jobs.append(Job(variant.name, variant.topology, ranks, repeat, "skipped", refusal))
                        print(f"  skip {variant.name} on {ranks} rank(s): {refusal}", flush=True)
                    continue
                job = Job(variant.name, variant.topology, ranks, repeat)
                jobs.append(job)
                run_one(args, job, variant)

    rows = table_rows(jobs)
    meta = collect_meta(args, jobs, load_before)
    print()
    print(f"MPI library: {', '.join(meta['mpi_library']) or 'unknown'} | cores: {meta['cpu_count']} | "
          f"{meta['date']}")
    print(text_table(rows))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    md_path = args.out_dir / "bench_topologies.md"
    md_path.write_text(markdown(jobs, rows, meta))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "jobs": [job.__dict__ for job in jobs]},
                                    indent=2, default=str) + "\n")
    print(f"\nwrote {md_path} and {args.json}")
    failed = [j for j in jobs if j.failed]
    if failed:
        print(f"{len(failed)} job(s) failed: "
              + ", ".join(f"{j.variant} n={j.ranks} ({j.reason})" for j in failed), file=sys.stderr)
        return 1
    return 0


def run_one(args: argparse.Namespace, job: Job, variant: Variant) -> None:
    """Run one job and print one progress line (plus the stderr tail if it failed)."""
    suffix = f"_r{job.repeat}" if args.repeats > 1 else ""
    run_dir = args.out_dir / "runs" / f"{variant.name}_n{job.ranks}{suffix}"
    command = job_command(args, variant, job.ranks, run_dir)
    print(f"  run  {variant.name} on {job.ranks} rank(s) ...", end=" ", flush=True)
    run_job(job, command, run_dir, args.timeout)
    if job.status == "ok":
        print(f"{job.metrics['env_steps_per_s']:,.0f} env steps/s, "
              f"{job.metrics['updates_per_s']:,.0f} updates/s ({job.seconds:.1f} s)", flush=True)
    else:
        print(f"{job.status.upper()}: {job.reason} ({job.seconds:.1f} s)\n"
              f"    command: {shlex.join(command)}\n"
              f"    stderr tail:\n{indent(job.stderr_tail[-800:])}", flush=True)


def indent(text: str, prefix: str = "      ") -> str:
    """``text`` with every line indented (for stderr tails)."""
    return "\n".join(prefix + line for line in text.strip().splitlines()) or prefix + "(no stderr)"


if __name__ == "__main__":
    sys.exit(main())
