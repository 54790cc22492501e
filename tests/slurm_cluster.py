"""A private single-node Slurm cluster for tests (tests/test_slurm.py): its own munge key and
``munged``, a generated ``slurm.conf`` and ``slurmctld`` + ``slurmd`` on free ports, every file
under one temporary directory. Commands reach it through ``SLURM_CONF`` (:attr:`SlurmCluster.env`),
so a system-wide Slurm, if any, is neither used nor disturbed.

Every daemon and every process of a job carries :data:`MARKER` in its environment (the daemons
are started with it, jobs inherit the submitter's environment and slurmstepd slurmd's), so
:meth:`SlurmCluster.stop` ends all of them - even a job's rank that outlived its step - and
every command and wait here has a timeout.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

#: the environment variable (its value: the cluster's directory) that marks this cluster's processes
MARKER = "DRLMPI_TEST_SLURM"
DAEMONS = ("munged", "slurmctld", "slurmd")
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"
#: seconds a command to the cluster may take
COMMAND_TIMEOUT = 30

#: what matters here and why (docs/scaling-out.md):
#: - AuthInfo cred_expire is also how long a requeued job waits before it may start again (120 s
#:   by default); 5 s is the least Slurm 22.05 accepts (it takes 2 as invalid, and 120 then).
#: - SchedulerParameters sched_interval/bf_interval (60 s and 30 s by default): a requeued job
#:   that became eligible starts within a second.
#: - JobRequeue=1 makes batch jobs requeueable (as --requeue does for one job).
#: - FirstJobId, random: MPICH names its shared-memory segment after a hash of the PMI job id
#:   (``<job>.<step>`` under srun), and a segment a killed job left in /dev/shm made the first
#:   ``srun --mpi=pmi2`` step of every fresh cluster (job ids from 1) fail or hang in MPI_Init.
#: - MpiDefault=none: a step speaks PMI only when asked (``srun --mpi=pmi2``); PlugStackConfig: no
#:   SPANK plugins of the host's; KillWait: seconds from SIGTERM to SIGKILL on a cancel.
#: - no accounting database: job states come from ``scontrol show job`` (MinJobAge keeps an
#:   ended job there for 300 s); jobcomp/filetxt logs each end.
SLURM_CONF = """\
ClusterName=drlmpitest
FirstJobId={first_job_id}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
MailProg=/bin/true
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket,cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
PlugStackConfig={root}/plugstack.conf
JobRequeue=1
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
KillWait=5
InactiveLimit=0
MinJobAge=300
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class ClusterUnavailableError(RuntimeError):
    """The cluster could not be started (the message says why, with the daemons' log tails)."""


def program(name: str) -> str | None:
    """The path of a Slurm or munge program: on PATH, or in the sbin directories (the daemons'
    place, not always on a PATH)."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}{os.pathsep}{SBIN}")


def missing_programs() -> list[str]:
    """The daemons and commands the cluster needs that are not installed."""
    needed = (*DAEMONS, "sbatch", "srun", "scontrol", "scancel")
    return [p for p in needed if program(p) is None]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SlurmCluster:
    """One node (this host, all its cores), one partition ``debug``; :meth:`start`, :meth:`stop`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.host = socket.gethostname().split(".")[0]
        self.cpus = len(os.sched_getaffinity(0))
        self.conf = self.root / "slurm.conf"
        self.daemons: dict[str, subprocess.Popen] = {}
        #: the environment of every command and job: this cluster's config, and the marker
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), MARKER: str(self.root)}
        for var in [v for v in self.env if v.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))]:
            if var != "SLURM_CONF":  # not an allocation of another cluster
                del self.env[var]

    # -- start and stop ------------------------------------------------------------------
    def start(self, timeout: float = 30) -> None:
        """Start munged, slurmctld and slurmd; return once the node is idle (else raise
        :class:`ClusterUnavailableError` after stopping whatever started)."""
        try:
            self._start_munge()
            for name in ("state", "spool"):
                (self.root / name).mkdir(mode=0o755)
            (self.root / "plugstack.conf").write_text("")
            self.conf.write_text(SLURM_CONF.format(
                host=self.host, root=self.root, cpus=self.cpus, ctld_port=free_port(),
                slurmd_port=free_port(), first_job_id=random.randrange(100_000, 60_000_000)))
            self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])
            self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.host])
            self._wait_for_idle_node(timeout)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, ClusterUnavailableError) or not isinstance(exc, Exception):
                raise
            raise ClusterUnavailableError(f"{type(exc).__name__}: {exc}\n{self.log_tails()}") from exc

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o700, parents=True)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={munge}/munge.socket",
                               f"--key-file={key}", f"--log-file={self.root}/munged.log",
                               f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/munged.seed"])
        self._wait(lambda: (munge / "munge.socket").exists(), 10, "munged's socket")

    def _spawn(self, name: str, cmd: list[str]) -> None:
        """Start a daemon in the foreground, in a session of its own, its output in NAME.out."""
        with open(self.root / f"{name}.out", "w") as out:
            self.daemons[name] = subprocess.Popen(
                [program(cmd[0]) or cmd[0], *cmd[1:]], stdout=out, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True, cwd=self.root)

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self.daemons.items():
                if proc.poll() is not None:
                    raise ClusterUnavailableError(f"{name} exited with {proc.returncode} while waiting "
                                             f"for {what}\n{self.log_tails()}")
            if time.monotonic() > deadline:
                raise ClusterUnavailableError(f"no {what} within {timeout} s\n{self.log_tails()}")
            time.sleep(0.2)

    def _wait_for_idle_node(self, timeout: float) -> None:
        def idle() -> bool:
            out = self.command(["scontrol", "show", "node", self.host, "-o"], check=False)
            return "State=IDLE" in out
        self._wait(idle, timeout, f"idle node {self.host}")

    def stop(self) -> None:
        """End every job and daemon of this cluster (no timeout can leave one behind)."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            try:
                subprocess.run(["scancel", "--full", "--partition=debug"], env=self.env,
                               capture_output=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for name in reversed(list(self.daemons)):
            proc = self.daemons[name]
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        self.daemons.clear()
        for _ in range(50):  # slurmstepd, job scripts, ranks: whatever still carries the marker
            left = marked_processes(str(self.root))
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def log_tails(self, lines: int = 15) -> str:
        """The last lines of every daemon's log and output."""
        parts = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log", *(f"{d}.out" for d in DAEMONS)):
            path = self.root / name
            if path.is_file() and path.stat().st_size:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {name} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- commands and jobs ---------------------------------------------------------------
    def command(self, cmd: list[str], check: bool = True, timeout: float = COMMAND_TIMEOUT) -> str:
        """Run a Slurm command against this cluster; its stdout (``check``: fail on an error)."""
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def sbatch(self, args: list[str]) -> str:
        """Submit a batch job; its id."""
        out = self.command(["sbatch", "--parsable", *args]).strip()
        return out.split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o``'s fields of one job (every field's first word)."""
        out = self.command(["scontrol", "show", "job", "-o", job_id])
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_for_job(self, job_id: str, timeout: float, states=("COMPLETED", "FAILED", "CANCELLED",
                                                                "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
                     ) -> dict[str, str]:
        """Poll the job until its state is one of ``states``; its fields. Fails on a timeout."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {fields.get('JobState')} after {timeout} s: "
                                     f"{fields}\n{self.log_tails()}")
            time.sleep(0.2)


def marked_processes(value: str) -> list[int]:
    """Pids of the processes whose environment holds ``MARKER=value`` (not this process)."""
    needle = f"{MARKER}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                found.append(int(entry))
        except OSError:
            continue
    return found
