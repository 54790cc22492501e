"""``hydra/launcher=mpi``: every job of a multirun sweep gets its own MPI world.

Hydra ships no MPI launcher, and a job that needs N ranks cannot run inside the sweeping
process. This launcher composes each job's config *in the sweeping process*, validates it
with :func:`drlmpi.run.validate` (so a combination that cannot run - p2p on 4 ranks, DQN on
Pendulum - is skipped with a line saying why before any rank starts), then runs

    <mpiexec> <ranks_flag> N <extra_args> python -m mpi4py -m drlmpi <job overrides>
        hydra.run.dir=<sweep dir>/<subdir>

as a subprocess in its own process group, with the job's output in ``<run dir>/job.log``.
N is the job's ``world_size`` (or, when that is null, the smallest size its topology
accepts). A failed job is reported with its exit code and the tail of its log; the sweep goes
on with the remaining jobs, writes ``jobs.json`` at the sweep root and then lets Hydra exit
non-zero. The sweeping process never imports ``mpi4py.MPI`` (never initialises MPI).

Options (``hydra.launcher.<key>=...``): ``mpiexec`` (list, default ``[mpiexec]``; e.g.
``[srun, --mpi=pmix]``), ``ranks_flag`` (``-n``), ``extra_args`` (e.g. ``[-f, hosts.txt]``
or ``[--oversubscribe]``), ``python`` (default: this interpreter), ``timeout_s`` (per job),
``invalid`` (``skip`` | ``fail``), ``dry_run`` (print the commands, run nothing), ``env``
(extra environment variables for the jobs).
"""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional  # noqa: UP035 (OmegaConf needs typing generics)

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

log = logging.getLogger(__name__)
LOG_TAIL_LINES = 15
JOBS_FILE = "jobs.json"


@dataclass
class MPILauncherConf:
    """Options of ``hydra/launcher=mpi`` (see the module docstring)."""

    # Hydra's plugin scanner loads this module outside sys.modules: no postponed annotations,
    # and OmegaConf needs typing's generics here.
    _target_: str = "hydra_plugins.drlmpi_launcher.mpi_launcher.MPILauncher"
    mpiexec: List[str] = field(default_factory=lambda: ["mpiexec"])  # noqa: UP006
    ranks_flag: str = "-n"
    extra_args: List[str] = field(default_factory=list)  # noqa: UP006
    python: Optional[str] = None  # noqa: UP045
    timeout_s: Optional[float] = None  # noqa: UP045
    invalid: str = "skip"
    dry_run: bool = False
    env: Dict[str, str] = field(default_factory=dict)  # noqa: UP006


ConfigStore.instance().store(group="hydra/launcher", name="mpi", node=MPILauncherConf,
                             provider="drlmpi")


class JobFailedError(RuntimeError):
    """A job of the sweep exited non-zero (its exit code and log tail are in the message)."""


def job_ranks(cfg: DictConfig) -> int:
    """The world size a job asks for: ``world_size``, else its topology's smallest size."""
    if cfg.get("world_size") is not None:
        return int(cfg.world_size)
    from drlmpi.run import resolve_classes

    return int(resolve_classes(cfg)[1].min_ranks)


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


