"""One job across two hosts, as on a cluster: MPICH's hydra ``mpiexec -f hostfile -launcher ssh``
over two emulated hosts (tests/two_hosts.py: network namespaces joined by a veth pair, a
hostname each; the ssh is an agent that enters the host's namespaces).

Two runs of 4 ranks, 2 per host, share one setup: ``star`` (rank 0 learns on host a; ranks 2
and 3 on host b send it their experience) and ``groups`` with 2 groups of 2 (one learner per
host; their gradients cross the link). Each must exit 0 and write summary.json whose ranks
report both hostnames; the link's byte counters must have risen by at least what the run says
crossed it; the groups run's learners must find themselves on two nodes (its ``placement``).

MPICH's default netmod (UCX) would reach across the two namespaces through shared memory (both
"hosts" share one kernel), so nothing would cross the link: the runs use the OFI netmod's TCP
provider, bound to the link (``MPIR_CVAR_CH4_NETMOD=ofi``, ``FI_PROVIDER=tcp``,
``FI_TCP_IFACE``). Skipped where namespaces cannot be made (not root, no iproute2/util-linux,
no CAP_SYS_ADMIN) or where ``mpiexec`` is not MPICH's hydra.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests import two_hosts
from tests.mpirun import JobResult, RunningJob

RANKS, SLOTS = 4, 2  # 2 ranks per host: ranks 0 and 1 on host a, 2 and 3 on host b
TINY = ["env=cartpole", "run.max_env_steps=512", "algo.learning_starts=128", "algo.hidden=[32,32]",
        "run.eval_every=1000000", "run.progress_every_s=0", "run.stop_on_solve=false", "seed=3"]
TIMEOUT_S = 60


def _hydra_mpiexec() -> str | None:
    """Why this ``mpiexec`` cannot run the test (``None``: it is MPICH's hydra)."""
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        return "no mpiexec on PATH"
    try:
        info = two_hosts.run([mpiexec, "-info"])
    except Exception as exc:  # noqa: BLE001 - any failure means: not hydra
        return f"mpiexec -info failed ({exc}): the test needs MPICH's hydra"
    if "HYDRA" not in info or "ssh" not in info:
        return "mpiexec is not MPICH's hydra with the ssh launcher"
    return None


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Two emulated hosts for the module, torn down (processes, namespaces, link) at its end."""
    reason = two_hosts.missing() or _hydra_mpiexec()
    if reason:
        pytest.skip(reason)
    setup = two_hosts.TwoHosts(tmp_path_factory.mktemp("two-hosts"))
    try:
        try:
            setup.start()
        except two_hosts.NamespaceUnavailableError as exc:
            pytest.skip(str(exc))
        yield setup
    finally:
        setup.close()


def launch(hosts: two_hosts.TwoHosts, overrides: list[str], run_dir: Path) -> tuple[JobResult, int, int]:
    """``mpiexec -f hostfile -launcher ssh -launcher-exec AGENT`` on host a, 2 ranks per host;
    the job and the bytes host a's end of the link received and sent meanwhile."""
    mpiexec = [shutil.which("mpiexec"), "-f", str(hosts.hostfile(SLOTS)), "-n", str(RANKS),
               "-launcher", "ssh", "-launcher-exec", str(hosts.agent)]
    drlmpi = [sys.executable, "-m", "mpi4py", "-m", "drlmpi", *overrides, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "MPIEXEC_TIMEOUT": str(TIMEOUT_S + 30), "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1",
           # the network between hosts, not shared memory, on the link's interface
           "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": hosts.link,
           # 4 ranks on 2 cores: waiting ranks yield (each host alone has no more ranks than cores)
           "DRLMPI_YIELD": "1"}
    rx0, tx0 = hosts.link_bytes(hosts.a)
    try:
        job = RunningJob(hosts.command(hosts.a, [*mpiexec, *drlmpi]), env, run_dir, TIMEOUT_S).result()
    finally:  # a hung job's proxies and ranks live in sessions of their own: end them here
        left = hosts.reap()
    assert not left, f"processes {left} still ran on the hosts 5 s after the job ended"
    rx1, tx1 = hosts.link_bytes(hosts.a)
    assert job.returncode == 0, f"exit {job.returncode}\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}"
    assert (run_dir / "summary.json").is_file()
    return job, rx1 - rx0, tx1 - tx0


def ranks_by_host(hosts: two_hosts.TwoHosts, summary: dict) -> dict[str, list[dict]]:
    """The per-rank reports by the host they ran on: ranks 0-1 on host a, 2-3 on host b."""
    per_rank = sorted(summary["per_rank"], key=lambda r: r["rank"])
    by_host = {host.name: [r for r in per_rank if r["host"] == host.name] for host in hosts.hosts}
    assert [r["rank"] for r in by_host[hosts.a.name]] == [0, 1], [r["host"] for r in per_rank]
    assert [r["rank"] for r in by_host[hosts.b.name]] == [2, 3], [r["host"] for r in per_rank]
    return by_host


def test_star_across_two_hosts(hosts, tmp_path):
    """Takes ~9 s on 2 cores: a real launch of 4 ranks in processes of their own (start-up
    ~1.5 s of CPU each, a learner's first update ~1.3 s more); only such a launch crosses hosts."""
    job, received, sent = launch(hosts, ["topology=star", *TINY], tmp_path / "star")
    summary = job.summary()
    by_host = ranks_by_host(hosts, summary)
    assert summary["env_steps"] >= 512 and summary["versions"]["host"] == hosts.a.name
    # host b's simulators sent their experience to the learner on host a: over the link
    remote = by_host[hosts.b.name]
    moved = sum(r["sent"]["experience"][1] for r in remote)
    assert moved >= sum(r["env_steps"] for r in remote) * summary["experience_row_bytes"] > 0
    assert received >= moved, f"the link carried {received} bytes to host a, the run says {moved}"
    # and the learner's weights went the other way
    weights = sum(r["received"]["weights"][1] for r in remote)
    assert sent >= weights > 0


def test_groups_one_learner_per_host(hosts, tmp_path):
    """Takes ~9 s on 2 cores: a real launch of 4 ranks, as above (two learners this time)."""
    overrides = ["topology=groups", "topology.learners=2", "topology.backend=mpi", *TINY]
    job, received, sent = launch(hosts, overrides, tmp_path / "groups")
    summary = job.summary()
    by_host = ranks_by_host(hosts, summary)
    stats = summary["topology_stats"]
    learners = {r["rank"]: r for r in summary["per_rank"] if r["role"] == "learner"}
    assert sorted(learners) == [0, 2] and learners[0]["host"] != learners[2]["host"]
    # MPI's node-local split sees two nodes: one learner on each
    assert stats["placement"] == {"local": 0, "per_node": 1, "one_node": False}
    assert [p["placement"]["per_node"] for p in stats["per_learner"]] == [1, 1]
    # each group stays on its host; the learners' gradients cross the link, both ways
    remote_learner = next(r for r in by_host[hosts.b.name] if r["role"] == "learner")
    grads_in = remote_learner["learners_comm"]["sent"]["gradients"][1]
    grads_out = learners[0]["learners_comm"]["sent"]["gradients"][1]
    assert grads_in == grads_out == summary["updates"] * summary["policy_param_bytes"] > 0
    assert received >= grads_in and sent >= grads_out, (received, sent, grads_in)
