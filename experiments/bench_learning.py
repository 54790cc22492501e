"""Learning-quality benchmark: does every algorithm x environment x topology still learn?

For each pair - DQN: cartpole, lunarlander; TD3: pendulum; PPO: cartpole, lunarlander, pendulum -
each topology of ``--topologies`` and each seed of ``--seeds`` it runs one drlmpi job::

    [LAUNCHER -n N] python -m mpi4py -m drlmpi algo=A env=E topology=T seed=S \\
        run.stop_on_solve=true run.max_env_steps=<tuned budget x --budget-scale> \\
        [topology.payload=gradients] [topology.max_policy_lag=64] hydra.run.dir=<out>/runs/...

with the pair's tuned hyperparameters (``conf/tuned/<algo>_<env>.yaml`` applies by itself), so a
job stops at the reward threshold or at the tuned step budget, and tabulates the ``summary.json``
files against rl-baselines3-zoo's step budgets.

Run from the repository root::

    # everything (6 pairs x 5 topologies x 3 seeds), as many jobs at once as the cores allow,
    # stopping cleanly after 8 minutes; run the same command again to continue (finished jobs,
    # i.e. run dirs holding a summary.json, are skipped):
    python experiments/bench_learning.py --deadline-s 480

    # on a 16-core box with Open MPI as root (the launcher is auto-detected; this is what it picks):
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 python experiments/bench_learning.py \\
        --cores 16 --launcher "mpirun --oversubscribe --bind-to none -n {n}" --deadline-s 480

    # a selection, a tenth of each budget, one job at a time:
    python experiments/bench_learning.py --pairs dqn:cartpole ppo:pendulum \\
        --topologies sequential p2p --seeds 0 --budget-scale 0.1 --jobs 1

    python experiments/bench_learning.py --dry-run        # print the job commands, run nothing

Scheduling: a job of n ranks takes n of ``--cores`` cores (default: all of this machine's) and at
most ``--jobs`` jobs run at once; the most expensive jobs start first. ``--launcher`` is a
command template with ``{n}`` for the rank count (1-rank jobs run without a launcher, as an MPI
singleton, unless ``--launch-single``). Open MPI is detected from ``mpiexec --version`` and then
gets ``--bind-to none``: without it every concurrent ``mpirun`` pins its ranks to the same first
cores. ``--deadline-s`` is global (from this script's start): no job starts after it, running
jobs are killed at it and marked ``timeout``, and the table is still written (it is also
rewritten after every job). A job killed or interrupted leaves no summary.json and runs again
next time. Note that a job is never resumed mid-way: a job longer than the deadline never
finishes - cap it with ``--max-train-seconds`` (it then ends with stop_reason
``max_train_seconds`` and counts as unsolved).

Outputs in ``--out-dir`` (default ``outputs/bench_learning``): ``bench_learning.md`` (command line,
date, cores, MPI library, the table, one row per job), ``bench_learning.json`` (every field), and
``runs/<algo>_<env>/<topology>_n<ranks>[variant]/seed<S>/`` - each job's drlmpi run directory,
plus ``launcher.out`` / ``launcher.err`` (its stdout / stderr). ``[variant]`` encodes settings
that change the result (``_b0.1`` for ``--budget-scale 0.1``, ``_lag32``, ``_t120``, ``_x<hash>``
for ``--extra``), so runs with other settings never count as finished runs of these.

How to read the table (one row per pair x topology x ranks):

* ``solved/run``: seeds whose greedy evaluation reached ``env.reward_threshold`` / seeds that ran
  to the end (a summary.json exists). Seeds that timed out, crashed or never started are listed
  under *notes*.
* ``steps to threshold``: job-wide env steps at the first solving evaluation, median over the
  solved seeds, ``[min-max]``. Evaluations happen every ``run.eval_every`` steps, so this is
  rounded up to that grid (and, in multi-rank topologies, to a round of experience).
* ``train s``: median ``train_seconds_to_threshold`` over solved seeds - training wall-clock,
  evaluation excluded. Jobs run concurrently (one core per rank), so compare seconds only within
  one table.
* ``budget``: the zoo budget to meet or beat (DQN CartPole 5e4, TD3 Pendulum 2e4, PPO CartPole
  1e5, PPO LunarLander 1e6, DQN LunarLander 5e5); PPO Pendulum has none, so its tuned
  ``run.max_env_steps`` is used (marked ``tuned``).
* ``meets budget``: ``yes`` when every requested seed ran, all solved, and the median steps to
  threshold <= budget; ``no`` otherwise; ``incomplete`` when seeds are missing (timeout, not run)
  and the finished ones do not already decide ``no``; ``refused`` when drlmpi refused the
  combination at start-up (exit code 2, ``drlmpi: error: ...``; the message is in the notes).
* ``notes``: refusals, crashes, timeouts, and for unsolved seeds the best greedy evaluation.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "outputs" / "bench_learning"

# (algo, env) pairs in table order.
PAIRS: list[tuple[str, str]] = [
    ("dqn", "cartpole"), ("dqn", "lunarlander"), ("td3", "pendulum"),
    ("ppo", "cartpole"), ("ppo", "lunarlander"), ("ppo", "pendulum"),
]
# rl-baselines3-zoo step budgets to meet or beat (PPO Pendulum: none given, the tuned budget is used).
ZOO_BUDGET: dict[tuple[str, str], int] = {
    ("dqn", "cartpole"): 50_000, ("td3", "pendulum"): 20_000, ("ppo", "cartpole"): 100_000,
    ("ppo", "lunarlander"): 1_000_000, ("dqn", "lunarlander"): 500_000,
}
# Rough single-core seconds for a pair's whole tuned budget: only orders the queue (longest first).
COST_WEIGHT: dict[tuple[str, str], float] = {
    ("dqn", "cartpole"): 60, ("dqn", "lunarlander"): 700, ("td3", "pendulum"): 120,
    ("ppo", "cartpole"): 40, ("ppo", "lunarlander"): 400, ("ppo", "pendulum"): 120,
}
ON_POLICY = {"ppo"}

# Topology labels: label -> (drlmpi topology, extra overrides).
TOPOLOGIES: dict[str, tuple[str, list[str]]] = {
    "sequential": ("sequential", []),
    "p2p": ("p2p", []),
    "star": ("star", []),
    "star-gradients": ("star", ["topology.payload=gradients"]),
    "async": ("async", []),
    "allgather": ("allgather", []),
}
DEFAULT_TOPOLOGIES = ["sequential", "p2p", "star", "async", "allgather"]
DEFAULT_RANKS: dict[str, int] = {"sequential": 1, "p2p": 2, "star": 3, "star-gradients": 3,
                                 "async": 3, "allgather": 3}

ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                  "PYTHONUNBUFFERED": "1"}
REFUSED_PREFIX = "drlmpi: error:"
CRASH_PREFIX = "drlmpi: rank"
CONFIG_ERROR_EXIT = 2  # drlmpi's exit code for a refused configuration
KILL_GRACE_S = 4.0
MIN_LAUNCH_S = 5.0  # do not start a job with less than this left before the deadline
POLL_S = 0.25


# ---------------------------------------------------------------------------------------------
# Jobs


@dataclass
class Job:
    """One drlmpi run: a pair x topology x seed, and what became of it."""

    algo: str
    env: str
    topology: str          # label (e.g. star-gradients)
    ranks: int
    seed: int
    overrides: list[str]
    run_dir: Path
    max_env_steps: int
    weight: float
    status: str = "pending"  # pending | done | refused | failed | timeout | not run
    cached: bool = False
    message: str = ""
    returncode: int | None = None
    job_seconds: float | None = None
    summary: dict[str, Any] | None = None
    command: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started: float = 0.0
    killed: str = ""

    @property
    def pair(self) -> str:
        return f"{self.algo}:{self.env}"

    @property
    def cell(self) -> tuple[str, str, str, int]:
        return (self.algo, self.env, self.topology, self.ranks)


def load_yaml(path: Path) -> dict[str, Any]:
    """A YAML file as a dict ({} if it does not exist)."""
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text()) or {}


def tuned_max_env_steps(repo: Path, algo: str, env: str) -> int:
    """``run.max_env_steps`` of ``conf/tuned/<algo>_<env>.yaml`` (else of ``conf/config.yaml``)."""
    for path in (repo / "conf" / "tuned" / f"{algo}_{env}.yaml", repo / "conf" / "config.yaml"):
        value = (load_yaml(path).get("run") or {}).get("max_env_steps")
        if value is not None:
            return int(value)
    raise SystemExit(f"bench_learning: no run.max_env_steps for {algo}_{env} under {repo / 'conf'}")


def hydra_value(path: Path) -> str:
    """A path as a Hydra override value (quoted when it has characters the grammar reserves)."""
    text = str(path)
    if re.fullmatch(r"[A-Za-z0-9_./+:-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def parse_pairs(tokens: list[str]) -> list[tuple[str, str]]:
    known = {f"{a}:{e}": (a, e) for a, e in PAIRS}
    out = []
    for token in tokens:
        if token not in known:
            raise SystemExit(f"bench_learning: unknown pair {token!r}; choose from {' '.join(known)}")
        out.append(known[token])
    return out


def parse_ranks(tokens: list[str] | None) -> dict[str, int]:
    """``--ranks``: ``N`` sets every multi-rank topology, ``topology=N`` one topology."""
    ranks = dict(DEFAULT_RANKS)
    for token in tokens or []:
        name, _, value = token.rpartition("=")
        try:
            n = int(value)
        except ValueError:
            raise SystemExit(f"bench_learning: bad --ranks entry {token!r} (N or topology=N)") from None
        if n < 1:
            raise SystemExit(f"bench_learning: --ranks must be >= 1, got {token!r}")
        if not name:
            ranks.update({name: n for name, default in DEFAULT_RANKS.items() if default >= 3})
        elif name in TOPOLOGIES:
            ranks[name] = n
        else:
            raise SystemExit(f"bench_learning: unknown topology {name!r} in --ranks {token!r}")
    return ranks


def variant_tag(args: argparse.Namespace, algo: str, topology: str) -> str:
    """Run-dir suffix for settings that change a job's result."""
    tag = ""
    if args.budget_scale != 1.0:
        tag += f"_b{args.budget_scale:g}"
    if TOPOLOGIES[topology][0] == "async" and algo in ON_POLICY and args.async_ppo_lag != "64":
        tag += f"_lag{args.async_ppo_lag}"
    if args.max_train_seconds is not None:
        tag += f"_t{args.max_train_seconds:g}"
    if args.extra:
        tag += "_x" + hashlib.sha1(" ".join(args.extra).encode()).hexdigest()[:8]
    return tag


