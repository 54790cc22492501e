"""One sweep per sweep directory: ``sweep.lock`` names the host and process of the sweep that runs
in it, as ``run.lock`` names a run's (:mod:`drlmpi.run.ownership`, whose helpers write and read
both).

Two sweeps in one directory would run the same jobs into the same run directories: the second
empties a directory the first's job is writing, or its job is refused by that job's lock. So the
sweeping process claims ``hydra.sweep.dir`` before it writes there (``multirun.yaml``,
``provenance.json``, ``jobs.json``) or starts a job:

* a ``sweep.lock`` whose process runs on this host, or that another host wrote (which this one
  cannot check), is a live sweep: the new one is refused in one line naming it;
* one whose process is gone on this host (a sweep killed with -9) is stale: that sweep counts as
  finished, said in one line, and the new one continues it;
* a finished sweep (no lock) is continued - ``jobs.json`` says which of its jobs are done - as
  long as every job it lists under one of the new sweep's job numbers is the same job (the same
  overrides); a sweep of other jobs is refused in one line.

The lock is removed when the sweeping process exits (a finished, failed, stopped or interrupted
sweep alike); a tuner's later launches in the same process find their own lock.
"""

from __future__ import annotations

import atexit
from pathlib import Path

from drlmpi.config.errors import ConfigError
from drlmpi.run.ownership import held_by, is_stale, lock_owner, owner_of, read_lock, release, write_lock
from drlmpi.sweep.jobs import JOBS_FILE, read_records

SWEEP_LOCK = "sweep.lock"


def _live_sweep(sweep_dir: Path, holder: dict) -> str:
    if not holder:
        return (f"hydra.sweep.dir has an unreadable {SWEEP_LOCK}: if no sweep uses the directory, "
                f"delete it; got {sweep_dir}")
    return held_by("hydra.sweep.dir", "sweep", sweep_dir, holder, SWEEP_LOCK, wait="wait for it to end or ")


def claim_sweep(sweep_dir: Path | str) -> str | None:
    """Make this process the sweep of ``sweep_dir`` (created if needed) until it exits. Returns a
    note to print (a stale lock: its sweep counts as finished) or ``None``; raises
    :class:`ConfigError` for a directory a live sweep holds."""
    sweep_dir = Path(sweep_dir).expanduser().absolute()
    holder = read_lock(sweep_dir, SWEEP_LOCK)
    if holder is not None and owner_of(holder) == lock_owner():
        return None  # claimed by this process already (the sweeper, then each launch)
    note = None
    if holder is not None:
        if not is_stale(holder):
            raise ConfigError(_live_sweep(sweep_dir, holder))
        note = (f"drlmpi: note: {sweep_dir / SWEEP_LOCK} named pid {holder['pid']}, which is no longer "
                "running (a sweep that was killed): it counts as finished, and this sweep continues it")
        (sweep_dir / SWEEP_LOCK).unlink(missing_ok=True)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if not write_lock(sweep_dir, replace=False, name=SWEEP_LOCK):  # another sweep claimed it in between
        raise ConfigError(_live_sweep(sweep_dir, read_lock(sweep_dir, SWEEP_LOCK) or {}))
    atexit.register(release, sweep_dir, SWEEP_LOCK)
    return note


def other_jobs(sweep_dir: Path | str, jobs: list[list[str]], first: int = 0) -> str | None:
    """Why ``jobs`` (the overrides of job numbers ``first``, ``first + 1``, ...) cannot continue
    the sweep whose ``jobs.json`` is in ``sweep_dir`` - the first job number it lists with other
    overrides - or ``None`` (no such job: none listed, or each the same)."""
    sweep_dir = Path(sweep_dir)
    listed = {r["job"]: r.get("overrides") for r in read_records(sweep_dir / JOBS_FILE)[0]
              if isinstance(r.get("job"), int)}
    for number, overrides in enumerate(jobs, start=first):
        if number in listed and listed[number] != list(overrides):
            return (f"hydra.sweep.dir holds a sweep of other jobs (job {number} there: "
                    f"{' '.join(map(str, listed[number] or []))!r}, here: {' '.join(overrides)!r}): re-run "
                    f"the command that made it to continue it, or choose another directory; got {sweep_dir}")
    return None
