"""Command-line entry point: ``python -m drlmpi [overrides]``.

Every rank of an MPI job runs this. Hydra on its own would give each rank its own
``${now:...}`` run directory and let all ranks race on ``.hydra/``; so before Hydra starts,
rank 0 picks the launch time and broadcasts it (the ``launch_time`` resolver used by
``hydra.run.dir``), ranks other than 0 are told not to write ``.hydra/``, and every rank logs
to its own ``rank<r>.log``.

A failure on one rank prints ``drlmpi: rank R failed: ...`` and aborts the whole MPI job, so
no rank is left waiting in a collective. Configuration errors are detected identically by
every rank before any communication and end the job with exit code 2. A rank that stops making
progress for ``run.rank_timeout_s`` is ended by its watchdog (:mod:`drlmpi.job_control.watchdog`), which
prints one line and aborts the job with exit code 3.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

# Importing the schema registers its options' defaults with Hydra (conf/ builds on them); the
# environment families' and the topologies' options are registered by check_command_line
# (drlmpi.envs.families, drlmpi.topologies.core.registry).
import drlmpi.config.schema  # noqa: F401
from drlmpi.config.choices import check_group_choices
from drlmpi.config.overrides import find, hydra_order, parse, value_text, values
from drlmpi.config.plugins import CONF_DIR, group_files
from drlmpi.job_control.abort import (
    CONFIG_ERROR_EXIT,
    CONFIG_ERROR_GRACE_S,
    CRASH_EXIT,
    HANG_EXIT,
    NON_FINITE_EXIT,
    SIGNAL_EXIT,
    end_job,
)
from drlmpi.job_control.process import (
    bind_rank,
    ends_job_at_first_failure,
    first_process,
    set_thread_counts,
    under_mpi_launcher,
    yield_when_oversubscribed,
)
from drlmpi.run.arguments import (
    check_command_line,
    check_output_directories,
    claim_run_directory,
    resume_arguments,
)
from drlmpi.run.ownership import INHERITED_LOCK, lock_owner, release
from drlmpi.run.prelaunch import check_before_launch
from drlmpi.run.reference import print_help
from drlmpi.run.relaunch import missing_launcher, relaunch_under_mpiexec, requested_world_size

if TYPE_CHECKING:
    from omegaconf import DictConfig

_launch_time = datetime.now()
#: the sweeper of a sweep that names none (:func:`_with_default_sweeper`)
DEFAULT_SWEEPER = "hydra/sweeper=drlmpi"


def _presets(argv: list[str]) -> Iterator[DictConfig]:
    """The experiment presets the command line picks (``+experiment=NAME``), as their files
    (conf/'s or a plugin directory's, as Hydra finds them)."""
    from drlmpi.config.inputs import read_yaml

    presets = None
    for override in parse(argv):
        if override.key_or_group == "experiment":
            presets = group_files("experiment") if presets is None else presets
            for name in values(override) or []:
                if name in presets:
                    yield read_yaml(presets[name], kind=dict)


def _is_multirun(argv: list[str]) -> bool:
    """Whether the command is a sweep: ``-m``/``--multirun``, ``hydra.mode=MULTIRUN``, or an
    experiment preset (``+experiment=NAME``) whose file sets ``hydra.mode: MULTIRUN`` - then a
    single ``world_size=N`` is one sweep value, never a reason to re-launch under mpiexec."""
    from omegaconf import OmegaConf

    if any(a in ("-m", "--multirun") for a in argv) or any(
            o.key_or_group == "hydra.mode" and value_text(o) == "MULTIRUN" for o in parse(argv)):
        return True
    return any(OmegaConf.select(p, "hydra.mode", default=None) == "MULTIRUN" for p in _presets(argv))


def single_run_world_size(argv: list[str]) -> int | None:
    """The ranks a single run asks for: its ``world_size=N``, else the ``world_size`` a preset it
    picks sets (``+experiment=ppo_breakout_16``: 16), else ``None`` (no relaunch)."""
    if find(argv, "world_size") is not None:
        return requested_world_size(argv)
    for preset in _presets(argv):
        size = preset.get("world_size")
        if isinstance(size, int) and not isinstance(size, bool):
            return size
    return None


#: options that only print (the config, Hydra's help or its info): no run, no sweep
PRINTING = ("--hydra-help", "--cfg", "-c", "--info")


def _is_single_run(argv: list[str]) -> bool:
    """One run (not a sweep, nor a command that only prints the config or Hydra's help)."""
    return not _is_multirun(argv) and not any(a in PRINTING for a in argv)


def _with_default_sweeper(argv: list[str]) -> list[str]:
    """A sweep that picks no sweeper - neither on the command line nor in its preset's defaults
    (``override /hydra/sweeper: optuna``) - runs with ``hydra/sweeper=drlmpi``, Hydra's basic
    sweeper composing each job once (``hydra_plugins/drlmpi_launcher/mpi_sweeper.py``). Chosen
    here rather than in conf/config.yaml: Hydra keeps the first override of a group, so one there
    would beat every preset's. The override joins the others (argparse wants them together)."""
    if not _is_multirun(argv) or any(a in PRINTING for a in argv):
        return argv
    picked = [str(entry) for preset in _presets(argv) if "defaults" in preset for entry in preset.defaults]
    picked += [o.key_or_group for o in parse(argv)]
    if any("hydra/sweeper" in choice for choice in picked):
        return argv
    at = next((i for i, a in enumerate(argv) if "=" in a and not a.startswith("-")), len(argv))
    return [*argv[:at], DEFAULT_SWEEPER, *argv[at:]]


def _launch_time_resolver(fmt: str = "%Y-%m-%d_%H-%M-%S") -> str:
    return _launch_time.strftime(fmt)


def _prepare_single_run(argv: list[str]) -> list[str]:
    """Share one launch time and run directory across ranks; per-rank Hydra settings.

    A singleton (no MPI launcher) needs no broadcast and does not initialise MPI here.
    """
    global _launch_time
    rank = 0
    if under_mpi_launcher():
        yield_when_oversubscribed()
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        _launch_time = world.bcast(_launch_time if world.Get_rank() == 0 else None, root=0)
        rank = world.Get_rank()
    extra = [f"hydra.job.name=rank{rank}"]
    if rank != 0:
        extra.append("hydra.output_subdir=null")
    return extra + argv  # before the user's overrides (argparse stops at options such as --cfg)

#: how long ranks other than 0 wait for rank 0's abort before exiting by themselves
SIGNAL_EXIT_WAIT_S = 30.0
#: errors of writing that are the file system's, not drlmpi's: told in one line
WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


def _task(cfg) -> float | int:
    """Hydra's task function: run one experiment on COMM_WORLD. With ``run.objective`` set, rank 0
    returns the run's objective value (a tuner's trial result, :mod:`drlmpi.run.objective`)."""
    from hydra.core.hydra_config import HydraConfig
    from mpi4py import MPI

    from drlmpi.config.scopes import RootSettings, RunSettings
    from drlmpi.envs.families import env_threads

    root = RootSettings.build(cfg)  # (its values checked on the command line; all of them by the plan)
    set_thread_counts(root.threads_per_rank)
    threads = max(root.threads_per_rank, env_threads(cfg.env))
    bind_rank(root.bind_ranks, MPI.COMM_WORLD, threads)  # before torch starts threads
    from drlmpi.config.errors import ConfigError, NonFiniteError
    from drlmpi.outputs.files import FileWriteError
    from drlmpi.run.experiment import run_experiment

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if HydraConfig.initialized():
        run_dir = Path(HydraConfig.get().runtime.output_dir)
    else:  # pragma: no cover (only when called without Hydra)
        run_dir = Path.cwd()
    summary = None
    try:
        try:
            summary = run_experiment(cfg, world, run_dir, hang_exit=HANG_EXIT)
        finally:  # before any end_job below: its MPI_Abort ends this process at once
            if rank == 0:
                release(run_dir)
    except ConfigError as exc:
        # Every rank normally refuses the same config before any message: rank 0 reports it
        # once and ends the job. Other ranks give it a moment and speak (and abort) only if it
        # did not - should one rank find a problem its peers did not, nobody waits for it.
        if rank != 0:
            time.sleep(CONFIG_ERROR_GRACE_S)
        end_job(f"drlmpi: error: {exc}" if rank == 0 else f"drlmpi: error (rank {rank}): {exc}",
                CONFIG_ERROR_EXIT, abort=world.Get_size() > 1)
    except NonFiniteError as exc:
        # Not a bug of drlmpi's: one line, no traceback; MPI_Abort so no peer is left waiting.
        # Data-parallel learners may all see it at once: rank 0 speaks at once, the others a
        # second apart in rank order, so the first one's abort lands before the next speaks.
        if rank != 0:
            time.sleep(CONFIG_ERROR_GRACE_S + min(rank, 10))
        end_job(f"drlmpi: error: rank {rank} stopped the run: {exc}", NON_FINITE_EXIT,
                abort=world.Get_size() > 1)
    except FileWriteError as exc:
        # A file of the run the file system refused (a checkpoint, policy.pt, summary.json): one
        # line naming it. In a collective checkpoint several ranks may fail alike: rank 0 speaks
        # and aborts; another rank only if rank 0's abort has not ended it after a moment.
        if rank != 0:
            time.sleep(CONFIG_ERROR_GRACE_S)
        end_job(f"drlmpi: rank {rank} failed: {exc}", CRASH_EXIT, abort=world.Get_size() > 1)
    except OSError as exc:
        if exc.errno not in WRITE_FAILURES:
            end_job(f"drlmpi: rank {rank} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}",
                    CRASH_EXIT, abort=world.Get_size() > 1)
        # A full disk (or a read-only or over-quota one) is not a bug: one line, no traceback.
        end_job(f"drlmpi: rank {rank} failed: cannot write {exc.filename or run_dir}: {exc.strerror}",
                CRASH_EXIT, abort=world.Get_size() > 1)
    except BaseException as exc:  # noqa: BLE001 (any crash must take the whole job down)
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        end_job(f"drlmpi: rank {rank} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}",
                CRASH_EXIT, abort=world.Get_size() > 1)
    from drlmpi.job_control.stop import STOP

    if STOP.stopped_run:  # stopped by a signal, checkpoint written: a documented exit status
        _exit_after_signal_stop()
    run = RunSettings.build(cfg.run)
    if run.objective and summary is not None:
        from drlmpi.run.objective import objective_value

        return objective_value(summary, run.objective, run.objective_unsolved)
    return 0


def _exit_after_signal_stop() -> NoReturn:
    """End the job with :data:`SIGNAL_EXIT` once every rank is done (checkpoint, summary and
    logs written): the ranks meet in a barrier, then rank 0 ends the job with
    ``MPI_Abort(SIGNAL_EXIT)`` while the others wait for it. Measured with MPICH's hydra, ranks
    that exit on their own with a non-zero code race each other (the launcher kills the ones
    still finalizing, exit 9) and the first exit's code wins; an abort gives the code every time.
    A job of one rank simply exits with it."""
    import logging

    from mpi4py import MPI

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
        world = MPI.COMM_WORLD
        world.Barrier()
        if world.Get_rank() == 0:
            world.Abort(SIGNAL_EXIT)
        time.sleep(SIGNAL_EXIT_WAIT_S)  # rank 0's abort ends this process
        os._exit(SIGNAL_EXIT)
    if MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.Finalize()
    os._exit(SIGNAL_EXIT)


def main(argv: list[str] | None = None) -> None:
    """Parse overrides, share the run directory across ranks and hand over to Hydra."""
    import hydra
    from omegaconf import OmegaConf

    argv = list(sys.argv[1:] if argv is None else argv)
    from drlmpi.config.errors import ConfigError

    if any(a in ("--help", "-h", "--help-all") for a in argv):
        try:  # `env=lunar --help`: the typo is said, as a run would say it, not left unseen
            check_group_choices(argv)
        except ConfigError as exc:
            end_job(f"drlmpi: error: {exc}", CONFIG_ERROR_EXIT, abort=False)
        print_help(full="--help-all" in argv)
        return

    given = list(argv)
    resume_ranks = None
    launched = under_mpi_launcher()
    first = not launched or first_process()
    every_rank_refuses = True
    claimed: str | None = None  # the run directory this process claimed
    try:
        # The same files and overrides give every rank the same verdict: all of them stop here.
        if any(a.startswith("resume=") for a in argv):
            argv, resume_ranks = resume_arguments(argv)
        check_command_line(argv)
        # Test-writing directories is rank 0's alone (ranks would race on the probe folders);
        # its refusal must then end the other ranks, which carry on into MPI.
        every_rank_refuses = False
        if first:
            check_output_directories(argv)
            if _is_single_run(argv):  # a live or finished run in hydra.run.dir: refused here
                claimed = claim_run_directory(argv)
    except ConfigError as exc:
        if launched and every_rank_refuses and not first and ends_job_at_first_failure():
            # Every rank refuses, rank 0 alone says so: where the launcher ends the job at the
            # first rank to fail (Open MPI), another rank must not fail before rank 0 has spoken.
            # Rank 0's exit then ends this one; the grace only bounds a rank 0 that never speaks.
            time.sleep(CONFIG_ERROR_GRACE_S)
        end_job(f"drlmpi: error: {exc}" if first else None, CONFIG_ERROR_EXIT,
                abort=launched and not every_rank_refuses)
    if _is_single_run(argv):
        ranks = single_run_world_size(argv) if resume_ranks is None else resume_ranks
        if ranks is not None and ranks > 1 and not under_mpi_launcher():
            try:  # the plan every rank would make, once, before any rank starts
                from drlmpi.job_control.launchers import mpiexec_command

                launcher = mpiexec_command()  # one it cannot use (DRLMPI_MPIEXEC): refused alike
                if shutil.which(launcher[0]) is None:  # said before "starting", with the same code
                    raise ConfigError(missing_launcher(launcher[0]))
                check_before_launch(argv, ranks)
            except ConfigError as exc:
                if claimed:
                    release(claimed)
                end_job(f"drlmpi: error: {exc}", CONFIG_ERROR_EXIT, abort=False)
            if claimed:  # rank 0 takes the lock over from this process (which waits for the job)
                os.environ[INHERITED_LOCK] = lock_owner()
            relaunch_under_mpiexec(given, ranks)  # the ranks read the same files again
        argv = _prepare_single_run(argv)
    else:
        argv = _with_default_sweeper(argv)
    # Cached, as Hydra's own ${now:}: a launcher that runs the jobs in other processes
    # (Submitit: pickled, run in Slurm jobs) hands them the master config's cached values, so
    # every job writes into the sweep directory the launch time named, not its own start time.
    OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True, use_cache=True)
    sys.argv = [sys.argv[0], *hydra_order(argv)]
    config_dir = str(CONF_DIR)
    if not os.path.isdir(config_dir):  # pragma: no cover
        sys.exit(f"drlmpi: error: config directory {config_dir} not found (install with pip -e)")
    hydra.main(config_path=config_dir, config_name="config", version_base="1.3")(_task)()


if __name__ == "__main__":
    main()
