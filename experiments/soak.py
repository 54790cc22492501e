"""Soak test: the async topology with N simulators for many minutes, watched from outside.

    python experiments/soak.py                      # 8 simulators, 10 minutes, sim cost 2 ms
    python experiments/soak.py --minutes 1 --simulators 3 --out outputs/soak_quick.json

Runs ``python -m drlmpi topology=async world_size=N+1`` (DQN on CartPole with
``env.sim_cost_ms``, a training-time budget, no evaluation) and samples the resident memory
(VmRSS) of every rank every ``--sample-s`` seconds from /proc (Linux). At the end it checks, and
prints PASS/FAIL for each:

* ``finished``  - the job ended by itself with exit code 0 within the budget + ``--grace-s``
  (no deadlock, no hang; it is killed otherwise);
* ``memory flat`` - after the warm-up (``--warmup-frac`` of the samples, and at least
  ``--warmup-s`` after every rank is up), no rank's resident
  memory exceeds its value at the end of the warm-up by more than ``--rss-tolerance`` (10%);
* ``lag bound`` - the largest policy lag of any chunk the learner used is within
  ``topology.max_policy_lag`` (older chunks are discarded and counted);
* ``chunks`` - every chunk each simulator reports sent was received by the learner (used or
  discarded), simulator by simulator.

Writes a JSON with every sample and the summary's figures (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def rank_processes(marker: str) -> dict[int, int]:
    """``{rank: pid}`` of the processes whose command line holds ``marker`` and that an MPI
    launcher started (their environment names their rank)."""
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            if marker.encode() not in cmdline or b"mpi4py" not in cmdline:
                continue
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for var in (b"PMI_RANK=", b"OMPI_COMM_WORLD_RANK=", b"PMIX_RANK="):
            value = next((e[len(var):] for e in env if e.startswith(var)), None)
            if value is not None and value.isdigit():
                found[int(value)] = int(entry)
                break
    return found


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="training-time budget (default 10)")
    p.add_argument("--simulators", type=int, default=8, help="simulator ranks (default 8)")
    p.add_argument("--sim-cost-ms", type=float, default=2.0, help="env.sim_cost_ms (default 2)")
    p.add_argument("--max-policy-lag", type=int, default=64, help="topology.max_policy_lag (default 64)")
    p.add_argument("--sample-s", type=float, default=10.0, help="seconds between memory samples")
    p.add_argument("--warmup-frac", type=float, default=0.2, help="share of samples that is warm-up")
    p.add_argument("--warmup-s", type=float, default=120.0,
                   help="warm-up lasts at least this long after every rank is up (start-up, replay "
                        "filling; default 120)")
    p.add_argument("--rss-tolerance", type=float, default=0.10, help="allowed growth after warm-up")
    p.add_argument("--grace-s", type=float, default=180.0, help="seconds past the budget before a kill")
    p.add_argument("--out", type=Path, default=Path("outputs/soak.json"))
    p.add_argument("extra", nargs="*", help="more drlmpi overrides")
    args = p.parse_args(argv)

    marker = f"soak_{uuid.uuid4().hex[:10]}"
    run_dir = Path(tempfile.mkdtemp(prefix="drlmpi_soak_")) / "run"
    budget_s = args.minutes * 60
    cmd = [sys.executable, "-m", "drlmpi", "topology=async", f"world_size={args.simulators + 1}",
           "algo=dqn", "env=cartpole", f"env.sim_cost_ms={args.sim_cost_ms}",
           f"run.max_train_seconds={budget_s}", "run.max_env_steps=null", "run.stop_on_solve=false",
           "run.eval_every=1000000000", "run.progress_every_s=60",
           f"topology.max_policy_lag={args.max_policy_lag}", f"+soak_marker={marker}",
           f"hydra.run.dir={run_dir}", *args.extra]
    print(" ".join(cmd), flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True)
    samples: list[dict] = []
    deadline = started + budget_s + args.grace_s
    timed_out = False
    while proc.poll() is None:
        if time.monotonic() > deadline:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            break
        ranks = rank_processes(marker)
        rss = {r: rss_kib(pid) for r, pid in sorted(ranks.items())}
        if rss:
            samples.append({"t": round(time.monotonic() - started, 1),
                            "rss_kib": {str(r): v for r, v in rss.items() if v is not None}})
        time.sleep(args.sample_s)
    rc = proc.wait()
    elapsed = time.monotonic() - started

    checks: dict[str, tuple[bool, str]] = {}
    ending = " (killed: it did not end)" if timed_out else ""
    checks["finished"] = (not timed_out and rc == 0, f"exit code {rc} after {elapsed:.0f} s{ending}")
    full = [s for s in samples if len(s["rss_kib"]) == args.simulators + 1]
    growth: dict[str, float] = {}
    if len(full) >= 3:
        after = [i for i, s in enumerate(full) if s["t"] >= full[0]["t"] + args.warmup_s]
        index = max(int(len(full) * args.warmup_frac) - 1, after[0] if after else len(full) - 1, 0)
        base, later = full[index], full[index + 1:]
        for rank, start in base["rss_kib"].items():
            peak = max(s["rss_kib"].get(rank, start) for s in later) if later else start
            growth[rank] = peak / start - 1.0
        worst = max(growth.values()) if growth else 0.0
        checks["memory flat"] = (worst <= args.rss_tolerance, f"largest growth after warm-up "
                                 f"{100 * worst:+.1f}% over {len(later)} samples")
    else:
        checks["memory flat"] = (False, f"only {len(full)} complete memory samples")
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    stats = summary.get("topology_stats") or {}
    lag_max = summary.get("policy_lag_max")
    checks["lag bound"] = (lag_max is not None and lag_max <= args.max_policy_lag,
                           f"largest lag used {lag_max} (bound {args.max_policy_lag}), "
                           f"discarded chunks {stats.get('discarded_chunks')}")
    received = stats.get("chunks_received") or {}
    sent = {str(r["rank"]): r.get("chunks_sent") for r in summary.get("per_rank", [])
            if r.get("role") == "simulator"}
    mismatched = {r: (sent[r], received.get(r)) for r in sent if sent[r] != received.get(r)}
    checks["chunks"] = (bool(sent) and not mismatched,
                        f"{sum(v or 0 for v in sent.values())} chunks sent by {len(sent)} simulators"
                        + (f"; sent/received differ: {mismatched}" if mismatched else ", all received"))

    print()
    for name, (ok, detail) in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name:12} {detail}")
    print(f"env steps {summary.get('env_steps')}, updates {summary.get('updates')}, "
          f"{summary.get('env_steps_per_s', 0):.0f} env steps/s, policy lag mean "
          f"{summary.get('policy_lag_mean')}; run directory {run_dir}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": cmd, "exit_code": rc, "elapsed_s": elapsed, "timed_out": timed_out,
        "checks": {k: {"ok": ok, "detail": d} for k, (ok, d) in checks.items()},
        "rss_growth_after_warmup": growth, "samples": samples,
        "summary": {k: summary.get(k) for k in ("env_steps", "updates", "train_seconds", "env_steps_per_s",
                                                "updates_per_s", "policy_lag_mean", "policy_lag_max",
                                                "mpi_wait_share", "topology_stats")},
        "machine": {"cpu_count": os.cpu_count(), "loadavg": os.getloadavg()},
    }, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0 if all(ok for ok, _ in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
