"""Preflight: every check of a job and every value resolved from its config, once, into one
validated run plan (:class:`~drlmpi.topologies.core.context.RunPlan`).

:func:`make_plan` is called by every rank right after Hydra composed the config and before any
communication (and by the sweep launcher for each job before it starts), so a bad combination
(p2p on 3 ranks, DQN on Pendulum) ends every rank with the same one-line message and a non-zero
exit - never a hang. What it returns, a :class:`~drlmpi.topologies.core.context.RunPlan`, is what flows
down to the topology and its roles: the classes, the environment's spaces, the resolved device,
the world size, the checkpoint to resume and a read-only copy of the config.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from hydra.utils import get_class
from omegaconf import DictConfig

from drlmpi.algos.base import Algorithm
from drlmpi.config.checks import check_config, ignored_options, undeclared
from drlmpi.config.errors import ConfigError
from drlmpi.config.job import JobSettings
from drlmpi.config.scopes import RunSettings
from drlmpi.envs import families
from drlmpi.envs.make import env_make_kwargs, probe_spec
from drlmpi.outputs.checkpoint import check_rank_files, read_meta
from drlmpi.topologies.core.base import Topology
from drlmpi.topologies.core.context import RunPlan
from drlmpi.topologies.core.registry import load_class, register


def make_plan(cfg: DictConfig, world_size: int) -> RunPlan:
    """Check the whole job before it starts and resolve what it runs with; raise
    :class:`ConfigError` with one clear line. The caller's ``cfg`` is not modified."""
    register()  # every topology's options in the schema (idempotent)
    families.register()  # and every environment family's
    check_config(cfg)  # types and ranges of every option (drlmpi.config.schema)
    algo_cls, topology_cls = resolve_classes(cfg)
    check_env_options(cfg.env)
    check_sim_costs(cfg.env, world_size)
    # Checked: from here on the job is its typed settings (every value of its declared type).
    settings = JobSettings.build(cfg, env=families.family_of(cfg.env.id).section())
    resume_meta = check_resume(settings, world_size) if settings.resume is not None else None
    if settings.world_size is not None and settings.world_size != world_size:
        raise ConfigError(
            f"world_size={settings.world_size} was asked for but this job has {world_size} rank(s)"
        )
    job_options = algo_cls.job_options(
        settings.algo, topology_cls.env_ranks(world_size, settings.topology) * settings.env.num_envs)
    if job_options:  # resolved before any check reads the algorithm's options
        settings = dataclasses.replace(settings, algo=settings.algo.replace(**job_options))
    try:
        spec = probe_spec(settings.env.id, **env_make_kwargs(settings.env))
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 (gymnasium raises many kinds for a bad id)
        raise ConfigError(f"env.id={settings.env.id!r} cannot be made: {exc}") from exc
    algo_cls.check_spec(spec)
    try:  # an acting-only instance is cheap and runs the algorithm's own checks of its config
        acting = algo_cls(spec, settings.algo, device="cpu", seed=0, learner=False)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"algo={settings.algo.name}: invalid configuration: {exc}") from exc
    device = resolve_device(settings.device)
    # Storage that cannot fit on the learner's device is refused now, with its size.
    algo_cls.check_storage(spec, settings.algo, device)
    plan = RunPlan(cfg=settings, world_size=world_size, algo_cls=algo_cls, topology_cls=topology_cls,
                   spec=spec, device=device, resume_meta=resume_meta,
                   warnings=budget_warnings(settings.run, acting) + ignored_options(cfg),
                   job_options=job_options, ignored=undeclared(cfg))
    topology_cls.check(plan)
    return plan


#: run.eval_every at or above this is the presets' way of turning evaluation off (no warning)
NO_EVALUATION = 100_000_000