class MPILauncher(Launcher):
    """Runs each multirun job as ``mpiexec -n N python -m mpi4py -m drlmpi ...``."""

    def __init__(self, mpiexec: list[str] | None = None, ranks_flag: str = "-n",
                 extra_args: list[str] | None = None, python: str | None = None,
                 timeout_s: float | None = None, invalid: str = "skip", dry_run: bool = False,
                 env: dict[str, str] | None = None) -> None:
        if invalid not in ("skip", "fail"):
            raise ValueError(f"hydra.launcher.invalid must be 'skip' or 'fail', got {invalid!r}")
        self.mpiexec = list(mpiexec or ["mpiexec"])
        self.ranks_flag = ranks_flag
        self.extra_args = list(extra_args or [])
        self.python = python or sys.executable
        self.timeout_s = timeout_s
        self.invalid = invalid
        self.dry_run = dry_run
        self.env = dict(env or {})
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.records: list[dict[str, Any]] = []

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def command(self, overrides: list[str], ranks: int, run_dir: Path) -> list[str]:
        """The command line of one job."""
        return [*self.mpiexec, self.ranks_flag, str(ranks), *self.extra_args, self.python,
                "-m", "mpi4py", "-m", "drlmpi", *overrides, f"hydra.run.dir={run_dir}",
                "hydra.mode=RUN"]  # a preset may set MULTIRUN: the job itself is one run

    def launch(self, job_overrides, initial_job_idx: int) -> list[JobReturn]:
        from drlmpi.algos.base import ConfigError
        from drlmpi.run import validate

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        total = initial_job_idx + len(job_overrides)
        returns = []
        for offset, overrides in enumerate(job_overrides):
            idx = initial_job_idx + offset
            overrides = list(overrides)
            label = " ".join(filter_overrides(overrides)) or "(defaults)"
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
            with open_dict(cfg):
                cfg.hydra.job.id = idx
                cfg.hydra.job.num = idx
            run_dir = sweep_dir / str(cfg.hydra.sweep.subdir)
            record: dict[str, Any] = {"job": idx, "overrides": overrides, "run_dir": str(run_dir)}
            try:
                ranks = job_ranks(cfg)
                validate(cfg, ranks)
            except ConfigError as exc:
                record.update(status="skipped" if self.invalid == "skip" else "failed",
                              returncode=None, reason=str(exc))
                self.records.append(record)
                log.info(f"[{idx + 1}/{total}] {label}: skipped: {exc}")
                status = JobStatus.COMPLETED if self.invalid == "skip" else JobStatus.FAILED
                value: Any = f"skipped: {exc}" if self.invalid == "skip" else JobFailedError(
                    f"job {idx} ({label}) cannot run: {exc}")
                returns.append(self._job_return(overrides, cfg, run_dir, status, value))
                continue
            cmd = self.command(overrides, ranks, run_dir)
            record.update(ranks=ranks, command=cmd)
            if self.dry_run:
                log.info(f"[{idx + 1}/{total}] {label}: would run: {' '.join(cmd)}")
                record.update(status="dry_run", returncode=None)
                self.records.append(record)
                returns.append(self._job_return(overrides, cfg, run_dir, JobStatus.COMPLETED, cmd))
                continue
            log.info(f"[{idx + 1}/{total}] {label}: {ranks} rank(s) ...")
            returncode, seconds = self._run(cmd, run_dir)
            record.update(returncode=returncode, seconds=round(seconds, 2))
            if returncode == 0:
                record["status"] = "ok"
                summary = _read_summary(run_dir)
                outcome = ("solved" if summary and summary.get("solved") else "not solved")
                log.info(f"[{idx + 1}/{total}] {label}: ok ({outcome}, {seconds:.1f} s)")
                returns.append(self._job_return(overrides, cfg, run_dir, JobStatus.COMPLETED, summary))
            else:
                log_tail = tail(run_dir / "job.log")
                record.update(status="failed", log_tail=log_tail)
                log.error(f"[{idx + 1}/{total}] {label}: FAILED with exit code {returncode} "
                          f"after {seconds:.1f} s; last lines of {run_dir / 'job.log'}:\n{log_tail}")
                error = JobFailedError(f"job {idx} ({label}) exited with code {returncode}; "
                                  f"log: {run_dir / 'job.log'}")
                returns.append(self._job_return(overrides, cfg, run_dir, JobStatus.FAILED, error))
            self.records.append(record)
        counts = {s: sum(r["status"] == s for r in self.records) for s in ("ok", "failed", "skipped")}
        self._write_records(sweep_dir)
        log.info(f"sweep: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped; "
                 f"jobs listed in {sweep_dir / JOBS_FILE}")
        return returns

    def _run(self, cmd: list[str], run_dir: Path) -> tuple[int, float]:
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **{k: str(v) for k, v in self.env.items()}}
        start = time.perf_counter()
        with open(run_dir / "job.log", "w") as out:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            try:
                returncode = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                out.write(f"\ndrlmpi launcher: killed after timeout_s={self.timeout_s}\n")
                returncode = -signal.SIGKILL
        return returncode, time.perf_counter() - start

    def _job_return(self, overrides: list[str], cfg: DictConfig, run_dir: Path,
                    status: JobStatus, value: Any) -> JobReturn:
        ret = JobReturn(overrides=overrides, cfg=cfg, hydra_cfg=None, working_dir=str(run_dir),
                        task_name="drlmpi", status=status)
        ret.return_value = value
        return ret

    def _write_records(self, sweep_dir: Path) -> None:
        path = sweep_dir / JOBS_FILE
        existing = json.loads(path.read_text()) if path.exists() else []
        path.write_text(json.dumps(existing + self.records, indent=2) + "\n")
        self.records = []


def _read_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
