"""Command-line entry point: ``python -m drlmpi [overrides]``.

Every rank of an MPI job runs this. Hydra on its own would give each rank its own
``${now:...}`` run directory and let all ranks race on ``.hydra/``; so before Hydra starts,
rank 0 picks the launch time and broadcasts it (the ``launch_time`` resolver used by
``hydra.run.dir``), ranks other than 0 are told not to write ``.hydra/``, and every rank logs
to its own ``rank<r>.log``.

A failure on one rank prints ``drlmpi: rank R failed: ...`` and aborts the whole MPI job, so
no rank is left waiting in a collective. Configuration errors are detected identically by
every rank before any communication and end the job with exit code 2. A rank that stops making
progress for ``run.rank_timeout_s`` is ended by its watchdog (:mod:`drlmpi.watchdog`), which
prints one line and aborts the job with exit code 3.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from datetime import datetime
from pathlib import Path

# Importing the schema registers every option's default with Hydra (conf/ builds on them).
from drlmpi.schema import CONF_DIR, check_override, help_lines

CRASH_EXIT = 1  # a rank raised
CONFIG_ERROR_EXIT = 2  # the configuration was refused before any communication
HANG_EXIT = 3  # a rank made no progress for run.rank_timeout_s (its watchdog ended the job)
CONFIG_ERROR_GRACE_S = 3.0
# Before MPI_Abort kills the job, give the launcher a moment to forward the line just printed:
# under load an immediate abort can lose a rank's last output.
ABORT_FLUSH_S = 0.5
_launch_time = datetime.now()


def _is_multirun(argv: list[str]) -> bool:
    """Whether the command is a sweep: ``-m``/``--multirun``, ``hydra.mode=MULTIRUN``, or an
    experiment preset (``+experiment=NAME``) whose file sets ``hydra.mode: MULTIRUN`` - then a
    single ``world_size=N`` is one sweep value, never a reason to re-launch under mpiexec."""
    if any(a in ("-m", "--multirun") for a in argv) or "hydra.mode=MULTIRUN" in argv:
        return True
    from omegaconf import OmegaConf

    for arg in argv:
        key, _, names = arg.lstrip("+").partition("=")
        if key != "experiment":
            continue
        for name in names.split(","):
            path = CONF_DIR / "experiment" / f"{name.strip()}.yaml"
            if path.is_file():
                preset = OmegaConf.load(path)
                if OmegaConf.select(preset, "hydra.mode", default=None) == "MULTIRUN":
                    return True
    return False


def _launch_time_resolver(fmt: str = "%Y-%m-%d_%H-%M-%S") -> str:
    return _launch_time.strftime(fmt)


# Environment variables by which MPI launchers (MPICH/Hydra, Open MPI, PMIx/Slurm, Cray PALS)
# tell a process it is one rank of a job.
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PALS_RANK",
                      "MPI_LOCALNRANKS")


def under_mpi_launcher() -> bool:
    """Whether this process was started by an MPI launcher (else it is a singleton)."""
    return any(v in os.environ for v in LAUNCHER_VARIABLES)


def yield_when_oversubscribed() -> None:
    """Ask the MPI library to yield the core while it waits, when this host has more ranks than
    cores (must run before MPI is initialised).

    MPICH and Open MPI busy-poll while a rank waits in a receive or collective. With more ranks
    than cores a waiting simulator then steals the learner's core: on 2 cores, star with 4 ranks
    ran at half the throughput (250 vs 487 updates/s) until waiting ranks yielded. MPICH (4.3 and
    later) is also told to sleep after a few empty polls (its progress throttle): a yielding rank
    still takes a whole idle core, a throttled one about 1% of it while it waits (3 ranks on 2
    cores, one of them stopped: 100% -> 2% CPU), and throughput is unchanged (star, 4 ranks on
    2 cores, env.sim_cost_ms=1: 1,148-1,158 env steps/s either way). Setting ``DRLMPI_YIELD=0``
    or ``=1`` forces the choice; the libraries' own variables, if set, win.
    """
    local = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") \
        or os.environ.get("PMI_SIZE")
    forced = os.environ.get("DRLMPI_YIELD")
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        cores = os.cpu_count() or 1
    oversubscribed = local is not None and local.isdigit() and int(local) > cores
    if forced == "1" or (forced != "0" and oversubscribed):
        os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")  # MPICH
        os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")  # MPICH >= 4.3: sleep when idle
        os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT", "4")
        os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")  # Open MPI


def _requested_world_size(argv: list[str]) -> int | None:
    for arg in argv:
        if arg.startswith("world_size="):
            value = arg.split("=", 1)[1]
            return int(value) if value.isdigit() else None
    return None


def _relaunch_under_mpiexec(argv: list[str], ranks: int) -> None:
    """``python -m drlmpi world_size=N`` started alone: re-execute under ``mpiexec -n N``."""
    cmd = ["mpiexec", "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "drlmpi", *argv]
    print(f"drlmpi: world_size={ranks}: starting {' '.join(cmd)}", file=sys.stderr, flush=True)
    try:
        os.execvp(cmd[0], cmd)
    except FileNotFoundError:
        sys.exit("drlmpi: error: world_size>1 needs 'mpiexec' on PATH (pip install mpich), or "
                 "start the job with your MPI launcher")


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


def set_thread_counts(threads: object) -> None:
    """``threads_per_rank`` for the OpenMP and MKL runtimes as well as torch's intra-op pool
    (set before torch is imported; ranks sharing a host must not each start one thread per
    core)."""
    if isinstance(threads, int) and threads >= 1:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)


def _task(cfg) -> int:
    """Hydra's task function: run one experiment on COMM_WORLD."""
    from hydra.core.hydra_config import HydraConfig
    from mpi4py import MPI

    set_thread_counts(cfg.get("threads_per_rank"))
    from drlmpi.algos.base import ConfigError
    from drlmpi.run import run_experiment

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if HydraConfig.initialized():
        run_dir = Path(HydraConfig.get().runtime.output_dir)
    else:  # pragma: no cover (only when called without Hydra)
        run_dir = Path.cwd()
    try:
        run_experiment(cfg, world, run_dir, hang_exit=HANG_EXIT)
    except ConfigError as exc:
        # Every rank normally refuses the same config before any message: rank 0 reports it
        # once and ends the job. Other ranks give it a moment and speak (and abort) only if it
        # did not - should one rank find a problem its peers did not, nobody waits for it.
        if rank != 0:
            time.sleep(CONFIG_ERROR_GRACE_S)
        print(f"drlmpi: error: {exc}" if rank == 0 else f"drlmpi: error (rank {rank}): {exc}",
              file=sys.stderr, flush=True)
        if world.Get_size() > 1:
            sys.stderr.flush()
            time.sleep(ABORT_FLUSH_S)
            world.Abort(CONFIG_ERROR_EXIT)
        sys.exit(CONFIG_ERROR_EXIT)
    except BaseException as exc:  # noqa: BLE001 (any crash must take the whole job down)
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        detail = traceback.format_exc()
        print(f"drlmpi: rank {rank} failed: {type(exc).__name__}: {exc}\n{detail}",
              file=sys.stderr, flush=True)
        if world.Get_size() > 1:
            sys.stderr.flush()
            time.sleep(ABORT_FLUSH_S)
            world.Abort(CRASH_EXIT)
        sys.exit(CRASH_EXIT)
    return 0


