"""Two emulated hosts on one machine, for a multi-host MPI launch (tests/test_multihost.py).

Each host is a network namespace with one end of a veth pair (the same interface name on both
sides, one address each, loopback up); every process started on a host also gets a UTS
namespace of its own, so it sees the host's name as its hostname. A launcher agent - a script
called as ``agent [options] HOST COMMAND...``, as ``ssh`` would be - runs the command on the
host with that address (what MPICH's hydra does with ``-launcher ssh -launcher-exec AGENT``).

Names carry this process's id, so two sessions never share a namespace or an interface. Every
command has a timeout and runs in a session of its own (a hang kills its whole process group);
:meth:`TwoHosts.close` kills what still runs in the namespaces, by pid (hydra starts its proxies
and ranks in sessions of their own), and deletes them (the veth pair goes with them).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("ip", "nsenter", "unshare", "hostname")
SUBNET = "10.231.0"


class NamespaceUnavailableError(RuntimeError):
    """This machine does not let us create a network namespace (no root, no CAP_SYS_ADMIN)."""


def missing() -> str | None:
    """Why two hosts cannot be emulated here (``None``: they can be tried)."""
    if os.geteuid() != 0:
        return "emulating two hosts needs root (network and UTS namespaces, a veth pair)"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return f"emulating two hosts needs {', '.join(absent)} (iproute2, util-linux)"
    return None


def run(argv: list[str], timeout: float = 10.0) -> str:
    """Run ``argv`` in a session of its own; its stdout. Raises ``CalledProcessError`` on a
    non-zero exit, and kills its process group and raises ``TimeoutExpired`` past ``timeout``."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv, out, err)
    return out


@dataclass(frozen=True)
class Host:
    """One emulated host."""

    name: str  # the hostname its processes see
    netns: str  # its network namespace (``/run/netns/<netns>``)
    address: str  # its address on the link


class TwoHosts:
    """Hosts ``a`` and ``b``, joined by the veth pair ``link`` (:meth:`start` makes them)."""

    def __init__(self, root: Path, tag: str | None = None) -> None:
        tag = tag or str(os.getpid())
        self.root = Path(root)
        self.a = Host(f"drlmpi-a-{tag}", f"drlmpi{tag}a", f"{SUBNET}.1")
        self.b = Host(f"drlmpi-b-{tag}", f"drlmpi{tag}b", f"{SUBNET}.2")
        self.link = f"dlv{tag}"[:15]  # an interface name has at most 15 characters
        self.made: list[Host] = []
        self.agent = self.root / "agent"

    @property
    def hosts(self) -> tuple[Host, Host]:
        return self.a, self.b

    def start(self) -> None:
        """Make both namespaces, the link and the agent. A namespace that cannot be made raises
        :class:`NamespaceUnavailableError`; anything made so far is undone by :meth:`close`."""
        for host in self.hosts:
            try:
                run(["ip", "netns", "add", host.netns])
            except subprocess.CalledProcessError as exc:
                raise NamespaceUnavailableError(
                    f"cannot create a network namespace: {exc.stderr.strip()}") from exc
            self.made.append(host)
        run(["ip", "link", "add", self.link, "netns", self.a.netns, "type", "veth",
             "peer", "name", self.link, "netns", self.b.netns])
        for host in self.hosts:
            run(["ip", "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", self.link])
            run(["ip", "-n", host.netns, "link", "set", "lo", "up"])
            run(["ip", "-n", host.netns, "link", "set", self.link, "up"])
        for host in self.hosts:
            self._wait_running(host)
        self.root.mkdir(parents=True, exist_ok=True)
        self.agent.write_text(self._agent_script())
        self.agent.chmod(0o755)

    def close(self) -> None:
        """Kill whatever still runs on either host and delete the namespaces (idempotent)."""
        self.reap(grace_s=0)
        for host in reversed(self.made):
            run(["ip", "netns", "del", host.netns])
        self.made.clear()

    def processes(self) -> list[int]:
        """The processes running on either host."""
        pids: list[int] = []
        for host in self.made:
            try:
                pids += [int(pid) for pid in run(["ip", "netns", "pids", host.netns]).split()]
            except subprocess.CalledProcessError:
                pass
        return pids

    def reap(self, grace_s: float = 5.0) -> list[int]:
        """Give the hosts' processes ``grace_s`` to end, then kill those left; returns their
        pids. (Hydra starts its proxies and ranks in sessions of their own: killing the
        launcher's process group does not reach them.)"""
        deadline = time.monotonic() + grace_s
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    def command(self, host: Host, argv: list[str]) -> list[str]:
        """``argv`` run on ``host``: in its network namespace, under its hostname."""
        return [shutil.which("nsenter") or "nsenter", f"--net=/run/netns/{host.netns}",
                shutil.which("unshare") or "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', host.name, *argv]

    def hostfile(self, slots: int) -> Path:
        """MPICH's hostfile: each host's address with ``slots`` ranks."""
        path = self.root / "hosts.txt"
        path.write_text("".join(f"{host.address}:{slots}\n" for host in self.hosts))
        return path

    def link_bytes(self, host: Host) -> tuple[int, int]:
        """(received, sent) bytes of ``host``'s end of the link, headers included."""
        (link,) = json.loads(run(["ip", "-n", host.netns, "-j", "-s", "link", "show", "dev", self.link]))
        stats = link["stats64"]
        return int(stats["rx"]["bytes"]), int(stats["tx"]["bytes"])

    def _wait_running(self, host: Host, within_s: float = 5.0) -> None:
        """Wait for the kernel to mark ``host``'s end of the link running (it does so a moment
        after ``ip link set up``; libfabric's TCP provider ignores an interface until then)."""
        script = ("import fcntl, socket, struct, sys, time\n"
                  "name, deadline = sys.argv[1].encode(), time.monotonic() + float(sys.argv[2])\n"
                  "with socket.socket() as s:\n"
                  "    while True:\n"
                  "        request = struct.pack('16sH', name, 0)\n"
                  "        flags = struct.unpack('16sH', fcntl.ioctl(s.fileno(), 0x8913, request))[1]\n"
                  "        if flags & 0x40 or time.monotonic() > deadline:  # IFF_RUNNING\n"
                  "            sys.exit(0 if flags & 0x40 else 1)\n"
                  "        time.sleep(0.02)\n")
        try:
            run([shutil.which("nsenter") or "nsenter", f"--net=/run/netns/{host.netns}", sys.executable,
                 "-c", script, self.link, str(within_s)], timeout=within_s + 10)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"{self.link} on {host.name} was not running after {within_s} s") from exc

    def _agent_script(self) -> str:
        """What ssh does for hydra: ``agent [options] HOST COMMAND...`` runs the words of
        COMMAND, joined by spaces, through ``sh -c`` on HOST."""
        cases = "".join(
            f"  {host.address}) ns={shlex.quote(host.netns)}; name={shlex.quote(host.name)} ;;\n"
            for host in self.hosts)
        nsenter, unshare = shutil.which("nsenter"), shutil.which("unshare")
        return (
            "#!/bin/sh\n"
            "# ssh for two emulated hosts: agent [options] HOST COMMAND...\n"
            'while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done\n'
            'host=$1; shift\n'
            'case "$host" in\n'
            f"{cases}"
            '  *) echo "agent: no emulated host $host" >&2; exit 255 ;;\n'
            "esac\n"
            f'exec {nsenter} --net="/run/netns/$ns" {unshare} --uts '
            """sh -c 'hostname "$0" && exec sh -c "$1"' "$name" "$*"\n""")
