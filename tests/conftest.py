"""Shared test fixtures and paths.

``pool``: the session's MPI pool (:mod:`tests.mpi_pool`), which runs multi-rank jobs in-process.
``runs``: the shared runs (tests/shared_runs.py) - each declared run is started once per session
in the pool, and every test that names it asserts on the same run directory.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# One thread per process, as drlmpi's ranks run (threads_per_rank=1): the test process shares the
# machine with the pool's ranks and the jobs it starts, and idle OpenMP threads spin.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The suite's jobs share the machine with each other (two workers, each starting jobs): a job
# that pinned its ranks to "its" cores would pin them onto another job's (bind_ranks=auto).
os.environ.setdefault("DRLMPI_BIND_RANKS", "none")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from drlmpi.envs import families  # noqa: E402
from drlmpi.envs.make import probe_spec  # noqa: E402
from drlmpi.topologies.core.registry import register  # noqa: E402

register()  # every topology's options in the schema, before any test composes a config
families.register()  # and every environment family's (the env files start from them)
from tests.mpi_pool import Pool, PoolJob  # noqa: E402
from tests.shared_runs import CATALOGUE  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"


#: test files run at a time (``-n auto``, pyproject.toml): two keep a 2-core machine busy while a
#: test waits (a hung job's timeout, a signal) or runs one rank; each worker starts its own MPI
#: pool, so more would multiply the ranks without a core for them
MAX_WORKERS = 2


def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def cartpole():
    """CartPole-v1's spaces (discrete actions)."""
    return probe_spec("CartPole-v1")


@pytest.fixture(scope="session")
def pendulum():
    """Pendulum-v1's spaces (continuous actions)."""
    return probe_spec("Pendulum-v1")


@dataclass
class RunResult:
    """A finished run's directory, read as tests need it."""

    run_dir: Path

    def summary(self) -> dict[str, Any]:
        """The run's ``summary.json``."""
        return json.loads((self.run_dir / "summary.json").read_text())

    def rows(self, kind: str) -> list[dict[str, str]]:
        """``metrics.csv`` rows of one kind (``episode`` or ``eval``)."""
        with open(self.run_dir / "metrics.csv", newline="") as fh:
            return [r for r in csv.DictReader(fh) if r["kind"] == kind]

    def returns(self, kind: str = "episode") -> list[float]:
        """The ``return`` column of the rows of one kind, in order."""
        return [float(r["return"]) for r in self.rows(kind)]


@pytest.fixture(scope="session")
def pool(tmp_path_factory):
    """The session's MPI pool (started by its first job)."""
    started = Pool(root=tmp_path_factory.mktemp("pool"))
    yield started
    started.close()


def run_in_pool(pool: Pool, ranks: int, overrides: list[str], run_dir: Path,
                timeout: float = 120.0) -> PoolJob:
    """Submit ``python -m drlmpi OVERRIDES`` on ``ranks`` pool ranks, writing ``run_dir``."""
    return pool.submit(ranks, "tests.pool_worker:experiment", timeout=timeout,
                       overrides=list(overrides), run_dir=str(run_dir))


class SharedRuns:
    """The declared runs (tests/shared_runs.py), each started at most once; ``get`` waits for one."""

    def __init__(self, pool: Pool, root: Path) -> None:
        self.pool = pool
        self.root = root
        self.jobs: dict[str, PoolJob] = {}

    def start(self, name: str) -> None:
        """Queue the run ``name`` unless it is queued already."""
        if name not in self.jobs:
            ranks, overrides = CATALOGUE[name]
            self.jobs[name] = run_in_pool(self.pool, ranks, list(overrides), self.root / name)

    def get(self, name: str) -> RunResult:
        """The finished run ``name``."""
        self.start(name)
        return RunResult(Path(self.jobs[name].result()))


@pytest.fixture(scope="session")
def runs(pool, tmp_path_factory):
    """The session's shared runs (see :class:`SharedRuns`)."""
    return SharedRuns(pool, tmp_path_factory.mktemp("shared-runs"))



#: MPICH's shared-memory segments; a job that is killed (the hang, crash and kill -9 tests) or
#: aborted leaves its segment behind in /dev/shm, about 2.6 MB each
SHM_SEGMENTS = Path("/dev/shm")
SHM_PREFIX = "mpich_shm_"


def _mapped_segments() -> set[str]:
    """The segment names some live process still maps."""
    names: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        names.update(word.rsplit("/", 1)[-1] for word in text.split() if SHM_PREFIX in word)
    return names


def pytest_sessionstart(session) -> None:
    session.config.stash_shm = {p.name for p in SHM_SEGMENTS.glob(f"{SHM_PREFIX}*")}


def pytest_sessionfinish(session, exitstatus) -> None:
    """Remove the segments this session's killed jobs left behind (none that was there before
    it, none that a live process still maps), so repeated runs do not fill /dev/shm."""
    before = getattr(session.config, "stash_shm", None)
    if before is None:
        return
    left = [p for p in SHM_SEGMENTS.glob(f"{SHM_PREFIX}*") if p.name not in before]
    if not left:
        return
    mapped = _mapped_segments()
    for path in left:
        if path.name not in mapped:
            path.unlink(missing_ok=True)