USAGE = """\
drlmpi - deep RL experiments across MPI ranks, with interchangeable topologies

usage:
  python -m drlmpi [key=value ...]                         one run (world_size=N re-launches under mpiexec)
  mpiexec -n N python -m mpi4py -m drlmpi topology=star    one run on N ranks
  python -m drlmpi -m topology=star,async world_size=4,8   a sweep: one MPI job per combination
  python -m drlmpi +experiment=learning_matrix             a study preset (conf/experiment/)
  python -m drlmpi resume=RUN_DIR                          continue a run from its last checkpoint
  python -m drlmpi.report RUN_OR_SWEEP_DIR ...             tables and plots from run directories
  python -m drlmpi.play RUN_DIR                            replay a trained policy

config groups: algo=dqn|td3|ppo|random  env=cartpole|lunarlander|pendulum
               topology=sequential|p2p|star|parameter_server|async|allgather
  --hydra-help  Hydra's own options     --cfg job  print the composed config and exit
Options (type and allowed values are checked before any rank starts; docs/configuration.md):"""


def print_help() -> None:
    """``--help``: the usage header and every option's one-line doc, from the schema."""
    print(USAGE)
    print("\n".join(help_lines()))


def _chosen(argv: list[str], group: str, default: str) -> str | None:
    """The ``group=name`` the command line picks (``None`` when a preset may change it)."""
    for arg in argv:
        key, _, value = arg.lstrip("+").partition("=")
        if key == group:
            return value if "," not in value else None
    if any(a.lstrip("+").startswith("experiment") for a in argv):
        return None
    return default


def check_command_line(argv: list[str]) -> None:
    """Raise ConfigError, before Hydra or MPI start, for an override whose value the schema
    rejects (every value of a sweep)."""
    scopes = {"algo": _chosen(argv, "algo", "dqn"), "topology": _chosen(argv, "topology", "sequential")}
    for arg in argv:
        if not arg.startswith("-"):
            check_override(arg, scopes)


