"""Command-line entry point: ``python -m drlmpi [overrides]``.

Every rank of an MPI job runs this. Hydra on its own would give each rank its own
``${now:...}`` run directory and let all ranks race on ``.hydra/``; so before Hydra starts,
rank 0 picks the launch time and broadcasts it (the ``launch_time`` resolver used by
``hydra.run.dir``), ranks other than 0 are told not to write ``.hydra/``, and every rank logs
to its own ``rank<r>.log``.

A failure on one rank prints ``drlmpi: rank R failed: ...`` and aborts the whole MPI job, so
no rank is left waiting in a collective. Configuration errors are detected identically by
every rank before any communication and end the job with exit code 2.
"""

from __future__ import annotations

import os
import sys
import traceback
from datetime import datetime
from pathlib import Path

CONFIG_ERROR_EXIT = 2
CRASH_EXIT = 1
_launch_time = datetime.now()


def _is_multirun(argv: list[str]) -> bool:
    return any(a in ("-m", "--multirun") for a in argv)


def _launch_time_resolver(fmt: str = "%Y-%m-%d_%H-%M-%S") -> str:
    return _launch_time.strftime(fmt)


def _prepare_single_run(argv: list[str]) -> list[str]:
    """Share one launch time and run directory across ranks; per-rank Hydra settings."""
    global _launch_time
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    _launch_time = world.bcast(_launch_time if world.Get_rank() == 0 else None, root=0)
    rank = world.Get_rank()
    extra = [f"hydra.job.name=rank{rank}"]
    if rank != 0:
        extra.append("hydra.output_subdir=null")
    return extra + argv  # before the user's overrides (argparse stops at options such as --cfg)


def _task(cfg) -> int:
    """Hydra's task function: run one experiment on COMM_WORLD."""
    from hydra.core.hydra_config import HydraConfig
    from mpi4py import MPI

    from drlmpi.algos.base import ConfigError
    from drlmpi.run import run_experiment

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if HydraConfig.initialized():
        run_dir = Path(HydraConfig.get().runtime.output_dir)
    else:  # pragma: no cover (only when called without Hydra)
        run_dir = Path.cwd()
    try:
        run_experiment(cfg, world, run_dir)
    except ConfigError as exc:
        if rank == 0:
            print(f"drlmpi: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(CONFIG_ERROR_EXIT)
    except BaseException as exc:  # noqa: BLE001 (any crash must take the whole job down)
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        detail = traceback.format_exc()
        print(f"drlmpi: rank {rank} failed: {type(exc).__name__}: {exc}\n{detail}",
              file=sys.stderr, flush=True)
        if world.Get_size() > 1:
            world.Abort(CRASH_EXIT)
        sys.exit(CRASH_EXIT)
    return 0


def main(argv: list[str] | None = None) -> None:
    """Parse overrides, share the run directory across ranks and hand over to Hydra."""
    import hydra
    from omegaconf import OmegaConf

    argv = list(sys.argv[1:] if argv is None else argv)
    if not _is_multirun(argv) and not any(a in ("--help", "-h", "--hydra-help") for a in argv):
        argv = _prepare_single_run(argv)
    OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True)
    sys.argv = [sys.argv[0], *argv]
    config_dir = str(Path(__file__).resolve().parent.parent / "conf")
    if not os.path.isdir(config_dir):  # pragma: no cover
        sys.exit(f"drlmpi: error: config directory {config_dir} not found (install with pip -e)")
    hydra.main(config_path=config_dir, config_name="config", version_base="1.3")(_task)()


if __name__ == "__main__":
    main()
