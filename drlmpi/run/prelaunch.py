"""The job's check before ``python -m drlmpi world_size=N`` starts N ranks.

Started alone with ``world_size=N``, drlmpi re-executes itself under ``mpiexec -n N``
(:mod:`drlmpi.run.command_line`). Every rank then makes the run plan
(:func:`drlmpi.run.preflight.make_plan`) and a bad combination ends the job in one line - but
only after N processes started, imported torch, and rank 0 aborted the others (the launcher
adds its own abort line). :func:`check_before_launch` makes the same plan here first, with the
config Hydra will compose for the ranks, so a job that cannot run is refused before any rank
starts, as a sweep refuses one of its jobs (the sweep launcher makes each job's plan too).

This process never talks MPI: it execs ``mpiexec`` next. mpi4py is told not to initialise MPI
when the plan's imports load it, since an initialised singleton may leave a helper process
behind the exec.
"""

from __future__ import annotations

from typing import Any

from drlmpi.config.plugins import CONF_DIR


def job_config(argv: list[str]) -> Any:
    """The config the ranks will compose from ``argv`` (Hydra's compose API: the same files,
    presets and overrides; ``hydra.*`` overrides set where the run writes, not what it runs)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = [a for a in argv if not a.lstrip("+~").startswith(("hydra.", "hydra/", "-"))]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def check_before_launch(argv: list[str], ranks: int) -> None:
    """Raise :class:`~drlmpi.config.errors.ConfigError` (one line) if the job ``argv`` cannot run
    on ``ranks`` ranks: the plan every rank would make, made once, before any rank starts."""
    if any(a.startswith("-") for a in argv):
        return  # Hydra's own flags (--config-dir, ...): the ranks compose with them and check
    import mpi4py
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from drlmpi.config.errors import ConfigError
    from drlmpi.run.preflight import make_plan

    initialize, mpi4py.rc.initialize = mpi4py.rc.initialize, False  # see the module's docstring
    try:
        try:
            cfg = job_config(argv)
        except (HydraException, OmegaConfBaseException) as exc:  # the ranks would fail alike
            raise ConfigError(str(exc).strip().splitlines()[0]) from exc
        make_plan(cfg, ranks)
    finally:  # a process that goes on in-process (a test, a caller of this function) has MPI as before
        mpi4py.rc.initialize = initialize
