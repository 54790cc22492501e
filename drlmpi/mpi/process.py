"""This process as one rank of an MPI job, before MPI starts: whether a launcher started it, thread
counts, and yielding the core while waiting when ranks outnumber cores.
"""

from __future__ import annotations

import os

# Importing the schema registers every option's default with Hydra (conf/ builds on them).

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


def set_thread_counts(threads: object) -> None:
    """``threads_per_rank`` for the OpenMP and MKL runtimes as well as torch's intra-op pool
    (set before torch is imported; ranks sharing a host must not each start one thread per
    core)."""
    if isinstance(threads, int) and threads >= 1:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)
