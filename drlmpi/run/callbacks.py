"""Hydra callbacks (``hydra.callbacks`` in conf/config.yaml): checks that need the directory or
the sweeper Hydra resolved, made before Hydra writes anything or a sweep starts a job.

* ``on_run_start`` (one run; rank 0): claim the run directory (:mod:`drlmpi.run.ownership`)
  when the command line did not name it as a plain path - the default
  ``outputs/<date>/<time>_...`` directory that two runs started in the same second would share;
* ``on_multirun_start`` (the sweeping process): a tuning sweep's objective and direction
  (:func:`drlmpi.run.objective.check_tuning`).
"""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class RunChecks(Callback):
    """Refuses, in one line, a run directory taken by another run and a tuning sweep that cannot
    tune; see the module docstring."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from drlmpi.config.errors import ConfigError
        from drlmpi.config.scopes import RootSettings, RunSettings
        from drlmpi.job_control.abort import CONFIG_ERROR_EXIT, end_job
        from drlmpi.job_control.process import first_process, under_mpi_launcher
        from drlmpi.run.ownership import claim, say

        if not first_process():
            return
        try:
            settings = RootSettings.build(config)
            say(claim(config.hydra.run.dir, overwrite=RunSettings.build(config.run).overwrite,
                      resuming=settings.resume is not None))
        except ConfigError as exc:
            several = False
            if under_mpi_launcher():
                from mpi4py import MPI

                several = MPI.COMM_WORLD.Get_size() > 1
            end_job(f"drlmpi: error: {exc}", CONFIG_ERROR_EXIT, abort=several)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from drlmpi.job_control.abort import CONFIG_ERROR_EXIT, end_job
        from drlmpi.run.objective import check_tuning
        from drlmpi.run.ownership import say

        try:
            say(check_tuning(config))
        except ValueError as exc:
            end_job(f"drlmpi: error: {exc}", CONFIG_ERROR_EXIT, abort=False)
