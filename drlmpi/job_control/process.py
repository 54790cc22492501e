"""This process as one rank of an MPI job, before MPI starts: whether a launcher started it, thread
counts, and yielding the core while waiting when ranks outnumber cores.
"""

from __future__ import annotations

import os

# Environment variables by which MPI launchers (MPICH/Hydra, Open MPI, PMIx/Slurm, Cray PALS)
# tell a process it is one rank of a job.
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PALS_RANK",
                      "MPI_LOCALNRANKS")


def under_mpi_launcher() -> bool:
    """Whether this process was started by an MPI launcher (else it is a singleton)."""
    return any(v in os.environ for v in LAUNCHER_VARIABLES)


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity; every CPU where there is none)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        return list(range(os.cpu_count() or 1))


def first_process() -> bool:
    """Whether this process is the job's rank 0 (or a singleton), read from the launcher's
    variables before MPI starts."""
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if name in os.environ:
            return os.environ[name] == "0"
    return True


def ends_job_at_first_failure() -> bool:
    """Whether the launcher ends every rank as soon as one exits non-zero, before MPI starts
    (Open MPI's ``mpirun`` does; MPICH's ``mpiexec`` waits for each rank to exit on its own)."""
    return "OMPI_COMM_WORLD_RANK" in os.environ


def yield_when_oversubscribed() -> None:
    """Ask the MPI library to yield the core while it waits when the job's ranks fill the host,
    and to sleep when they exceed its cores (must run before MPI is initialised).

    MPICH and Open MPI busy-poll while a rank waits in a receive or collective. With more ranks
    than cores a waiting simulator then steals the learner's core: on 2 cores, star with 4 ranks
    ran at half the throughput (250 vs 487 updates/s) until waiting ranks yielded. With exactly a
    core per rank, polling ranks still slow the working ones (a shared clock, caches and memory):
    on a 16-core host (Open MPI) star's CPU learner took 2.77 ms per update among 15 polling
    ranks, 2.33 ms when they yielded and 2.24 ms with 4 ranks. So waiting ranks yield whenever
    the job's ranks fill the host's cores (``MPIR_CVAR_ENABLE_HEAVY_YIELD``,
    ``OMPI_MCA_mpi_yield_when_idle``); when ranks exceed the cores, MPICH (4.3 and later) is
    also told to sleep after a few empty polls (its progress throttle: a throttled rank takes
    about 1% of a core while it waits; 3 ranks on 2 cores, one stopped: 100% -> 2% CPU), with
    throughput unchanged (star, 4 ranks on 2 cores, ``env.sim_cost_ms=1``: 1,148-1,158 env
    steps/s either way); with a core per rank it is not (allgather's per-update all-reduce on 2
    ranks and 2 cores ran 40% slower asleep). ``DRLMPI_YIELD=0`` or ``=1`` forces the choice;
    the libraries' own variables, if set, win.
    """
    local = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") \
        or os.environ.get("PMI_SIZE")
    forced = os.environ.get("DRLMPI_YIELD")
    cores = len(usable_cpus())
    ranks = int(local) if local is not None and local.isdigit() else 1
    if forced == "1" or (forced != "0" and ranks >= cores and ranks > 1):
        os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")  # MPICH
        os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")  # Open MPI
    if forced == "1" or (forced != "0" and ranks > cores):
        os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")  # MPICH >= 4.3: sleep when idle
        os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT", "4")


def set_thread_counts(threads: object) -> None:
    """``threads_per_rank`` for the OpenMP, MKL and OpenBLAS runtimes as well as torch's intra-op
    pool (set before torch and numpy are imported; ranks sharing a host must not each start one
    thread per core)."""
    if isinstance(threads, int) and threads >= 1:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[var] = str(threads)
