"""``hydra/sweeper=drlmpi`` (the default): Hydra's basic sweeper, composing each job once.

Hydra's basic sweeper composes every job of a batch to check that it can be composed, then hands
the batch to the launcher, which composes each again. Hydra does the first for launchers that
compose elsewhere (another process or machine), to fail early. :class:`MPILauncher` composes and
checks every job in the sweeping process before any job starts - and reports a combination that
cannot run as a skipped job with its reason, where the check would end the sweep - so with it the
check is only a second composition of every job (about 0.3 s a job on one core: 40 s of a
126-job study before its first job starts). With any other launcher the check runs as before.
Everything else - the grid of ``hydra.sweeper.params``, ``max_batch_size`` - is the basic
sweeper's.

With :class:`MPILauncher` it also claims the sweep directory for the whole job list
(:meth:`MPILauncher.claim`, :mod:`drlmpi.sweep.lock`) as soon as the basic sweeper has made the
list - before it writes ``multirun.yaml`` there - so a sweep refused for a live sweep in the same
directory, or for one of other jobs, leaves that sweep's files as they were.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence  # noqa: UP035 (OmegaConf needs typing generics)

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override

from hydra_plugins.drlmpi_launcher.mpi_launcher import MPILauncher


@dataclass
class MPISweeperConf:
    """Options of ``hydra/sweeper=drlmpi``: the basic sweeper's."""

    # Loaded by Hydra's plugin scanner outside sys.modules: no postponed annotations.
    _target_: str = "hydra_plugins.drlmpi_launcher.mpi_sweeper.MPISweeper"
    max_batch_size: Optional[int] = None  # noqa: UP045
    params: Optional[Dict[str, str]] = None  # noqa: UP006, UP045


class MPISweeper(BasicSweeper):
    """The basic sweeper; a batch for :class:`MPILauncher` is composed by the launcher alone."""

    def split_arguments(self, overrides: List[Override], max_batch_size: Optional[int]  # noqa: UP006, UP045
                        ) -> List[List[List[str]]]:  # noqa: UP006
        """The basic sweeper's batches; with :class:`MPILauncher`, the sweep directory claimed for
        all of them first (the basic sweeper calls this before it writes ``multirun.yaml``)."""
        batches = BasicSweeper.split_arguments(overrides, max_batch_size)
        if isinstance(self.launcher, MPILauncher):
            self.launcher.claim([job for batch in batches for job in batch])
        return batches

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        if isinstance(self.launcher, MPILauncher):
            return  # MPILauncher composes and checks each job in this process, before any starts
        super().validate_batch_is_legal(batch)


ConfigStore.instance().store(group="hydra/sweeper", name="drlmpi", node=MPISweeperConf, provider="drlmpi")
