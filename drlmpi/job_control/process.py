"""This process as one rank of an MPI job, before MPI starts: whether a launcher started it, thread
counts, and yielding the core while waiting when ranks outnumber cores; then, once MPI has started
and before torch starts any thread, pinning the rank to a core of its own (``bind_ranks``).
"""

from __future__ import annotations

import contextlib
import os

from drlmpi.config.environment import BIND_CHOICES

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


def local_ranks() -> int:
    """The job's ranks on this host, read from the launcher's variables (1 for a singleton)."""
    local = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") \
        or os.environ.get("PMI_SIZE")
    return int(local) if local is not None and local.isdigit() else 1


def oversubscribed() -> bool:
    """Whether the job's ranks on this host exceed the CPUs this process may use: a rank that
    spins then takes the core another rank needs."""
    return local_ranks() > len(usable_cpus())


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
    forced = os.environ.get("DRLMPI_YIELD")
    cores = len(usable_cpus())
    ranks = local_ranks()
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




def pinned_cpu(mode: str, local_rank: int, local_size: int, cpus: list[int],
               threads: int = 1) -> int | None:
    """The CPU a rank pins itself to under ``bind_ranks=mode`` (``None``: it stays as it is).

    ``local_rank`` of ``local_size`` ranks on this host, ``cpus`` the CPUs it may use (its
    affinity), ``threads`` the busy threads a rank runs (``threads_per_rank``, ALE's
    ``env.num_threads``). ``core`` pins rank i to the i-th of them (wrapping when ranks
    outnumber them); ``auto`` does so only when the host's ranks are exactly as many as those
    CPUs - a job that has the host to itself, or its CPU list from the sweep launcher, and that
    no launcher bound (a rank bound to one core, or to a socket, sees fewer CPUs than the job has
    ranks) - and each runs one thread. Fewer ranks than cores stay unbound: the spare cores take
    the learner's helper threads; so do ranks of several threads, which one core would serialise.
    """
    if mode == "none" or not cpus:
        return None
    if mode == "auto" and (local_size < 2 or local_size != len(cpus) or threads > 1):
        return None
    return cpus[local_rank % len(cpus)]


def bind_rank(mode: str, comm, threads: int = 1) -> int | None:
    """Pin this rank to one core as :func:`pinned_cpu` says (call after MPI starts, before torch
    starts its threads: threads started later inherit the pin); returns the CPU or ``None``.

    Why: a job whose ranks fill a host's cores, unbound, lets the scheduler place two busy ranks
    on one core for a while. On a 16-core H200 host, star with 16 ranks (DQN LunarLander,
    ``env.sim_cost_ms=1``, 25,000 steps) ran at 5,651-8,137 env steps/s unbound and
    8,131-8,480 with a core per rank, the simulators' stepping slower in the slow runs
    (docs/results.md, "A core per rank"). ``DRLMPI_BIND_RANKS`` (``auto`` | ``core`` |
    ``none``) replaces ``auto`` - the test suite sets ``none``: its jobs share the machine with
    each other - an explicit ``core`` or ``none`` wins over it. Every rank calls this (one
    collective unless the choice is ``none``: the host's ranks are counted with
    ``MPI_Comm_split_type``).
    """
    if mode == "auto":
        mode = os.environ.get("DRLMPI_BIND_RANKS") or mode
    if mode not in BIND_CHOICES:
        raise ValueError(f"bind_ranks must be one of {', '.join(BIND_CHOICES)}, got {mode!r}")
    if mode == "none":  # every rank reads the same config and environment: all return here
        return None
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        cpu = pinned_cpu(mode, local.Get_rank(), local.Get_size(), usable_cpus(), threads)
    finally:
        local.Free()
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    return cpu


def pin_threads(cpus: list[int] | set[int]) -> None:
    """Every thread of this process onto ``cpus``. ``os.sched_setaffinity(0, ...)`` moves the
    calling thread only, and threads inherit their pin when they start: a process that binds
    again after torch or CUDA started threads (the planner's launch, one job after another) moves
    them all this way (Linux: one call per thread id under ``/proc/self/task``)."""
    try:
        tids = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # pragma: no cover (not Linux)
        tids = [0]
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, set(cpus))


def cpu_list(cpus: list[int]) -> str:
    """``cpus`` as ranges, the way ``taskset -c`` takes them: ``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, parent pid, ...): ``None``
    where there is no such process or no ``/proc`` (not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, theirs, ...), read from ``/proc``; ``[]`` where there
    is none (not Linux)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        fields = stat_fields(entry)
        if fields is not None:  # (gone meanwhile)
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def rank_processes(launcher_pid: int) -> list[int]:
    """The drlmpi ranks a launcher started on this host: its descendants running
    ``python -m mpi4py -m drlmpi`` (not the launcher's own helpers)."""
    ranks = []
    for pid in descendants(launcher_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if b"mpi4py" in words and b"drlmpi" in words:
            ranks.append(pid)
    return ranks


def signal_group(leader_pid: int, signum: int) -> None:
    """Send ``signum`` to the process group of ``leader_pid`` (a launcher started in a session of
    its own, with the ranks it started), if it is still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader_pid, signum)


def signal_ranks(launcher_pid: int, signum: int) -> bool:
    """Send ``signum`` to the drlmpi ranks a launcher started on this host (:func:`rank_processes`),
    not to the launcher: Open MPI's ``mpirun`` answers SIGTERM and SIGINT by killing its ranks
    before they could checkpoint. ``False`` where none was found (none started yet; not Linux):
    the caller then signals the launcher itself."""
    ranks = rank_processes(launcher_pid)
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
    return bool(ranks)