def build_jobs(args: argparse.Namespace) -> list[Job]:
    """Every job of the selection, in table order."""
    ranks = parse_ranks(args.ranks)
    jobs = []
    for algo, env in parse_pairs(args.pairs):
        base_steps = tuned_max_env_steps(args.repo, algo, env)
        steps = max(1, round(base_steps * args.budget_scale))
        for topology in args.topologies:
            base_topology, topo_overrides = TOPOLOGIES[topology]
            n = ranks[topology]
            cell_name = f"{topology}_n{n}{variant_tag(args, algo, topology)}"
            cell_dir = args.out_dir / "runs" / f"{algo}_{env}" / cell_name
            for seed in args.seeds:
                overrides = [f"algo={algo}", f"env={env}", f"topology={base_topology}", f"seed={seed}",
                             "run.stop_on_solve=true", f"run.max_env_steps={steps}", *topo_overrides]
                if base_topology == "async" and algo in ON_POLICY and args.async_ppo_lag.lower() != "none":
                    overrides.append(f"topology.max_policy_lag={int(args.async_ppo_lag)}")
                if args.max_train_seconds is not None:
                    overrides.append(f"run.max_train_seconds={args.max_train_seconds:g}")
                overrides.extend(args.extra)
                run_dir = cell_dir / f"seed{seed}"
                overrides.append(f"hydra.run.dir={hydra_value(run_dir)}")
                jobs.append(Job(algo, env, topology, n, seed, overrides, run_dir, steps,
                                COST_WEIGHT[(algo, env)] * args.budget_scale * n))
    return jobs


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's summary.json, or None if absent or unreadable (a killed job's partial file)."""
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# Launching and killing


def detect_mpi() -> str:
    """``openmpi``, ``mpich`` or ``unknown``, from ``mpiexec --version``."""
    exe = shutil.which("mpiexec") or shutil.which("mpirun")
    if exe is None:
        return "unknown"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    text = (out.stdout + out.stderr).lower()
    if "open mpi" in text or "openrte" in text or "prrte" in text or "open-mpi" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel" in text:
        return "mpich"
    return "unknown"


def default_launcher(mpi: str) -> str:
    if mpi == "openmpi":
        return "mpirun --oversubscribe --bind-to none -n {n}"
    return "mpiexec -n {n}"


def job_command(job: Job, args: argparse.Namespace) -> list[str]:
    launcher: list[str] = []
    if job.ranks > 1 or args.launch_single:
        launcher = [part.replace("{n}", str(job.ranks)) for part in shlex.split(args.launcher)]
    return [*launcher, args.python, "-m", "mpi4py", "-m", "drlmpi", *job.overrides]


def _set_parent_death_signal() -> None:
    """Child side: die with this script (Linux), so a hard kill of the bench leaves no job behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; [] elsewhere)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_jobs(jobs: list[Job]) -> None:
    """SIGTERM each job's process group, then SIGKILL whatever is left (group and descendants)."""
    tree: dict[int, list[int]] = {}
    for job in jobs:
        assert job.proc is not None
        tree[job.proc.pid] = descendants(job.proc.pid)
        try:
            os.killpg(job.proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < end and any(j.proc.poll() is None for j in jobs if j.proc):
        time.sleep(0.1)
    for job in jobs:
        assert job.proc is not None
        pids = set(tree[job.proc.pid]) | set(descendants(job.proc.pid))
        try:
            os.killpg(job.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in pids:  # ranks a launcher may have put in other process groups
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        job.proc.wait()


def launch(job: Job, args: argparse.Namespace, env: dict[str, str], remaining_s: float) -> None:
    if job.run_dir.exists():  # a killed or crashed earlier attempt: start clean
        shutil.rmtree(job.run_dir)
    job.run_dir.mkdir(parents=True)
    job.command = job_command(job, args)
    # Second net inside the launcher (MPICH and Open MPI both read it) should this script die.
    job_env = {**env, "MPIEXEC_TIMEOUT": str(int(remaining_s) + 60)}
    with open(job.run_dir / "launcher.out", "wb") as out, open(job.run_dir / "launcher.err", "wb") as err:
        job.proc = subprocess.Popen(job.command, cwd=args.repo, env=job_env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=_set_parent_death_signal if sys.platform == "linux" else None)
    job.started = time.monotonic()
    job.status = "running"


def classify(job: Job) -> None:
    """Set status/message of a finished (or killed) job from its run dir and stderr."""
    assert job.proc is not None
    job.returncode = job.proc.returncode
    job.job_seconds = time.monotonic() - job.started
    job.summary = read_summary(job.run_dir)
    try:
        stderr = (job.run_dir / "launcher.err").read_text(errors="replace")
    except OSError:
        stderr = ""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if job.summary is not None:
        job.status = "done"
        if job.returncode:
            job.message = f"exit code {job.returncode} after writing summary.json"
        return
    # `in`, not startswith: a launcher may prefix each line (Open MPI's --tag-output).
    refused = [line for line in lines if REFUSED_PREFIX in line]
    crash = [line for line in lines if CRASH_PREFIX in line]
    if refused:
        job.status = "refused"
        job.message = refused[0].split(REFUSED_PREFIX, 1)[1].strip()
        if job.returncode != CONFIG_ERROR_EXIT:
            job.message += f" (exit code {job.returncode}, expected {CONFIG_ERROR_EXIT})"
        return
    if job.killed:
        job.status = "timeout"
        job.message = job.killed
        return
    if job.returncode == CONFIG_ERROR_EXIT and not crash:
        job.status = "refused"
        job.message = f"exit code {CONFIG_ERROR_EXIT} without a '{REFUSED_PREFIX}' line (see launcher.err)"
        return
    job.status = "failed"
    last = crash[0] if crash else (lines[-1] if lines else "no stderr")
    job.message = f"exit code {job.returncode}: {last}"


# ---------------------------------------------------------------------------------------------
# Aggregation and output


def fmt_steps(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def budget_of(job: Job, args: argparse.Namespace) -> tuple[int, str]:
    key = (job.algo, job.env)
    if key in ZOO_BUDGET:
        return ZOO_BUDGET[key], "zoo"
    return tuned_max_env_steps(args.repo, job.algo, job.env), "tuned"


def aggregate(jobs: list[Job], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One dict per pair x topology x ranks, in table order."""
    cells: dict[tuple[str, str, str, int], list[Job]] = {}
    for job in jobs:
        cells.setdefault(job.cell, []).append(job)
    out = []
    for (algo, env, topology, ranks), cell_jobs in cells.items():
        done = [j for j in cell_jobs if j.status == "done" and j.summary is not None]
        solved = [j for j in done if j.summary.get("solved")]
        steps = [float(j.summary["env_steps_to_threshold"]) for j in solved]
        secs = [float(j.summary["train_seconds_to_threshold"]) for j in solved]
        budget, budget_source = budget_of(cell_jobs[0], args)
        median_steps = statistics.median(steps) if steps else None
        by_status = {s: [j for j in cell_jobs if j.status == s]
                     for s in ("refused", "failed", "timeout", "not run", "pending", "running")}
        missing = len(by_status["timeout"]) + len(by_status["not run"]) + len(by_status["pending"]) \
            + len(by_status["running"])
        if by_status["refused"]:
            meets = "refused"
        elif len(solved) == len(cell_jobs) and median_steps is not None:
            meets = "yes" if median_steps <= budget else "no"
        elif missing and len(solved) == len(done) and not by_status["failed"] and (
                median_steps is None or median_steps <= budget):
            meets = "incomplete"
        else:
            meets = "no"
        notes = []
        if by_status["refused"]:
            notes.append("refused: " + by_status["refused"][0].message)
        for status in ("failed", "timeout", "not run"):
            if by_status[status]:
                seeds = ",".join(str(j.seed) for j in by_status[status])
                detail = f" ({by_status[status][0].message})" if status == "failed" else ""
                notes.append(f"{status}: seed {seeds}{detail}")
        unsolved = [j for j in done if not j.summary.get("solved")]
        if unsolved:
            best = ", ".join(
                f"s{j.seed} best {j.summary.get('best_eval_return', float('nan')):.0f} "
                f"@{fmt_steps(j.summary.get('env_steps'))} ({j.summary.get('stop_reason')})"
                for j in unsolved)
            notes.append(f"unsolved: {best}")
        out.append({
            "algo": algo, "env": env, "pair": f"{algo}:{env}", "topology": topology, "ranks": ranks,
            "seeds": [j.seed for j in cell_jobs], "seeds_run": len(done), "seeds_solved": len(solved),
            "env_steps_to_threshold": steps,
            "env_steps_to_threshold_median": median_steps,
            "env_steps_to_threshold_min": min(steps) if steps else None,
            "env_steps_to_threshold_max": max(steps) if steps else None,
            "train_seconds_to_threshold": secs,
            "train_seconds_to_threshold_median": statistics.median(secs) if secs else None,
            "max_env_steps": cell_jobs[0].max_env_steps,
            "budget": budget, "budget_source": budget_source, "meets_budget": meets,
            "statuses": {j.seed: j.status for j in cell_jobs}, "notes": notes,
        })
    return out


def versions_of(jobs: list[Job], key: str) -> list[str]:
    return sorted({" ".join(str(j.summary["versions"].get(key)).split()) for j in jobs
                   if j.summary and isinstance(j.summary.get("versions"), dict)})


def md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_outputs(jobs: list[Job], args: argparse.Namespace, meta: dict[str, Any]) -> None:
    cells = aggregate(jobs, args)
    meta = {**meta, "elapsed_s": round(time.monotonic() - meta["_t0"], 1),
            "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "mpi_library": versions_of(jobs, "mpi_library"),
            "torch": versions_of(jobs, "torch"), "python": versions_of(jobs, "python"),
            "status_counts": {s: sum(j.status == s for j in jobs)
                              for s in ("done", "refused", "failed", "timeout", "not run", "pending")}}
    meta.pop("_t0", None)
    job_rows = []
    for job in jobs:
        s = job.summary or {}
        job_rows.append({
            "pair": job.pair, "topology": job.topology, "ranks": job.ranks, "seed": job.seed,
            "status": job.status, "cached": job.cached, "message": job.message,
            "returncode": job.returncode, "job_seconds": job.job_seconds, "run_dir": str(job.run_dir),
            "command": shlex.join(job.command) if job.command else None,
            "max_env_steps": job.max_env_steps,
            **{k: s.get(k) for k in ("solved", "env_steps_to_threshold", "train_seconds_to_threshold",
                                     "updates_to_threshold", "best_eval_return", "last_eval_return",
                                     "stop_reason", "env_steps", "train_seconds", "wall_seconds",
                                     "env_steps_per_s", "updates_per_s", "mpi_wait_share",
                                     "policy_lag_mean", "policy_lag_max", "reward_threshold")},
        })
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "bench_learning.json").write_text(
        json.dumps({"meta": meta, "cells": cells, "jobs": job_rows}, indent=1, default=str) + "\n")

    lines = [
        "# drlmpi learning benchmark: steps and time to the reward threshold", "",
        f"- command: `{meta['command']}`",
        f"- date: {meta['started']} (written {meta['written']}, {meta['elapsed_s']} s into this invocation)",
        f"- host: {meta['host']}, {meta['host_cores']} cores; scheduled on {meta['cores']} cores, "
        f"at most {meta['max_jobs']} jobs at once",
        f"- MPI library: {', '.join(meta['mpi_library']) or 'n/a (no summary yet)'}; "
        f"launcher `{meta['launcher']}`",
        f"- python {', '.join(meta['python']) or platform.python_version()}, "
        f"torch {', '.join(meta['torch']) or 'n/a'}",
        f"- budget scale {meta['budget_scale']:g} (run.max_env_steps = tuned x scale), "
        f"run.stop_on_solve=true, seeds {' '.join(map(str, meta['seeds']))}",
        "- jobs: " + ", ".join(f"{n} {s}" for s, n in meta["status_counts"].items() if n),
        "",
        "| pair | topology | ranks | solved/run | steps to threshold: median [min-max] | train s (median) "
        "| budget | meets budget | notes |",
        "|---|---|---:|---:|---|---:|---:|---|---|",
    ]
    for c in cells:
        if c["env_steps_to_threshold"]:
            steps = (f"{fmt_steps(c['env_steps_to_threshold_median'])} "
                     f"[{fmt_steps(c['env_steps_to_threshold_min'])}-{fmt_steps(c['env_steps_to_threshold_max'])}]")
        else:
            steps = "-"
        secs = c["train_seconds_to_threshold_median"]
        budget = fmt_steps(c["budget"]) + (" (tuned)" if c["budget_source"] == "tuned" else "")
        lines.append(
            f"| {c['pair']} | {c['topology']} | {c['ranks']} | {c['seeds_solved']}/{c['seeds_run']} "
            f"| {steps} "
            f"| {'-' if secs is None else f'{secs:.1f}'} | {budget} | {c['meets_budget']} "
            f"| {md_escape('; '.join(c['notes']))} |")
    lines += [
        "",
        "Budgets: rl-baselines3-zoo's (DQN CartPole 5e4, TD3 Pendulum 2e4, PPO CartPole 1e5, "
        "PPO LunarLander 1e6, DQN LunarLander 5e5); PPO Pendulum has no zoo budget, so its tuned "
        "`run.max_env_steps` is used (\"tuned\"). *meets budget*: all requested seeds solved and "
        "median steps to threshold <= budget. Steps are job-wide env steps at the first greedy "
        "evaluation >= the threshold; train s excludes evaluation time. Jobs ran concurrently, "
        "one core per rank.",
        "",
        "## Jobs", "",
        "| pair | topology | ranks | seed | status | solved | steps to threshold | train s | stop "
        "| best eval | env steps | run dir |",
        "|---|---|---:|---:|---|---|---:|---:|---|---:|---:|---|",
    ]
    for row in job_rows:
        status = row["status"] + (" (cached)" if row["cached"] else "")
        if row["message"]:
            status += ": " + row["message"]
        best = row["best_eval_return"]
        train = row["train_seconds_to_threshold"]
        lines.append(
            f"| {row['pair']} | {row['topology']} | {row['ranks']} | {row['seed']} | {md_escape(status)} "
            f"| {'' if row['solved'] is None else ('yes' if row['solved'] else 'no')} "
            f"| {fmt_steps(row['env_steps_to_threshold'])} | {'-' if train is None else f'{train:.1f}'} "
            f"| {row['stop_reason'] or ''} | {'' if best is None else f'{best:.1f}'} "
            f"| {fmt_steps(row['env_steps'])} | `{os.path.relpath(row['run_dir'], args.out_dir)}` |")
    (args.out_dir / "bench_learning.md").write_text("\n".join(lines) + "\n")


def progress_line(job: Job, t0: float) -> str:
    head = (f"[{time.monotonic() - t0:6.0f}s] {job.status:8s} {job.pair:16s} {job.topology:14s} "
            f"n={job.ranks} seed={job.seed}")
    if job.status == "done" and job.summary is not None:
        s = job.summary
        if s.get("solved"):
            steps, secs = s.get("env_steps_to_threshold"), s.get("train_seconds_to_threshold")
        else:
            steps, secs = s.get("env_steps"), s.get("train_seconds")
        tail = (f"solved={'yes' if s.get('solved') else 'no'} steps={steps} "
                f"train_s={float(secs or 0):.1f}")
        if job.cached:
            return f"{head}  {tail} (cached)"
        return f"{head}  {tail} job_s={job.job_seconds:.1f}"
    extra = f" job_s={job.job_seconds:.1f}" if job.job_seconds is not None else ""
    return f"{head}  {job.message}{extra}"


# ---------------------------------------------------------------------------------------------
# Main loop


class Stop:
    """Set by SIGTERM/SIGINT/SIGHUP: behave as if the deadline had passed."""

    reason = ""

    @classmethod
    def handler(cls, signum: int, _frame: Any) -> None:
        cls.reason = f"interrupted by {signal.Signals(signum).name}"


def run_all(jobs: list[Job], args: argparse.Namespace, meta: dict[str, Any]) -> None:
    t0 = meta["_t0"]
    deadline = t0 + args.deadline_s if args.deadline_s else None
    env = {**os.environ, **ONE_THREAD_ENV}
    if meta["mpi"] == "openmpi" and hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    queue = []
    for job in jobs:
        summary = read_summary(job.run_dir)
        if summary is not None:
            job.status, job.cached, job.summary = "done", True, summary
            print(progress_line(job, t0), flush=True)
        else:
            queue.append(job)
    write_outputs(jobs, args, meta)
    queue.sort(key=lambda j: -j.weight)  # stable: equal weights keep table order
    running: list[Job] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, Stop.handler)
    print(f"[{time.monotonic() - t0:6.0f}s] {len(queue)} job(s) to run, {len(jobs) - len(queue)} cached; "
          f"{args.cores} cores, at most {args.jobs} at once", flush=True)
    while queue or running:
        now = time.monotonic()
        finished = [j for j in running if j.proc is not None and j.proc.poll() is not None]
        over = [j for j in running if j not in finished and args.job_timeout_s
                and now - j.started > args.job_timeout_s]
        stop = Stop.reason or ("deadline" if deadline is not None and now >= deadline else "")
        if stop:
            over = [j for j in running if j not in finished]
        for job in over:
            job.killed = (f"killed at the {args.deadline_s:g} s deadline" if stop == "deadline"
                          else stop or f"killed after --job-timeout-s {args.job_timeout_s:g}")
        if over:
            kill_jobs(over)
        for job in finished + over:
            running.remove(job)
            classify(job)
            print(progress_line(job, t0), flush=True)
        if finished or over:
            write_outputs(jobs, args, meta)
        if stop:
            for job in queue:
                job.status, job.message = "not run", stop
            queue.clear()
            break
        free = args.cores - sum(j.ranks for j in running)
        left = None if deadline is None else deadline - now
        for job in list(queue):
            if len(running) >= args.jobs or (left is not None and left < MIN_LAUNCH_S):
                break
            if job.ranks <= free or not running:  # a job wider than --cores runs alone
                launch(job, args, env, left if left is not None else 86400.0)
                running.append(job)
                queue.remove(job)
                free -= job.ranks
                print(f"[{time.monotonic() - t0:6.0f}s] start    {job.pair:16s} {job.topology:14s} "
                      f"n={job.ranks} seed={job.seed}", flush=True)
        if left is not None and left < MIN_LAUNCH_S and not running:
            for job in queue:
                job.status, job.message = "not run", "too close to the deadline to start"
            queue.clear()
        time.sleep(POLL_S)
    write_outputs(jobs, args, meta)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", nargs="+", default=[f"{a}:{e}" for a, e in PAIRS],
                   help="algo:env pairs (default: all six)")
    p.add_argument("--topologies", nargs="+", default=DEFAULT_TOPOLOGIES, metavar="TOPOLOGY",
                   help="topologies (default: %(default)s); star-gradients = star with "
                        "topology.payload=gradients; any other conf/topology/<name>.yaml runs as "
                        "topology=<name> on 3 ranks unless --ranks says otherwise")
    p.add_argument("--ranks", nargs="+", metavar="N|TOPOLOGY=N",
                   help="world sizes: N for star/star-gradients/async/allgather, or TOPOLOGY=N "
                        "(default: 3 for those, p2p=2, sequential=1)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--budget-scale", type=float, default=1.0,
                   help="multiply the tuned run.max_env_steps (default 1)")
    p.add_argument("--async-ppo-lag", default="64",
                   help="topology.max_policy_lag for async with PPO ('none': do not pass it)")
    p.add_argument("--max-train-seconds", type=float, default=None,
                   help="pass run.max_train_seconds (a job then ends by itself, unsolved, "
                        "when it is reached)")
    p.add_argument("--extra", nargs="+", default=[], metavar="KEY=VALUE",
                   help="more Hydra overrides for every job")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                   help="cores to fill: a job of n ranks takes n (default: this machine's, %(default)s)")
    p.add_argument("--jobs", type=int, default=None, help="most jobs at once (default: --cores)")
    p.add_argument("--launcher", default=None,
                   help="launcher template, {n} = ranks (default: 'mpirun --oversubscribe --bind-to none "
                        "-n {n}' for Open MPI, else 'mpiexec -n {n}')")
    p.add_argument("--launch-single", action="store_true",
                   help="use the launcher for 1-rank jobs too (default: MPI singleton, no launcher)")
    p.add_argument("--python", default=sys.executable, help="interpreter for the jobs")
    p.add_argument("--deadline-s", type=float, default=480.0,
                   help="global deadline from start: no new jobs, running ones killed (0: none; "
                        "default %(default)s)")
    p.add_argument("--job-timeout-s", type=float, default=None, help="kill a single job after this long")
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="default: %(default)s")
    p.add_argument("--repo", type=Path, default=REPO_ROOT,
                   help="working directory of the jobs (the drlmpi checkout; default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the jobs' commands and exit")
    args = p.parse_args(argv)
    args.out_dir = args.out_dir.resolve()
    args.repo = args.repo.resolve()
    for name in args.topologies:
        if name not in TOPOLOGIES:
            if not (args.repo / "conf" / "topology" / f"{name}.yaml").is_file():
                p.error(f"unknown topology {name!r}: choose from {' '.join(TOPOLOGIES)} "
                        f"or a file in {args.repo / 'conf' / 'topology'}")
            TOPOLOGIES[name] = (name, [])
            DEFAULT_RANKS.setdefault(name, 3)
    if args.jobs is None:
        args.jobs = args.cores
    if args.cores < 1 or args.jobs < 1 or args.budget_scale <= 0:
        p.error("--cores and --jobs must be >= 1 and --budget-scale > 0")
    if args.async_ppo_lag.lower() != "none" and not args.async_ppo_lag.isdigit():
        p.error("--async-ppo-lag must be an integer or 'none'")
    if args.async_ppo_lag.lower() == "none":
        args.async_ppo_lag = "none"
    return args


def main(argv: list[str] | None = None) -> int:
    t0 = time.monotonic()
    args = parse_args(argv)
    mpi = detect_mpi()
    if args.launcher is None:
        args.launcher = default_launcher(mpi)
    if "{n}" not in args.launcher:
        raise SystemExit("bench_learning: --launcher must contain {n} (the rank count)")
    jobs = build_jobs(args)
    if args.dry_run:
        for job in jobs:
            cached = " (cached)" if read_summary(job.run_dir) is not None else ""
            print(shlex.join(job_command(job, args)) + cached)
        return 0
    meta = {
        "_t0": t0,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "host_cores": os.cpu_count(), "cores": args.cores, "max_jobs": args.jobs,
        "mpi": mpi, "launcher": args.launcher, "budget_scale": args.budget_scale, "seeds": args.seeds,
        "deadline_s": args.deadline_s, "repo": str(args.repo), "out_dir": str(args.out_dir),
    }
    run_all(jobs, args, meta)
    counts = {s: sum(j.status == s for j in jobs)
              for s in ("done", "refused", "failed", "timeout", "not run")}
    print(f"[{time.monotonic() - t0:6.0f}s] finished: "
          + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
          + f"; table: {args.out_dir / 'bench_learning.md'}", flush=True)
    print((args.out_dir / "bench_learning.md").read_text().split("\n## Jobs")[0], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
