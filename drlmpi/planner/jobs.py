"""Real runs for the planner, several in ONE MPI launch: the calibration's short jobs at the
largest size (:func:`calibration_jobs`) and the measured cells of a plan (``--measure``, below).

``mpiexec -n N python -m mpi4py -m drlmpi.planner.jobs SPEC.json`` runs each job of the spec
(``{"jobs": [{"overrides": [...], "ranks": n, "run_dir": "..."}]}``) in turn, in-process, on a
communicator of the first ``n`` ranks: exactly what ``python -m drlmpi OVERRIDES`` runs after Hydra
composed the config (:func:`drlmpi.run.experiment.run_experiment`), writing its ``summary.json``,
its ranks pinned as that launch would pin them (``bind_ranks``, :func:`bind_for_job`).
Ranks outside a job wait asleep (a nonblocking barrier polled every few milliseconds), never
spinning inside MPI, so they do not load the machine; one start-up (imports, MPI) serves every
job. Rank 0 prints a JSON line as each job ends (``{"job": RUN_DIR, "finished": true}``), which
:func:`launch` hands its caller as it comes (the planner's progress lines), and at the end one
line with the run directory of each job that finished.

``python -m drlmpi.planner.jobs --measure OUT [--ranks 1,4] [--topologies a,b] [--repeats R]
[overrides]`` measures the cells of a plan that way: every topology at every size it accepts, one
job at a time (R rounds of all of them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drlmpi.config.errors import ConfigError
from drlmpi.config.inputs import ArgumentParser, check_output_folder, positive_int
from drlmpi.job_control.process import signal_group
from drlmpi.planner import LAUNCH_ENV, end_on_sigterm, mpi_command
from drlmpi.planner.cells import cell_overrides, cell_refusals, compose, configs

#: what every planner job sets: no evaluation, no checkpoints, no event files, quiet
QUIET = ["run.eval_every=1000000000", "run.stop_on_solve=false", "run.progress_every_s=0",
         "run.tensorboard=false", "run.checkpoint_every_s=0", "run.checkpoint_on_signal=false"]


def sleep_until_all_arrive(world: Any) -> None:
    """A barrier over ``world`` that sleeps between polls instead of spinning in MPI."""
    request, delay = world.Ibarrier(), 1e-4
    while not request.Test():
        time.sleep(delay)
        delay = min(2 * delay, 5e-3)


def bind_for_job(cfg: Any, comm: Any, launch_cpus: list[int]) -> int | None:
    """Pin this rank as the job's own launch would (``bind_ranks``, counted over the job's
    ``comm``): first back onto the launch's CPUs (an earlier job of the launch may have pinned
    it), then to a core of its own where the job's ranks fill them. Without this a 16-rank job
    of a 16-core host ran unbound where ``python -m drlmpi`` pins it: allgather's calibration on
    16 CUDA learners measured 64 env steps/s where its cell, pinned, ran 259."""
    from drlmpi.config.scopes import RootSettings
    from drlmpi.envs.families import env_threads
    from drlmpi.job_control.process import bind_rank, pin_threads

    root = RootSettings.build(cfg)
    pin_threads(launch_cpus)
    cpu = bind_rank(root.bind_ranks, comm, max(root.threads_per_rank, env_threads(cfg.env)))
    if cpu is not None:
        pin_threads([cpu])  # torch's and CUDA's threads, started by an earlier job, too
    return cpu


def run_spec(spec: dict[str, Any]) -> list[str]:
    """This rank's part of every job in ``spec``; rank 0 returns the finished run directories."""
    from mpi4py import MPI

    from drlmpi.job_control.process import usable_cpus
    from drlmpi.run.experiment import run_experiment

    world = MPI.COMM_WORLD
    rank, done, launch_cpus = world.Get_rank(), [], usable_cpus()
    for job in spec["jobs"]:
        ranks, run_dir = int(job["ranks"]), Path(job["run_dir"])
        comm = world.Split(0 if rank < ranks else MPI.UNDEFINED, rank)
        if comm != MPI.COMM_NULL:
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
                cfg = compose(list(job["overrides"]))
                bind_for_job(cfg, comm, launch_cpus)
                run_experiment(cfg, comm, run_dir, hang_exit=3)
            except BaseException as exc:  # noqa: BLE001 (its peers may wait for it: end the launch)
                print(f"drlmpi.planner.jobs: rank {rank}: {run_dir.name}: {exc!r}", file=sys.stderr,
                      flush=True)
                world.Abort(1)
            comm.Free()
            if rank == 0:
                finished = (run_dir / "summary.json").is_file()
                if finished:
                    done.append(str(run_dir))
                print(json.dumps({"job": str(run_dir), "finished": finished}), flush=True)
        sleep_until_all_arrive(world)
    return done


