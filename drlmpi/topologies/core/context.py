"""What every topology receives: :class:`RunPlan` (the checked config of one job) and
:class:`RunContext` (one rank's builder of roles - algorithms, actors, learners, evaluators - its
log, and the checkpoint policy, so that every topology seeds, sizes and logs them the same way).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from drlmpi.algos.base import Algorithm
from drlmpi.algos.exchange import LOCAL, GradientExchange
from drlmpi.config.errors import ConfigError
from drlmpi.config.job import JobSettings
from drlmpi.config.scopes import AlgoSettings
from drlmpi.envs.make import env_make_kwargs, make_env
from drlmpi.envs.spec import EnvSpec
from drlmpi.envs.vector import SerialEnvs, WorkerEnvs
from drlmpi.job_control.progress import PROGRESS
from drlmpi.job_control.stop import STOP
from drlmpi.mpi.timed import TimedComm
from drlmpi.outputs.checkpoint import Checkpointer, DamagedFileError, load_rank_state
from drlmpi.outputs.run_log import RunLog
from drlmpi.roles.actor import Actor
from drlmpi.roles.evaluate import EvaluationShare
from drlmpi.roles.learner import Learner

if TYPE_CHECKING:
    from drlmpi.topologies.core.base import Topology

SEED_STRIDE = 10_000  # rank r uses seed + SEED_STRIDE * r (Spinning Up's convention)
RESUME_STRIDE = 1_000_003  # a run resumed from checkpoint generation g adds g * RESUME_STRIDE


@dataclass(frozen=True)
class RunPlan:
    """One job, checked and resolved once before any rank talks (:func:`drlmpi.run.preflight.make_plan`):
    what flows down to the topology and its roles, which read nothing of the config but this.

    Attributes:
        cfg: the job's typed settings (:class:`~drlmpi.config.job.JobSettings`: the top level's
            options, ``run``, ``env``, ``algo``, ``topology``), built once from the composed config
            after every check of the plan; frozen.
        world_size: the ranks of the job.
        algo_cls: the algorithm class (``algo._target_``).
        topology_cls: the topology class (``topology._target_``).
        spec: the environment's spaces (probed once).
        device: the learner device, resolved (``auto`` is ``cuda`` or ``cpu``).
        resume_meta: the checkpoint this run continues (its ``meta.json``), or ``None``.
        warnings: one line each for what the budget cannot reach.
    """

    cfg: JobSettings
    world_size: int
    algo_cls: type[Algorithm]
    topology_cls: type[Topology]
    spec: EnvSpec
    device: str
    resume_meta: dict[str, Any] | None = None
    #: what the budget cannot reach (the first update, the first evaluation): said at the start
    warnings: tuple[str, ...] = ()
    #: algorithm options resolved for this job's size (``Algorithm.job_options``: PPO's rollout
    #: per environment), already in ``cfg.algo``
    job_options: dict[str, Any] = field(default_factory=dict)
    #: by section (``algo``, ``topology``): options given that its settings do not declare - another
    #: algorithm's or topology's, which a sweep hands every job (``++topology.utd_mode=free``):
    #: accepted by the checks, ignored by the run, and said at its start
    ignored: dict[str, dict[str, Any]] = field(default_factory=dict)

    def with_world(self, world_size: int) -> RunPlan:
        """This plan for a part of the job (a group of ``topology=groups``) of ``world_size`` ranks."""
        return replace(self, world_size=world_size)


class RunContext:
    """Everything a topology needs to build its roles on this rank.

    Attributes:
        plan: the job's :class:`RunPlan` (config, classes, spaces, device, resume).
        cfg: ``plan.cfg``, the job's typed settings.
        comm: this run's communicator (a timed ``Dup`` of COMM_WORLD).
        run_dir: the run directory shared by all ranks.
        spec: the environment's spaces.
        algo_cls: the algorithm class.
        device: the learner device (resolved).
    """

    def __init__(self, plan: RunPlan, comm: TimedComm, run_dir: Path) -> None:
        self.plan = plan
        self.cfg = plan.cfg
        self.comm = comm
        #: this rank in the job (``comm.rank``, also in a :meth:`subcontext` over a part of it):
        #: seeds, per-rank simulation costs and checkpoint files follow it.
        self.rank = comm.rank
        #: seconds this rank has waited in MPI so far (a learner charges updates the rest).
        self.mpi_clock: Callable[[], float] = lambda: comm.wait_s
        self.run_dir = Path(run_dir)
        self.spec = plan.spec
        self.algo_cls = plan.algo_cls
        self.device = plan.device
        # The run's log, shared with every subcontext (a group's learner may be the one that
        # writes it; the run closes and finishes it through the top context).
        self._shared: dict[str, Any] = {"log": None}
        #: the checkpoint this run resumes from (``checkpoint/meta.json``), or ``None``.
        self.resume_meta = plan.resume_meta
        cfg = plan.cfg
        self.checkpointer = Checkpointer(
            self.run_dir, comm.rank, comm.size, cfg.run,
            {"topology": cfg.topology.name, "algo": cfg.algo.name, "env": cfg.env.id},
            generation=int(self.resume_meta["generation"]) if self.resume_meta else 0)

    @property
    def log(self) -> RunLog | None:
        """The run's log (``metrics.csv``, progress lines, TensorBoard), once a learner of this
        rank made it."""
        return self._shared["log"]

    def subcontext(self, comm: TimedComm, mpi_clock: Callable[[], float] | None = None) -> RunContext:
        """This context over ``comm``, a part of the job (a group of ``topology=groups``): roles
        built from it talk over ``comm`` and keep this rank's seeds, costs and checkpoint files."""
        sub = copy.copy(self)
        sub.comm = comm
        sub.mpi_clock = mpi_clock or (lambda: comm.wait_s)
        return sub

    @property
    def seed(self) -> int:
        """This rank's base seed (``cfg.seed + SEED_STRIDE * rank``; a resumed run adds
        ``RESUME_STRIDE`` per checkpoint generation, so its simulators do not replay the
        episodes of the first part)."""
        return self.seed_of(self.rank)

    def seed_of(self, rank: int) -> int:
        """The base seed of ``rank`` (see :attr:`seed`)."""
        generation = int(self.resume_meta["generation"]) if self.resume_meta else 0
        return self.cfg.seed + SEED_STRIDE * rank + RESUME_STRIDE * generation

    def make_eval_envs(self, count: int) -> list:
        """``count`` evaluation environments (``train=False``: no training-only wrappers)."""
        env = self.cfg.env
        with PROGRESS.paused("creating %d evaluation environment(s)", count):
            kwargs = {**env_make_kwargs(env), "train": False}
            return [make_env(env.id, **kwargs) for _ in range(count)]

    def make_evaluation_share(self, actor: Actor, index: int, shares: int,
                              learner_rank: int = 0) -> EvaluationShare:
        """Simulator ``index`` of ``shares``' part of the evaluations of the learner on
        ``learner_rank`` (``run.eval_on=simulators``), played with ``actor``'s policy and seeded
        as that learner seeds its own."""
        run = self.cfg.run
        return EvaluationShare(actor.algo, self.make_eval_envs,
                               self.seed_of(learner_rank) + run.eval_seed_offset,
                               run.eval_episodes, run.eval_envs, index, shares)

    def make_algo(self, learner: bool, device: str | None = None,
                  shared_init: bool = False,
                  algo_cfg: AlgoSettings | Mapping[str, Any] | None = None) -> Algorithm:
        """An algorithm instance for this rank (acting-only ones run on the CPU).

        ``shared_init``: build the networks from the job's base seed, identical on every rank
        (data-parallel topologies), then reseed exploration per rank. ``algo_cfg``: another
        config than ``cfg.algo`` (a data-parallel rank's share of the job's batch:
        :mod:`drlmpi.topologies.core.data_parallel.batch_rule`).
        """
        device = device or (self.device if learner else "cpu")
        init_seed = self.cfg.seed if shared_init else self.seed
        with PROGRESS.paused("start-up: building the %s", "learner" if learner else "acting policy"):
            algo = self.algo_cls(self.spec, self.cfg.algo if algo_cfg is None else algo_cfg,
                                 device=device, seed=init_seed, learner=learner)
            if shared_init:
                algo.reseed(self.seed)
        return algo

    def _env_kwargs(self) -> dict[str, Any]:
        env = self.cfg.env
        return {"sim_cost_ms": env.sim_cost_of(self.rank), **env_make_kwargs(env)}

    def make_actor(self, algo: Algorithm | None = None, envs: tuple[int, int] | None = None) -> Actor:
        """A simulator with ``env.num_envs`` environments (stepped as ``env.vector`` says) and
        its own acting algorithm; ``envs=(first, count)``: only that part of them (a simulator
        that steps its environments in groups). Stream ids ``job rank * num_envs + index`` are
        unique in the whole job, groups of ``topology=groups`` included."""
        total = self.cfg.env.num_envs
        first, n_envs = envs or (0, total)
        vector = self.cfg.env.vector
        kwargs = self._env_kwargs()
        with PROGRESS.paused("start-up: creating %d %s environment(s)", n_envs, self.cfg.env.id):
            algo = algo or self.make_algo(learner=False)
            dtype = algo.layout.obs_dtype
            if vector == "async":
                bank = WorkerEnvs([partial(make_env, self.cfg.env.id, **kwargs) for _ in range(n_envs)],
                                  dtype)
            else:
                made = [make_env(self.cfg.env.id, **kwargs) for _ in range(n_envs)]
                for i, env in enumerate(made):
                    env.action_space.seed(self.seed + first + i)
                bank = SerialEnvs(made, dtype)
            algo.set_env_positions(*self.env_positions(first, n_envs))
            return Actor(bank, algo, stream_base=self.rank * total + first, seed=self.seed + first)

    def env_positions(self, first: int, count: int) -> tuple[int, int, int]:
        """``(position of this rank's environment first, count, the job's environments)``: the
        ranks that step environments are the last ``env_ranks`` of the job (a learner rank
        first), numbered from 0, each with ``env.num_envs``."""
        world, total = self.plan.world_size, self.cfg.env.num_envs
        env_ranks = self.plan.topology_cls.env_ranks(world, self.cfg.topology)
        index = min(max(0, self.rank - (world - env_ranks)), env_ranks - 1)
        return index * total + first, count, env_ranks * total

    def make_local_actor(self, learner: Learner) -> Actor:
        """An actor on a rank that also holds ``learner``: it acts with the learner's own network
        where ``act_device`` says so, else with a CPU copy (:meth:`Actor.follow` updates it)."""
        mode = self.cfg.act_device
        if mode == "auto":
            mode = "learner" if self.spec.image and str(self.device).startswith("cuda") else "cpu"
        # Building an acting copy seeds torch's generators (Algorithm.__init__): a resumed
        # learner's random states, restored from its checkpoint, are kept as saved.
        device = learner.algo.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [],
                                   enabled=self.resume_meta is not None):
            actor = self.make_actor(algo=learner.algo if mode == "learner" else None)
        learner.lead(actor)
        return actor

    def make_learner(self, algo: Algorithm | None = None, log: bool = True,
                     exchange: GradientExchange = LOCAL) -> Learner:
        """The learner (with ``metrics.csv``, progress output and, with ``run.tensorboard``,
        TensorBoard event files in ``tb/`` when ``log``), its gradients reaching its optimizers
        through ``exchange`` (the topology's: :mod:`drlmpi.topologies.core.data_parallel.exchanges`)."""
        with PROGRESS.paused("start-up: building the learner"):
            return self._make_learner(algo, log, exchange)

    def _make_learner(self, algo: Algorithm | None, log: bool, exchange: GradientExchange) -> Learner:
        algo = algo or self.make_algo(learner=True)
        env = self.cfg.env
        run = self.cfg.run
        make_eval_envs = partial(self.make_eval_envs, min(run.eval_episodes, run.eval_envs))

        meta = self.resume_meta
        keep = None if meta is None else int(meta.get("metrics_rows") or 0)
        tb_every = run.tensorboard_every_s if run.tensorboard else None
        run_log = (RunLog(self.run_dir, run.progress_every_s, tb_every, keep_rows=keep)
                   if log else None)
        # A signal's stop is decided by the job's rank 0 alone and reaches the others in the
        # topology's control messages (drlmpi.job_control.stop).
        stop = STOP.requested if self.rank == 0 and run.checkpoint_on_signal else None
        learner = Learner(algo, make_eval_envs, run, env.reward_threshold, log=run_log, seed=self.seed,
                          mpi_clock=self.mpi_clock, exchange=exchange, stop_request=stop, rank=self.rank)
        if meta is not None:
            try:
                state = load_rank_state(self.run_dir, self.rank, meta)
            except DamagedFileError as exc:
                raise ConfigError(f"resume: {exc}") from None
            if state is None:
                raise ConfigError(f"resume: checkpoint generation {meta['generation']} holds no state "
                                  f"for rank {self.rank}, got ranks {meta['ranks_with_state']}")
            learner.restore(state)
        if run_log is not None:
            run_log.attach(learner)
            self._shared["log"] = run_log
        return learner

    def checkpoint_due(self) -> bool:
        """Whether rank 0 should checkpoint now (``run.checkpoint_every_s`` elapsed)."""
        return self.comm.rank == 0 and self.checkpointer.due()

    def maybe_checkpoint(self, learner: Learner) -> None:
        """Single-learner topologies, on the learner: checkpoint if one is due."""
        if self.checkpoint_due():
            self.save_checkpoint(learner, ranks_with_state=[self.comm.rank])

    def save_checkpoint(self, learner: Learner, ranks_with_state: list[int],
                        collective: bool = False, comm: TimedComm | None = None) -> None:
        """Write this rank's part of a checkpoint (every rank in ``ranks_with_state`` calls it
        at the same point when ``collective``, meeting over ``comm``, by default this context's).
        The time it takes is off the training clock."""
        rows = self.log.flush() if self.log is not None else None
        if learner is not None:  # queued updates finish on the training clock, not the checkpoint's
            learner.settle()
        start = time.perf_counter()
        with PROGRESS.paused("writing a checkpoint"):  # a large replay may take a while
            self.checkpointer.save(learner, (comm or self.comm) if collective else None,
                                   ranks_with_state, rows)
        learner.clock.exclude(time.perf_counter() - start)

    def final_checkpoint(self, learner: Learner | None) -> None:
        """Every rank, once the topology stopped on a signal: the ranks holding a learner write
        their state and rank 0 publishes the generation (``resume=`` continues from it)."""
        holders = self.comm.allgather_objects(learner is not None, kind="checkpoint")
        rows = self.log.flush() if self.log is not None else None
        with PROGRESS.paused("writing the checkpoint of the stop"):
            self.checkpointer.save(learner, self.comm, [r for r, has in enumerate(holders) if has], rows)

    def progress(self) -> None:
        """Print a progress line if one is due (learner rank only)."""
        if self.log is not None:
            self.log.progress()

    def after_round(self, learner: Learner) -> Callable[[], None]:
        """What a single-learner topology's learner does after each round's training: a
        checkpoint if one is due, a progress line if one is due."""
        def after() -> None:
            self.maybe_checkpoint(learner)
            self.progress()

        return after
