"""One run per run directory: ``run.lock`` names the host and process that own it.

Two jobs writing one directory interleave ``metrics.csv`` and overwrite each other's checkpoints;
a command re-run with a finished run's ``hydra.run.dir`` replaces its results. So, before any
rank starts (in the process the user started, for a ``hydra.run.dir`` given literally or
``resume=``; otherwise on rank 0 once Hydra has resolved the directory, before it writes there),
the run *locks* its directory:

* a ``run.lock`` whose process is alive on this host, or that was written on another host (which
  this one cannot check), is a live run: refused in one line;
* a ``run.lock`` whose process is gone on this host (a job killed with -9, or ended by its
  watchdog) is stale: taken over, with a note;
* a directory holding a finished run (``summary.json``) is refused unless the run continues it
  (``resume=``) or replaces it (``run.overwrite=true``: its summary, policy, checkpoints and
  TensorBoard files are removed first).

The lock is written whole (a temporary file hard-linked into place, which fails if another run
linked first). A process that re-launches itself under ``mpiexec`` passes ``host:pid`` of its
lock to the ranks in ``DRLMPI_RUN_LOCK``; rank 0 recognises it as its own and rewrites it with
its pid. Rank 0 removes the lock when the run ends (a clean end, a refusal, a crash it reports).
Multirun jobs are locked by their own ranks, like any run (the sweep launcher starts each job
with its ``hydra.run.dir``); the sweeping process locks the sweep directory with a lock of the
same form and the same rules (``sweep.lock``, :mod:`drlmpi.sweep.lock`), through the helpers
below that take the lock file's name.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

from drlmpi.config.errors import ConfigError
from drlmpi.job_control.process import stat_fields

LOCK_FILE = "run.lock"
#: ``host:pid`` of the lock a re-launching process took for the ranks it starts
INHERITED_LOCK = "DRLMPI_RUN_LOCK"
#: what ``run.overwrite=true`` removes of the finished run (metrics.csv is rewritten by the run)
REPLACED = ("summary.json", "policy.pt", "checkpoint", "tb", "stop_request")


def lock_owner() -> str:
    """``host:pid`` of this process, as a lock names its owner."""
    return f"{socket.gethostname()}:{os.getpid()}"


def read_lock(run_dir: Path, name: str = LOCK_FILE) -> dict | None:
    """The lock's ``{"host", "pid", "started"}`` (``None``: no lock; ``{}``: unreadable)."""
    try:
        holder = json.loads((Path(run_dir) / name).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs. A zombie does not: a rank killed with -9 stays
    one until reaped, which in a container without an init process may be never."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    fields = stat_fields(pid)
    if fields is None:  # no /proc (not Linux): the signal's answer stands
        return True
    return fields[0] not in ("Z", "X")


def owner_of(holder: dict) -> str:
    """``host:pid`` of a lock's holder, as :func:`lock_owner` names this process."""
    return f"{holder.get('host')}:{holder.get('pid')}"


def holder_text(holder: dict) -> str:
    """``pid P on host H, started T``: a lock's holder, as a refusal names it."""
    return f"pid {holder.get('pid')} on host {holder.get('host')}, started {holder.get('started')}"


def is_stale(holder: dict) -> bool:
    """Whether a lock names a process of this host that no longer runs (one of another host
    cannot be checked, an unreadable one names none: neither is stale)."""
    return (holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int)
            and not _alive(holder["pid"]))


def write_lock(run_dir: Path, replace: bool, name: str = LOCK_FILE) -> bool:
    """Write this process's lock; without ``replace``, only if none exists (``False``: one did)."""
    lock = Path(run_dir) / name
    tmp = lock.with_name(f"{name}.{os.getpid()}.tmp")
    host, pid = lock_owner().rsplit(":", 1)
    tmp.write_text(json.dumps({"host": host, "pid": int(pid),
                               "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
    try:
        if replace:
            os.replace(tmp, lock)
            return True
        try:
            os.link(tmp, lock)  # atomic and exclusive: two runs starting together, one wins
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)


def held_by(option: str, kind: str, directory: Path, holder: dict, name: str, wait: str = "") -> str:
    """Why ``directory`` (``option``) cannot be claimed: its lock ``name`` names the ``kind`` (run,
    sweep) of ``holder``, live on this host, or on another host that this one cannot check
    (``wait``: what to do before choosing another directory)."""
    where = holder_text(holder)
    if holder.get("host") == socket.gethostname():
        return f"{option} holds a live {kind} ({where}): {wait}choose another directory, got {directory}"
    return (f"{option} holds a {kind} of another host ({where}), which this host cannot check: if it "
            f"has ended, delete {Path(directory) / name}; got {directory}")


def _live_run(run_dir: Path, holder: dict) -> str:
    return held_by("hydra.run.dir", "run", run_dir, holder, LOCK_FILE)


def claim(run_dir: Path | str, *, overwrite: bool = False, resuming: bool = False) -> str | None:
    """Make this process the owner of ``run_dir`` (created if needed). Returns a note to print
    (a stale lock taken over) or ``None``; raises :class:`ConfigError` for a directory that holds
    a live run, or a finished one that this run neither continues nor replaces."""
    run_dir = Path(run_dir).expanduser().absolute()
    holder = read_lock(run_dir)
    if holder is not None:
        if owner_of(holder) in (lock_owner(), os.environ.get(INHERITED_LOCK)):  # this process or its launcher
            write_lock(run_dir, replace=True)
            return None
    note = None
    if holder is not None:
        if not is_stale(holder):
            raise ConfigError(_live_run(run_dir, holder) if holder else
                              f"hydra.run.dir has an unreadable {LOCK_FILE}: if no run uses the directory, "
                              f"delete it; got {run_dir}")
        note = (f"drlmpi: note: {run_dir / LOCK_FILE} named pid {holder['pid']}, which is no longer "
                f"running (a run that was killed): taken over")
    if (run_dir / "summary.json").exists() and not resuming:
        if not overwrite:
            resumable = (run_dir / "checkpoint" / "meta.json").is_file()
            go_on = f"continue it with resume={run_dir}, " if resumable else ""
            raise ConfigError(f"hydra.run.dir holds a finished run (summary.json): {go_on}replace it with "
                              f"run.overwrite=true, or choose another directory, got {run_dir}")
        for name in REPLACED:
            path = run_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    if holder is not None:
        (run_dir / LOCK_FILE).unlink(missing_ok=True)
    if not write_lock(run_dir, replace=False):  # another run claimed it in between
        raise ConfigError(_live_run(run_dir, read_lock(run_dir) or {}))
    return note


def release(run_dir: Path | str, name: str = LOCK_FILE) -> None:
    """Remove ``run_dir``'s lock if this process holds it."""
    holder = read_lock(Path(run_dir), name)
    if holder and owner_of(holder) == lock_owner():
        (Path(run_dir) / name).unlink(missing_ok=True)


def say(note: str | None) -> None:
    if note:
        print(note, file=sys.stderr, flush=True)
