"""The MPI side of the test pool (:mod:`tests.mpi_pool`): one long-lived MPI job whose ranks run
test jobs in-process, each on a communicator over the pool's first K ranks.

Started as ``mpiexec -n SIZE python -m mpi4py -m tests.pool_worker CONTROL_DIR OWNER_PID``.
Every rank reads the jobs ``CONTROL_DIR/job-<n>.json`` in order; a job names a function
(``module:name``) called as ``function(comm, **kwargs)`` on its first ``ranks`` ranks, the others
skip it. Rank 0 writes ``result-<n>.json`` with the function's return value (JSON). A rank whose
function raises writes ``error-<n>-rank<r>.txt`` (the traceback); in a job of several ranks it
then ends the pool with ``MPI_Abort``, since its peers may be waiting for it in a collective -
the client reports the error and starts a new pool for the next job. Ranks outside a job wait
by polling the directory, never in MPI, so they cost no CPU.

The functions below are what tests run here: :func:`experiment` (what ``python -m drlmpi``
does after Hydra composed the config, on the job's communicator), :func:`resume` and
:func:`data_parallel` (``tests/dp_reference.py``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HANG_EXIT = 3


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_for(path: Path, stop: Path, owner: int) -> bool:
    """Poll for ``path`` (True) until ``stop`` appears or the client process is gone (False)."""
    delay, checked = 0.001, time.monotonic()
    while not path.exists():
        if stop.exists():
            return False
        if time.monotonic() - checked > 1.0:
            if not _owner_alive(owner):
                return False
            checked = time.monotonic()
        time.sleep(delay)
        delay = min(delay * 2, 0.01)
    return True


def _resolve(name: str):
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


def serve(control: Path, owner: int) -> None:
    """The pool's loop on this rank (see the module docstring)."""
    from drlmpi.job_control.process import yield_when_oversubscribed

    yield_when_oversubscribed()  # more ranks than cores: waiting ranks must yield their core
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    comms: dict[int, Any] = {1: MPI.COMM_SELF}
    stop = control / "stop"
    n = 0
    while _wait_for(control / f"job-{n}.json", stop, owner):
        job = json.loads((control / f"job-{n}.json").read_text())
        ranks = int(job["ranks"])
        if rank < ranks:
            if ranks not in comms:
                group = world.Get_group().Range_incl([(0, ranks - 1, 1)])
                comms[ranks] = world.Create_group(group, tag=ranks)
                group.Free()
            try:
                value = _resolve(job["function"])(comms[ranks], **job["kwargs"])
            except BaseException:  # noqa: BLE001 (any failure is reported to the client)
                _write_atomically(control / f"error-{n}-rank{rank}.txt", traceback.format_exc())
                if ranks > 1:
                    sys.stderr.flush()
                    time.sleep(0.2)
                    world.Abort(1)
            else:
                if rank == 0:
                    _write_atomically(control / f"result-{n}.json", json.dumps({"value": value}))
        n += 1


# -- what tests run in the pool ----------------------------------------------------------------
def compose(overrides: list[str]):
    """The config ``python -m drlmpi OVERRIDES`` composes (the command line checked first)."""
    from drlmpi.run.arguments import check_command_line
    from drlmpi.run.prelaunch import job_config

    check_command_line(overrides)
    return job_config(list(overrides))


def _write_hydra_files(cfg: Any, overrides: list[str], run_dir: Path) -> None:
    """``.hydra/config.yaml`` and ``overrides.yaml`` as Hydra writes them (the report and
    ``resume=`` read them)."""
    from omegaconf import OmegaConf

    hydra_dir = run_dir / ".hydra"
    hydra_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, hydra_dir / "config.yaml")
    OmegaConf.save(OmegaConf.create(list(overrides)), hydra_dir / "overrides.yaml")


def experiment(comm: Any, overrides: list[str], run_dir: str) -> str:
    """One run of ``overrides`` on ``comm`` writing ``run_dir`` (as ``hydra.run.dir``); on the
    stamped task with the ledger of its rows."""
    import contextlib

    from drlmpi.run.experiment import run_experiment
    from tests.row_ledger import STAMPED_CUE, recording

    path = Path(run_dir)
    cfg = compose(overrides)
    if comm.Get_rank() == 0:
        _write_hydra_files(cfg, overrides, path)
    # a run on the stamped task keeps a ledger of its rows (tests/row_ledger.py)
    stamped = STAMPED_CUE in overrides
    with recording(path, comm.Get_rank()) if stamped else contextlib.nullcontext():
        run_experiment(cfg, comm, path, hang_exit=HANG_EXIT)
    if stamped:  # every rank's ledger is written before rank 0 reports the run done (and a test reads
        comm.Barrier()  # them): a slow rank's file was once still missing under load
    return run_dir


def resume(comm: Any, run_dir: str, extra: list[str] | None = None) -> str:
    """``python -m drlmpi resume=RUN_DIR [extra]`` on ``comm`` (which must have the checkpoint's
    world size)."""
    from drlmpi.run.arguments import resume_arguments
    from drlmpi.run.experiment import run_experiment

    argv, ranks = resume_arguments([f"resume={run_dir}", *(extra or [])])
    if ranks != comm.Get_size():
        raise ValueError(f"the checkpoint has {ranks} rank(s), the pool job {comm.Get_size()}")
    overrides = [a for a in argv if not a.startswith("hydra.")]
    run_experiment(compose(overrides), comm, Path(run_dir), hang_exit=HANG_EXIT)
    return run_dir


def slow_to_build(comm: Any, overrides: list[str], run_dir: str, rank: int, delay_s: float) -> str:
    """:func:`experiment` with rank ``rank`` ``delay_s`` seconds late building its first network
    (as a rank whose CUDA context is made after fifteen others' is)."""
    from drlmpi.topologies.core.context import RunContext

    if comm.Get_rank() != rank:
        return experiment(comm, overrides, run_dir)
    build, built = RunContext.make_algo, []

    def late(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not built:
            time.sleep(delay_s)
        built.append(True)
        return build(self, *args, **kwargs)

    RunContext.make_algo = late
    try:
        return experiment(comm, overrides, run_dir)
    finally:
        RunContext.make_algo = build


def data_parallel(comm: Any, mode: str, out_dir: str, updates: int, names: list[str]) -> None:
    """``tests/dp_reference.py``'s updates on ``comm``."""
    from tests.dp_reference import main

    main(mode, out_dir, updates, names, world=comm)


def call_with_attribute(comm: Any, call: str, attribute: str, **kwargs: Any) -> Any:
    """``call(comm, **kwargs)`` (``call`` as ``module:name``), then return ``attribute``
    (``module:name``) as it is in this process afterwards (what a test class recorded while the
    run used it)."""
    _resolve(call)(comm, **kwargs)
    return _resolve(attribute)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]))
