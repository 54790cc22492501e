"""Which library averages the learners' gradients: MPI on host buffers, or ``torch.distributed``
(NCCL on GPUs, gloo on CPUs) on the tensors where they live.

``topology.backend``:

* ``mpi`` - ``Allreduce`` (or ``Allgather``: ``topology.reduce``) of the flat gradient buffer;
  from a GPU that is one device-to-host and one host-to-device copy per network per update.
* ``nccl`` - one NCCL all-reduce of the flat gradient buffer on the device; every learner rank
  has its own GPU (NCCL takes one rank per GPU). Refused, before any gradient moves, with
  ``device=cpu`` or with more learner ranks on a node than it has GPUs.
* ``gloo`` - the same ``torch.distributed`` code path on CPU tensors (learners on the CPU).
* ``auto`` (default) - ``nccl`` when the learners are on CUDA, there are at least two, NCCL is
  available and every node has a GPU per learner rank; otherwise ``mpi``.

The ``torch.distributed`` process group is built from the MPI communicator of the learners, no
launcher needed: its rank 0 opens a ``TCPStore`` on a free port and broadcasts the address and
port over MPI; every learner joins with its MPI rank and size. ``device=cuda`` places each
learner on GPU (its index among the learner ranks of its node) mod (the node's GPU count).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from drlmpi.algos.base import Algorithm
from drlmpi.algos.exchange import GradientExchange
from drlmpi.algos.params import ParamGroup
from drlmpi.config.errors import ConfigError
from drlmpi.mpi.timed import TimedComm
from drlmpi.topologies.core.data_parallel.exchanges import (
    check_identical_params,
    param_checksums,
    verify_identical,
)

#: ``topology.backend``'s choices, of the topologies whose learners average gradients (allgather,
#: groups: :class:`~drlmpi.topologies.core.data_parallel.learners.AveragingFields`); the first is
#: the default
BACKENDS = ("auto", "mpi", "nccl", "gloo")
#: NVLink multicast stays off unless the user turned it on (it can take a shared host's GPUs
#: out of service); set before NCCL initialises.
NCCL_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
HOST_BYTES = 256
GPU_HINT = ("use topology=groups with topology.learners equal to the GPUs (the other ranks "
            "simulate), or topology.backend=mpi")


def check_backend(backend: str, reduce: str, device: str) -> None:
    """The static part of the checks of ``topology.backend`` (one of :data:`BACKENDS`) and
    ``topology.reduce`` on ``device`` (every rank, before any message)."""
    on_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if backend == "nccl" and not on_cuda:
        raise ConfigError(f"topology.backend=nccl averages gradients on GPUs: it needs device=cuda, "
                          f"got device={device} (use topology.backend=gloo or mpi on CPUs)")
    if backend == "gloo" and on_cuda:
        raise ConfigError("topology.backend=gloo is torch.distributed on CPU tensors: use device=cpu, "
                          "or topology.backend=nccl or mpi with device=cuda")
    if backend in ("nccl", "gloo") and not torch.distributed.is_available():
        raise ConfigError(f"topology.backend={backend} needs torch.distributed, which this torch build "
                          f"lacks: use topology.backend=mpi")
    if backend in ("nccl", "gloo") and reduce != "allreduce":
        raise ConfigError(f"topology.reduce={reduce} is an MPI reduction; "
                          f"topology.backend={backend} all-reduces: use topology.reduce=allreduce")


@dataclass(frozen=True)
class Placement:
    """Where the ranks of a learners' communicator sit (found once, with one collective)."""

    local: int  # this rank's index among them on its node
    per_node: int  # how many of them share its node
    one_node: bool  # whether all of them share one node


def place(comm: TimedComm) -> Placement:
    """The :class:`Placement` of ``comm``'s ranks (every rank of ``comm`` calls it)."""
    shared = comm.split_node()
    try:
        local, per_node = shared.Get_rank(), shared.Get_size()
    finally:
        shared.Free()
    return Placement(local, per_node, per_node == comm.size)


def learner_device(device: str, placement: Placement) -> str:
    """A learner rank's device: ``cuda`` becomes ``cuda:<local index mod GPUs on the node>``;
    anything else is kept."""
    if device != "cuda" or torch.cuda.device_count() <= 1:
        return device
    return f"cuda:{placement.local % torch.cuda.device_count()}"


