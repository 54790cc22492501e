"""The environment variables drlmpi reads (:data:`VARIABLES`; docs/configuration.md's table lists
the same), and :func:`check_environment`: a value a variable does not take is refused before Hydra or
MPI start, with the command line's checks and in their words, as the same choice given as an
override would be - not later, on every rank, as a traceback.

``DRLMPI_MPIEXEC`` (and the retired ``DRLMPI_PLAN_MPIEXEC``) are checked where a launch is about to
be made (:func:`drlmpi.job_control.launchers.mpiexec_command`), ``DRLMPI_PLUGIN_PATH`` where config
files are looked up (:func:`drlmpi.config.plugins.plugin_dirs`): each in one line too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

#: ``bind_ranks`` values, and ``DRLMPI_BIND_RANKS``'s (:func:`drlmpi.job_control.process.bind_rank`)
BIND_CHOICES = ("auto", "core", "none")


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, the values it takes (``None``: any text, checked where
    it is used, if at all) and what it does."""

    name: str
    choices: tuple[str, ...] | None
    meaning: str


VARIABLES = (
    Variable("DRLMPI_BIND_RANKS", BIND_CHOICES, "replaces bind_ranks=auto (an explicit bind_ranks= wins)"),
    Variable("DRLMPI_YIELD", ("0", "1"), "1: waiting ranks yield the core (and MPICH sleeps); 0: never; "
                                         "unset: when a host's ranks fill its cores"),
    Variable("DRLMPI_CUDNN_BENCHMARK", ("0", "1"), "0: no cuDNN autotuning for a CUDA learner on images "
                                                   "(unset or 1: on)"),
    Variable("DRLMPI_MPIEXEC", None, "the launch command of every launch drlmpi makes (default mpiexec)"),
    Variable("DRLMPI_PLUGIN_PATH", None, "plugin directories laid out as conf/, separated by ':'"),
    Variable("DRLMPI_COMMIT", None, "the commit provenance.json records (else the checkout's)"),
)


def check_environment(environ: Mapping[str, str] = os.environ) -> None:
    """Raise :class:`~drlmpi.config.errors.ConfigError` for a variable of :data:`VARIABLES` set to
    a value it does not take (an empty one counts as unset, as where it is read)."""
    from drlmpi.config.errors import ConfigError

    for variable in VARIABLES:
        value = environ.get(variable.name)
        if value and variable.choices is not None and value not in variable.choices:
            raise ConfigError(f"{variable.name} must be one of {', '.join(variable.choices)}, got {value!r} "
                              f"(or unset it)")
