"""One learner of a data-parallel job (every rank of ``allgather``, each group's learner of
``groups``), set up the same way wherever it runs: the job's batch shared by the batch rule,
networks identical on every learner (built from the job's seed, then broadcast), the gradient
backend resolved (MPI, or NCCL/gloo through torch.distributed) with each learner on its
node-local device, updates that average every learner's gradients, and the checksums that
prove the parameters stayed identical. A lone learner (one rank of ``allgather``, ``groups`` with
one group) averages nothing: its updates are a single learner's (:data:`~drlmpi.algos.exchange.LOCAL`,
so on a GPU captured whole, ``algo.updates_per_graph`` at a time), not cut around a collective of
one rank that copies every gradient to the host and back."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from drlmpi.algos.exchange import LOCAL
from drlmpi.config.settings import Settings, choice, integer
from drlmpi.mpi.timed import TimedComm
from drlmpi.roles.learner import Learner
from drlmpi.topologies.core.context import RunContext
from drlmpi.topologies.core.data_parallel.backend import (
    BACKENDS,
    DistExchange,
    DistGroup,
    check_params,
    learner_device,
    place,
    resolve_backend,
)
from drlmpi.topologies.core.data_parallel.batch_rule import BatchRule
from drlmpi.topologies.core.data_parallel.exchanges import (
    AllgatherExchange,
    AllreduceExchange,
    start_together,
)

#: ``topology.reduce``: how MPI averages the gradients (the other backends all-reduce)
REDUCTIONS = {"allreduce": AllreduceExchange, "allgather": AllgatherExchange}


@dataclass(frozen=True)
class AveragingFields(Settings):
    """The options of learners that average their gradients every update (every rank of
    ``allgather``, each group's learner of ``groups``: :class:`DataParallelLearner`): what averages
    them, how MPI does, and how often the learners compare parameter checksums."""

    backend: str = choice(
        BACKENDS[0], "what averages the learners' gradients: mpi (host buffers), nccl (GPUs, one learner "
                     "rank per GPU), gloo (torch.distributed on CPUs), auto (nccl when the learners are on "
                     "CUDA and every node has a GPU per learner rank, else mpi)", *BACKENDS)
    reduce: str = choice("allreduce", "allreduce: Allreduce(SUM)/N; allgather: Allgather + sum in rank order",
                         *REDUCTIONS)
    check_every: int = integer(1000, "verify identical parameters every N updates (0: only at the end)",
                               low=0)


class DataParallelLearner:
    """The learner of this rank, averaging gradients with the other learners of ``comm``.

    Args:
        ctx: this rank's run context (its learner is built from it).
        comm: the learners' communicator (every rank of it is a learner).
        settings: the topology's settings (``backend``, ``reduce``, ``check_every``).
        rule: the batch rule's share of the job's batch for this learner.
        log: whether this learner writes the run's log (one of them does).
    """

    def __init__(self, ctx: RunContext, comm: TimedComm, settings: AveragingFields, rule: BatchRule,
                 log: bool) -> None:
        self.comm = comm
        self.rule = rule
        #: where the learners sit: this rank's index on its node, how many share it, one node or not
        self.placement = placement = place(comm)
        device = ctx.device
        #: the backend that averages the gradients (``auto`` resolved)
        self.backend = resolve_backend(settings.backend, device, comm, placement)
        self.algo = ctx.make_algo(learner=True, shared_init=True, algo_cfg=rule.algo_cfg,
                                  device=learner_device(device, placement))
        lone = comm.size == 1  # nothing to average: its updates are a single learner's
        self.dist = (DistGroup(comm, self.backend, self.algo.device, placement)
                     if self.backend != "mpi" and not lone else None)
        #: ``topology.reduce`` as it applies (the other backends all-reduce)
        self.reduce = settings.reduce if self.dist is None else "allreduce"
        exchange = (LOCAL if lone
                    else DistExchange(self.dist) if self.dist is not None else REDUCTIONS[self.reduce](comm))
        self.learner: Learner = ctx.make_learner(self.algo, log=log, exchange=exchange)
        self.learner.follow_steps_only()  # every learner must step with the same learning rate
        start_together(comm, self.algo, self.learner.clock)
        self.check_every = settings.check_every
        self.next_check = self.check_every

    def train(self, updates: int) -> int:
        """``updates`` updates, each averaging every learner's gradients; the checksums every
        ``check_every`` updates. Returns the updates run."""
        done = self.learner.train(max_updates=updates)
        if self.check_every and self.learner.updates >= self.next_check:
            self.check()
            self.next_check = self.learner.updates + self.check_every
        return done

    def check(self) -> np.ndarray:
        """The ``(learners, groups)`` checksum table; raises if any learner's parameters differ."""
        return check_params(self.comm, self.dist, self.algo)

    def stats(self, checksums: np.ndarray) -> dict[str, Any]:
        """What the summary's ``topology_stats`` says of this data-parallel job."""
        return {"backend": self.backend, "device": str(self.algo.device),
                "param_checksums_per_rank": checksums.tolist(), "params_identical": True,
                "resolved_options": {"backend": self.backend}, "placement": asdict(self.placement),
                **self.rule.stats(getattr(self.algo, "batch_size", None))}

    def close(self) -> dict[str, list[int]] | None:
        """End the backend's process group; what crossed it (``None`` for MPI)."""
        if self.dist is None:
            return None
        calls = self.dist.stats()["calls"]
        self.dist.close()
        return calls