def launch(jobs: list[dict[str, Any]], timeout_s: float, quiet: bool = True,
           on_job: Callable[[str, bool], None] | None = None) -> list[str]:
    """Run ``jobs`` in one launch of ``DRLMPI_MPIEXEC`` (default ``mpiexec``) over as many
    ranks as the largest needs; the run directories that finished (raises ``RuntimeError`` with
    the launch's last lines when it failed, or when it ran past ``timeout_s``: then its whole
    process group is killed). ``on_job(run_dir, finished)`` is called as each job ends."""
    if not jobs:
        return []
    ranks = max(int(job["ranks"]) for job in jobs)
    with tempfile.TemporaryDirectory(prefix="drlmpi-plan-jobs-") as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"jobs": jobs}))
        cmd = mpi_command(ranks, "drlmpi.planner.jobs", str(spec))
        errors = open(Path(tmp) / "stderr.txt", "w+") if quiet else None  # noqa: SIM115 (closed below)
        try:
            proc = subprocess.Popen(cmd, env=LAUNCH_ENV, stdout=subprocess.PIPE, stderr=errors, text=True,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            if errors is not None:
                errors.close()
            raise RuntimeError(f"could not run {' '.join(cmd[:3])} ...: {exc}") from exc
        expired = threading.Event()
        timer = threading.Timer(timeout_s, lambda: (expired.set(), signal_group(proc.pid, signal.SIGKILL)))
        timer.start()
        lines: list[str] = []
        try:
            for line in proc.stdout:  # as the jobs end
                lines.append(line.strip())
                ended = job_line(lines[-1])
                if ended is not None and on_job is not None:
                    on_job(*ended)
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None or proc.returncode != 0:
                signal_group(proc.pid, signal.SIGKILL)  # the launcher, or ranks it left behind
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            said = ""
            if errors is not None:
                errors.seek(0)
                said = errors.read()
                errors.close()
        if expired.is_set():
            raise RuntimeError(f"{' '.join(cmd[:3])} ...: no result within {timeout_s:.0f} s")
        if proc.returncode != 0 or not lines or not lines[-1].startswith('{"done"'):
            tail = " | ".join((said + "\n".join(lines)).strip().splitlines()[-3:])
            raise RuntimeError(f"{' '.join(cmd[:3])} ... ended with exit code {proc.returncode}: {tail}")
        return list(json.loads(lines[-1])["done"])


def job_line(line: str) -> tuple[str, bool] | None:
    """``(run_dir, finished)`` from the line rank 0 prints as a job ends; ``None`` for any other."""
    if not line.startswith('{"job"'):
        return None
    try:
        said = json.loads(line)
        return str(said["job"]), bool(said["finished"])
    except (ValueError, KeyError):
        return None


def job(overrides: list[str], topology: str, ranks: int, run_dir: Path, *extra: str) -> dict[str, Any]:
    """One job of a spec: the user's overrides for ``topology`` on ``ranks`` ranks, quiet,
    then ``extra`` (later overrides win)."""

    return {"overrides": [*cell_overrides(overrides, topology), *QUIET, *extra],
            "ranks": ranks, "run_dir": str(run_dir)}


def calibration_jobs(overrides: list[str], cells: list[tuple[str, int]], seconds: float,
                     root: Path) -> list[dict]:
    """One short job per (topology, size) of ``cells``: ``seconds`` of training whatever
    the config's step budget (a job as short as a fast config's budget would weigh its first and
    last rounds as heavily as its noise; the model is compared at the steps the job made)."""
    return [job(overrides, name, ranks, root / f"calibrate_{name}_n{ranks}",
                "run.max_env_steps=null", f"run.max_train_seconds={seconds:g}")
            for name, ranks in cells]


def measure(out: Path, overrides: list[str], topologies: list[str], ranks: list[int],
            repeats: int = 1) -> int:
    """``--measure``: every accepted (topology, size) cell of the config, one job each; with
    ``repeats`` the whole list again that many times (interleaved, so a drifting host spreads
    over every cell; ``--compare`` averages a cell's runs)."""

    cfgs, refused = configs(overrides, topologies)
    cells = [cell for cell, reason in cell_refusals(cfgs, {}, ranks).items() if reason is None]
    jobs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        for name, n in cells:
            suffix = f"_r{repeat}" if repeats > 1 else ""
            jobs.append(job(overrides, name, n, out / f"{len(jobs)}_{name}_n{n}{suffix}"))
    print(f"drlmpi.planner.jobs: {len(jobs)} job(s) in one launch into {out}"
          + (f"; not composed: {', '.join(refused)}" if refused else ""), file=sys.stderr, flush=True)
    end_on_sigterm()  # the launch is ended with its ranks
    try:
        done = launch(jobs, timeout_s=120 + 120 * len(jobs), quiet=False, on_job=say_job)
    except RuntimeError as exc:  # the launch failed or timed out: its words, in one line
        print(f"drlmpi.planner.jobs: error: {exc}", file=sys.stderr)
        return 1
    print(f"drlmpi.planner.jobs: {len(done)} of {len(jobs)} finished", file=sys.stderr)
    return 0 if len(done) == len(jobs) else 1


def say_job(run_dir: str, finished: bool) -> None:
    """``--measure``'s line as each job ends."""
    print(f"drlmpi.planner.jobs: {Path(run_dir).name} {'finished' if finished else 'did not finish'}",
          file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] != "--measure":
        if not Path(argv[0]).is_file():  # a spec is the planner's own launch; by hand: --measure
            print(f"python -m drlmpi.planner.jobs: error: no spec file {argv[0]} (the planner writes one; "
                  f"to measure by hand: --measure DIR)", file=sys.stderr)
            return 2
        from drlmpi.job_control.process import yield_when_oversubscribed

        yield_when_oversubscribed()  # as every rank of a job does, before MPI starts
        done = run_spec(json.loads(Path(argv[0]).read_text()))
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() == 0:
            print(json.dumps({"done": done}), flush=True)
        return 0
    parser = ArgumentParser(prog="python -m drlmpi.planner.jobs")
    parser.add_argument("--measure", type=Path, required=True, help="the folder the runs go into")
    parser.add_argument("--ranks", type=world_sizes, default=[1, 2], help="comma-separated world sizes")
    parser.add_argument("--topologies", default="sequential,star")
    parser.add_argument("--repeats", type=positive_int, default=1, help="measure every cell this many times")
    args, overrides = parser.parse_known_args(argv)
    try:
        check_output_folder("--measure", args.measure)
    except ConfigError as exc:
        parser.error(str(exc))
    return measure(args.measure, overrides, [t for t in args.topologies.split(",") if t], args.ranks,
                   args.repeats)


def world_sizes(text: str) -> list[int]:
    """argparse ``type=``: comma-separated world sizes (``1,2,4``), sorted, each once."""
    try:
        found = sorted({positive_int(r.strip()) for r in text.split(",") if r.strip()})
    except argparse.ArgumentTypeError:
        found = []
    if not found:
        raise argparse.ArgumentTypeError(f"comma-separated world sizes >= 1 are needed, e.g. 1,2,4, "
                                         f"got {text!r}")
    return found


if __name__ == "__main__":
    sys.exit(main())