def check_output_directories(argv: list[str]) -> None:
    """Raise ConfigError for an output directory (``hydra.run.dir``, ``hydra.sweep.dir``, or the
    current directory for the default ``outputs/`` and ``multirun/``) that cannot be written."""
    for arg in argv:
        key, _, value = arg.partition("=")
        if key in ("hydra.run.dir", "hydra.sweep.dir") and "${" not in value:
            check_writable(key, value)
    if not any(a.startswith(("hydra.run.dir", "hydra.sweep.dir")) for a in argv):
        check_writable("the current directory (outputs/, multirun/)", ".")


def check_writable(option: str, path: str) -> None:
    """Raise ConfigError unless a file can be written in directory ``path`` (created for the
    check if it does not exist, and removed again with every level the check created)."""
    import tempfile

    from drlmpi.algos.base import ConfigError

    target = Path(path).expanduser().absolute()
    created: list[Path] = []
    probe = target
    while not probe.exists() and probe != probe.parent:
        created.append(probe)
        probe = probe.parent
    try:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=target):
            pass
    except OSError as exc:
        raise ConfigError(f"{option} is not a writable directory ({exc.strerror}), got {path}") from None
    finally:
        for level in created:  # deepest first
            try:
                level.rmdir()
            except OSError:
                break


#: overrides a resumed run may change (budgets and reporting; anything else would change the run).
RESUME_MAY_CHANGE = ("run.max_env_steps", "run.max_train_seconds", "run.max_episodes",
                     "run.checkpoint_every_s", "run.progress_every_s", "run.stop_on_solve")


def resume_arguments(argv: list[str]) -> tuple[list[str], int]:
    """``resume=DIR [budget overrides]`` -> the run's own overrides (``DIR/.hydra/overrides.yaml``)
    plus those, ``resume=DIR`` and ``hydra.run.dir=DIR``; and the checkpoint's world size.
    Refuses, in one line, a directory without a checkpoint and overrides that would change
    the run (another topology, algorithm or size)."""
    import json

    from omegaconf import OmegaConf

    from drlmpi.algos.base import ConfigError
    from drlmpi.checkpoint import read_meta

    value = next(a for a in argv if a.startswith("resume=")).split("=", 1)[1]
    run_dir = Path(value).expanduser().absolute()
    extra = [a for a in argv if not a.startswith("resume=")]
    for arg in extra:
        if arg.partition("=")[0] not in RESUME_MAY_CHANGE:
            raise ConfigError(f"resume=DIR continues a run with its own configuration; only "
                              f"{', '.join(RESUME_MAY_CHANGE)} may be changed, got {arg}")
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    if not overrides_file.is_file():
        raise ConfigError(f"resume: {value} is not a drlmpi run directory (no .hydra/overrides.yaml), "
                          f"got {value}")
    try:
        meta = read_meta(run_dir)
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"resume: the checkpoint description cannot be read ({exc}), got {value}") from None
    if meta is None:
        raise ConfigError(f"resume: {value} has no checkpoint yet (one is written every "
                          f"run.checkpoint_every_s seconds), got {value}")
    saved = [str(o) for o in OmegaConf.load(overrides_file)
             if not str(o).startswith(("resume=", "hydra.run.dir=")) and str(o) not in extra]
    return [*saved, *extra, f"resume={run_dir}", f"hydra.run.dir={run_dir}"], int(meta["world_size"])


def main(argv: list[str] | None = None) -> None:
    """Parse overrides, share the run directory across ranks and hand over to Hydra."""
    import hydra
    from omegaconf import OmegaConf

    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("--help", "-h") for a in argv):
        print_help()
        return
    from drlmpi.algos.base import ConfigError

    given = list(argv)
    resume_ranks = None
    launched = under_mpi_launcher()
    first = not launched or os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == "0"
    every_rank_refuses = True
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
    except ConfigError as exc:
        if first:
            print(f"drlmpi: error: {exc}", file=sys.stderr, flush=True)
        if launched and not every_rank_refuses:
            from mpi4py import MPI

            time.sleep(ABORT_FLUSH_S)
            MPI.COMM_WORLD.Abort(CONFIG_ERROR_EXIT)
        sys.exit(CONFIG_ERROR_EXIT)
    single = not _is_multirun(argv) and not any(a in ("--hydra-help", "--cfg", "-c", "--info")
                                                for a in argv)
    if single:
        ranks = _requested_world_size(argv) if resume_ranks is None else resume_ranks
        if ranks is not None and ranks > 1 and not under_mpi_launcher():
            _relaunch_under_mpiexec(given, ranks)  # the ranks read the same files again
        argv = _prepare_single_run(argv)
    OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True)
    sys.argv = [sys.argv[0], *argv]
    config_dir = str(CONF_DIR)
    if not os.path.isdir(config_dir):  # pragma: no cover
        sys.exit(f"drlmpi: error: config directory {config_dir} not found (install with pip -e)")
    hydra.main(config_path=config_dir, config_name="config", version_base="1.3")(_task)()


if __name__ == "__main__":
    main()