def resolve_backend(choice: str, device: str, comm: TimedComm, placement: Placement) -> str:
    """``mpi``, ``nccl`` or ``gloo`` for the learners ``comm`` connects (a collective: every
    learner calls it). ``nccl`` asked for where a node has fewer GPUs than learner ranks is a
    :class:`ConfigError` on every learner."""
    from mpi4py import MPI

    if choice in ("mpi", "gloo"):
        return choice
    gpus = torch.cuda.device_count() if device.startswith("cuda") else 0
    fits = np.array([int(gpus >= placement.per_node and torch.distributed.is_available()
                         and torch.distributed.is_nccl_available())], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, fits, op=MPI.MIN, kind="backend")
    if choice == "auto":
        return "nccl" if fits[0] and comm.size > 1 and device.startswith("cuda") else "mpi"
    if not fits[0]:
        raise ConfigError(f"topology.backend=nccl needs one GPU per learner rank on each node (NCCL "
                          f"takes one rank per GPU); a node here has {placement.per_node} learner "
                          f"rank(s) and {gpus} GPU(s): {GPU_HINT}")
    return "nccl"


def rendezvous_host(placement: Placement) -> str:
    """Where the learners' ``TCPStore`` listens: loopback when they share one node, else
    ``MASTER_ADDR`` or this host's address."""
    if placement.one_node:
        return "127.0.0.1"
    return os.environ.get("MASTER_ADDR") or socket.gethostbyname(socket.gethostname())


class DistGroup:
    """A ``torch.distributed`` process group over the ranks of an MPI communicator, with the
    byte counts of what crossed it (``stats``)."""

    def __init__(self, comm: TimedComm, backend: str, device: torch.device, placement: Placement,
                 timeout_s: float = 300.0) -> None:
        import torch.distributed as dist

        for key, value in NCCL_SAFE_ENV.items():
            os.environ.setdefault(key, value)
        self.dist = dist
        self.backend = backend
        self.size = comm.size
        self.device = device
        timeout = timedelta(seconds=timeout_s)
        address = np.zeros(HOST_BYTES + 1, dtype=np.int64)  # host bytes..., port
        store = None
        if comm.rank == 0:
            host = rendezvous_host(placement)
            store = dist.TCPStore(host, 0, comm.size, True, timeout=timeout, wait_for_workers=False)
            encoded = host.encode()[:HOST_BYTES]
            address[: len(encoded)] = list(encoded)
            address[HOST_BYTES] = store.port
        comm.Bcast(address, root=0, kind="rendezvous")
        if store is None:
            host = bytes(int(b) for b in address[:HOST_BYTES] if b).decode()
            store = dist.TCPStore(host, int(address[HOST_BYTES]), comm.size, False, timeout=timeout)
        kwargs: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, store=store, rank=comm.rank, world_size=comm.size,
                                timeout=timeout, **kwargs)
        self.store = store
        self.calls: dict[str, list[int]] = {}

    def _count(self, kind: str, nbytes: int) -> None:
        entry = self.calls.setdefault(kind, [0, 0])
        entry[0] += 1
        entry[1] += int(nbytes)

    def all_reduce_mean(self, tensor: torch.Tensor, kind: str = "gradients") -> None:
        """``tensor`` becomes the mean over the group's ranks, in place, where it lives."""
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.SUM)
        tensor.div_(self.size)
        self._count(kind, tensor.numel() * tensor.element_size())

    def all_gather(self, values: np.ndarray, kind: str) -> np.ndarray:
        """Every rank's ``values`` (float64), as a ``(size, n)`` array, through the backend."""
        local = torch.as_tensor(np.ascontiguousarray(values, dtype=np.float64), device=self.device)
        gathered = [torch.empty_like(local) for _ in range(self.size)]
        self.dist.all_gather(gathered, local)
        self._count(kind, local.numel() * local.element_size())
        return torch.stack(gathered).cpu().numpy()

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()

    def stats(self) -> dict[str, Any]:
        return {"backend": self.backend, "calls": {k: list(v) for k, v in self.calls.items()}}


class DistExchange(GradientExchange):
    """Average a network's flat gradients with one backend all-reduce where they live, then step
    locally (it crosses ranks: a captured update replays its segments around it)."""

    def __init__(self, group: DistGroup) -> None:
        self.group = group

    def exchange(self, name: str, group: ParamGroup) -> None:
        self.group.all_reduce_mean(group.flat.grads)


def dist_checksums(group: DistGroup, algo: Algorithm) -> np.ndarray:
    """Like :func:`~drlmpi.topologies.core.data_parallel.exchanges.check_identical_params`, through
    the backend."""
    return verify_identical(group.all_gather(param_checksums(algo), kind="checksums"), algo)


def check_params(comm: TimedComm, group: DistGroup | None, algo: Algorithm) -> np.ndarray:
    """The parameter checksum table, through the backend that averages the gradients (MPI when
    ``group`` is ``None``)."""
    if group is None:
        return check_identical_params(comm, algo)
    return dist_checksums(group, algo)