def budget_warnings(run: RunSettings, algo: Algorithm) -> tuple[str, ...]:
    """What a step budget cannot reach: the first update (``algo.learning_starts`` of an
    off-policy algorithm, one rollout of an on-policy one) or the first evaluation."""
    budget = run.max_env_steps
    if budget is None:
        return ()
    out = []
    for key, need, what in (("learning_starts", algo.warm_up_rows(), "steps before the first update"),
                            ("rollout_steps", algo.rollout_rows(), "rows of the first rollout")):
        if need and need >= budget:
            out.append(f"run.max_env_steps={budget:,} ends before algo.{key}={need:,} ({what}): "
                       f"no update will run; raise the budget or lower algo.{key}")
    if budget < run.eval_every < NO_EVALUATION:
        out.append(f"run.max_env_steps={budget:,} ends before the first evaluation "
                   f"(run.eval_every={run.eval_every:,}): the run will not be evaluated")
    return tuple(out)


def resolve_classes(cfg: DictConfig) -> tuple[type[Algorithm], type[Topology]]:
    """The algorithm and topology classes named by ``cfg.algo._target_`` and
    ``cfg.topology._target_``."""
    try:
        algo_cls = get_class(cfg.algo._target_)
    except Exception as exc:  # noqa: BLE001 (Hydra raises several kinds)
        raise ConfigError(f"algo._target_={cfg.algo._target_!r} cannot be imported: {exc}") from exc
    return algo_cls, load_class(cfg.topology._target_)  # from a plugin directory too


def check_env_options(env: Any) -> None:
    """Refuse, in one line, ``env`` options the family of ``env.id`` cannot run (another family's
    options, or what the family itself refuses) or an id whose package is not installed:
    :func:`drlmpi.envs.families.check_env`."""
    families.check_env(env)


def check_sim_costs(env: Any, world_size: int) -> None:
    """Refuse, in one line, an ``env.sim_cost_ms_by_rank`` entry for a rank this job does not
    have, or a cost that is not a number >= 0 (it would be ignored, or fail mid-run)."""
    by_rank = env.get("sim_cost_ms_by_rank") or {}
    shown = f"env.sim_cost_ms_by_rank={dict(by_rank)}"
    for rank, cost in by_rank.items():
        if not str(rank).isdigit() or int(rank) >= world_size:
            raise ConfigError(f"env.sim_cost_ms_by_rank names rank {rank!r}, but the job has {world_size} "
                              f"rank(s), 0 to {world_size - 1}: use ranks of this job, got {shown}")
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost >= 0:
            raise ConfigError(f"env.sim_cost_ms_by_rank: the cost of rank {rank} must be a number of "
                              f"milliseconds >= 0, got {shown}")


def check_resume(cfg: JobSettings, world_size: int) -> dict[str, Any]:
    """The checkpoint ``cfg.resume`` names (its ``meta.json``); refuse, in one line, one this job
    cannot continue (another world size, topology, algorithm or environment)."""
    meta = read_meta(cfg.resume)
    if meta is None:
        raise ConfigError(f"resume: {cfg.resume} has no checkpoint (checkpoint/meta.json), got {cfg.resume}")
    if int(meta["world_size"]) != world_size:
        raise ConfigError(f"resume: the checkpoint was written by {meta['world_size']} rank(s) and this "
                          f"job has {world_size}: launch it with mpiexec -n {meta['world_size']}, "
                          f"got {world_size}")
    for key, now in (("topology", cfg.topology.name), ("algo", cfg.algo.name), ("env", cfg.env.id)):
        if str(meta.get(key)) != str(now):
            raise ConfigError(f"resume: the checkpoint was written with {key}={meta.get(key)}, "
                              f"got {key}={now}")
    damaged = check_rank_files(cfg.resume, meta)
    if damaged is not None:
        raise ConfigError(f"resume: checkpoint generation {meta['generation']}: {damaged}")
    return meta


def resolve_device(device: str) -> str:
    """The learner device ``device`` names, checked: ``auto`` is CUDA when torch sees one."""
    if device not in ("cpu", "auto", "cuda") and not device.startswith("cuda:"):
        raise ConfigError(f"device must be cpu, cuda, cuda:N or auto, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device=cuda was asked for but torch sees no CUDA device: use device=cpu")
    if device.startswith("cuda:") and not (device[5:].isdigit()
                                           and int(device[5:]) < torch.cuda.device_count()):
        raise ConfigError(f"device={device} does not name one of the "
                          f"{torch.cuda.device_count()} CUDA device(s) torch sees")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device
