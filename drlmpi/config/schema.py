"""The configuration schema: every option's type, default, allowed range and one-line doc.

:data:`SCHEMA` is the one place these live: the top level, ``run``, the ``env`` options every
environment has and each algorithm here; each topology's scope in its own module
(``Topology.options``), added by the topology registry (:mod:`drlmpi.topologies.registry`), and
each environment family's own ``env`` options in its module (``Family.options``, scope
``env/<family>``), added by :func:`drlmpi.envs.families.register` - both through
:func:`add_scope`. :func:`register` stores each scope's defaults as a node of Hydra's ConfigStore
(``schema/root``, ``schema/env``, ``schema/env/<family>`` - every env option and the family's
own -, ``schema/algo/<name>``, ``schema/topology/<name>``); each YAML file in ``conf/`` starts
its defaults list with its scope's node (an env file with its id's family's) and keeps only what
differs (an environment's id and threshold, a tuned pair's hyperparameters, a preset's sweep).
Importing this module registers the nodes it holds, the registries the topologies' and the
families' (the entry point does all three; so must code that calls Hydra's ``compose`` API
itself); :func:`group_config` gives one group option's composed values without Hydra (tests,
benchmarks). The checks against it: :mod:`drlmpi.config.checks`; what users read of it:
:mod:`drlmpi.run.reference`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from drlmpi.config.options import (
    REQUIRED,
    Option,
    choice,
    flag,
    int_list,
    integer,
    named,
    plain,
    positive,
    real,
    unit,
)
from drlmpi.config.plugins import group_files

_CAPTURE = choice("auto", "device learner: auto (CUDA graphs on CUDA, eager on cpu) | graph | compile | off",
                "auto", "graph", "compile", "off")
_CAPTURE_FUSED = choice("auto", "device learner: auto (fused on CUDA, graph for a CNN, eager on cpu) | fused "
                              "(loss and gradient compiled by inductor, replayed in CUDA graphs) | graph | "
                              "compile | off",
                      "auto", "fused", "graph", "compile", "off")
_PER_GRAPH = integer(1, "captured updates: this many updates per graph replay when that many are due")


SCHEMA: dict[str, dict[str, Option]] = {
    "": {
        "seed": integer(0, "base seed; rank r uses seed + 10000 * r", low=0),
        "device": choice("cpu", "learner device: cpu | cuda | cuda:N | auto (checked by run.preflight)"),
        "act_device": choice("auto", "where a rank that holds a learner and simulates (sequential, "
                                   "allgather, parameter_server workers) acts: learner (with the learner's "
                                   "own network, on its device: no weight copies), cpu (a CPU copy loaded "
                                   "after each round), auto (learner for image observations on a CUDA "
                                   "learner, else cpu)",
                           "auto", "learner", "cpu"),
        "threads_per_rank": integer(1, "torch, OpenMP and MKL threads per rank"),
        "bind_ranks": choice("auto", "pin each rank to a core of its own: auto (when a host's ranks are "
                                   "exactly the cores they may use, no launcher bound them and each "
                                   "runs one thread), core (always: rank i on the i-th usable core), "
                                   "none",
                           "auto", "core", "none"),
        "world_size": integer(None, "the number of ranks the job must have (null: any)", nullable=True),
        "budget_env_steps": integer(None, "the step budget the report judges 'budget met' by "
                                       "(null: run.max_env_steps)", nullable=True),
        "resume": Option("str", "a run directory to continue from its last checkpoint "
                                "(python -m drlmpi resume=DIR)", None, nullable=True),
    },
    "run": {
        "max_env_steps": integer(100_000, "budget: job-wide environment steps (null: no step budget)",
                              nullable=True),
        "max_train_seconds": positive(None, "budget: training wall-clock seconds, evaluation excluded "
                                             "(null: none)", nullable=True),
        "max_episodes": integer(None, "budget: job-wide training episodes (null: none)", nullable=True),
        "eval_every": integer(5000, "greedy evaluation every this many job-wide env steps"),
        "eval_episodes": integer(10, "episodes per evaluation"),
        "stop_on_solve": flag(True, "stop at the first evaluation that reaches env.reward_threshold"),
        "progress_every_s": real(5, "seconds between progress lines on rank 0 (0: quiet)", low=0),
        "eval_envs": integer(10, "evaluation environments stepped together (at most eval_episodes)"),
        "eval_seed_offset": integer(1_000_000, "evaluation episodes are seeded from seed + this", low=0),
        "eval_on": choice("learner", "who plays the evaluations: learner (training pauses) | simulators "
                                     "(p2p, star: split across them, in the time they wait for the learner)",
                          "learner", "simulators"),
        "recent_window": integer(20, "training episodes averaged in the progress line's recent return"),
        "idle_busy_share": unit(0.2, "a rank busy less than this share of its wall time is reported idle"),
        "checkpoint_every_s": real(300, "seconds between checkpoints (0 or null: none)", low=0,
                                     nullable=True),
        "checkpoint_on_signal": flag(True, "SIGTERM, SIGUSR1 or Ctrl-C stops the run at the next safe "
                                            "point with a checkpoint, summary and policy (exit code 4)"),
        "checkpoint_replay": flag(True, "checkpoints include the replay or rollout contents "
                                         "(skipped above 2 GiB)"),
        "overwrite": flag(False, "a hydra.run.dir holding a finished run (summary.json) is replaced "
                                  "(its summary, policy, checkpoints and tb/ removed) instead of refused"),
        "tensorboard": flag(True, "rank 0 writes TensorBoard event files to <run dir>/tb/"),
        "tensorboard_every_s": positive(2, "seconds between TensorBoard records (update metrics "
                                            "averaged over each)"),
        "rank_timeout_s": real(120, "a rank without progress (MPI, env step, updates) this long ends "
                                      "the job (0 or null: no watchdog)", low=0, nullable=True),
        "deterministic": flag(False, "CUDA learners repeat bit for bit: deterministic kernels, a fixed "
                                      "cuBLAS workspace, no cuDNN autotuning (slower; CPU runs repeat "
                                      "without it)"),
        "matmul_precision": choice("highest", "float32 matrix products: highest (full float32), high "
                                              "(TF32 tensor cores on GPUs that have them: faster, a "
                                              "10-bit mantissa per product) or medium (bfloat16); "
                                              "torch.set_float32_matmul_precision",
                                   "highest", "high", "medium"),
        "objective": Option("str", "the summary.json field each run returns to a tuner (hydra/sweeper="
                                   "optuna): its value, else run.objective_unsolved (null: none returned)",
                            None, choices=("train_seconds_to_threshold", "env_steps_to_threshold",
                                           "updates_to_threshold", "best_eval_return",
                                           "last_eval_return", "env_steps_per_s", "updates_per_s"),
                            nullable=True),
        "objective_unsolved": real(None, "run.objective's value for a run that leaves the field empty "
                                           "(not solved, never evaluated); null: the run's own total "
                                           "for a *_to_threshold field (train_seconds, env_steps, "
                                           "updates), -inf for an evaluation return", nullable=True),
        "memory_sample_s": real(0, "every rank records its resident memory this often into "
                                     "summary.json's per_rank rss_kib, for the report's memory check "
                                     "(0: off)", low=0),
    },
    "env": {
        "name": Option("str", "the environment's short name (run directories, report)"),
        "id": Option("str", "the Gymnasium id (module:Id imports the module first)"),
        "reward_threshold": real(REQUIRED, "greedy mean return that solves the task "
                                             "(null: never solved)", nullable=True),
        "sim_cost_ms": real(0, "CPU milliseconds of busy work added per step", low=0),
        "sim_cost_ms_by_rank": Option("map", "per-rank sim_cost_ms, e.g. {1: 20} (null: none)", None,
                                      nullable=True),
        "num_envs": integer(1, "environments stepped in lock step by each simulator"),
        "vector": choice("sync", "how a simulator steps its num_envs environments: sync (in its own "
                               "process: one after another, or in one vector env where the id's family "
                               "has one) or async (one worker process each, where the family allows it)",
                       "sync", "async"),
        "max_episode_steps": integer(None, "override the registered time limit (null keeps it)",
                                  nullable=True),
        "kwargs": Option("map", "extra keyword arguments for gymnasium.make", {}),
    },
    "algo/dqn": {
        **named("drlmpi.algos.dqn.DQN", "dqn", "algorithm"),
        "hidden": int_list([256, 256], "hidden layer widths of the Q-network"),
        "encoder": choice("auto", "observation encoder: cnn for image observations (the Nature-DQN conv "
                                "stack), mlp for flat vectors; auto picks by the observation shape",
                        "auto", "mlp", "cnn"),
        "lr": positive(2.3e-3, "Adam learning rate"),
        "gamma": unit(0.99, "discount factor"),
        "double_q": flag(True, "double-DQN target (false: the target net's own maximum)"),
        "target_forward": choice("paired",
                                 "with capture=fused and an MLP Q-network: the online and target networks "
                                 "evaluated in one pass, one batched product per layer for both (paired: "
                                 "fewer device operations), or the target as a pass of its own (separate)",
                                 "paired", "separate"),
        "batch_size": integer(64, "minibatch size per update"),
        "buffer_size": integer(100_000, "replay capacity (transitions)"),
        "learning_starts": integer(1000, "transitions in the replay before the first update", low=0),
        "updates_per_step": positive(0.5, "gradient updates per job-wide environment step"),
        "target_update_every": integer(128, "hard target copy every this many updates (tau = 1)"),
        "tau": real(1.0, "Polyak rate of the target (1: hard copies instead)", low=0, high=1,
                      low_open=True),
        "eps_start": unit(1.0, "epsilon-greedy: initial epsilon"),
        "eps_end": unit(0.04, "epsilon-greedy: final epsilon"),
        "exploration_steps": integer(8000, "job-wide env steps over which epsilon decays linearly", low=0),
        "eps_ladder": real(0.0, "Ape-X's exploration ladder: the job's environment i of N explores with "
                                "epsilon^(1 + eps_ladder * i / (N - 1)) (0: every environment alike)", low=0),
        "max_grad_norm": positive(10.0, "clip the gradient norm (null: no clipping)", nullable=True),
        "capture": _CAPTURE_FUSED,
        "updates_per_graph": _PER_GRAPH,
    },
    "algo/td3": {
        **named("drlmpi.algos.td3.TD3", "td3", "algorithm"),
        "hidden": int_list([400, 300], "hidden widths of the actor and of each critic"),
        "actor_lr": positive(1e-3, "Adam learning rate of the actor"),
        "critic_lr": positive(1e-3, "Adam learning rate of the twin critics"),
        "gamma": unit(0.98, "discount factor"),
        "tau": real(0.005, "Polyak rate of the target networks", low=0, high=1, low_open=True),
        "batch_size": integer(256, "minibatch size per update"),
        "buffer_size": integer(200_000, "replay capacity (transitions)"),
        "learning_starts": integer(10_000, "uniform random actions, and no updates, before this many "
                                        "env steps", low=0),
        "updates_per_step": positive(1.0, "critic updates per job-wide environment step"),
        "policy_delay": integer(2, "actor and target updates every this many critic updates"),
        "policy_noise": real(0.2, "target smoothing noise std (fraction of the half action range)",
                               low=0),
        "noise_clip": real(0.5, "target smoothing noise clip (fraction of the half action range)",
                             low=0),
        "exploration_noise": real(0.1, "exploration noise std (fraction of the half action range)",
                                    low=0),
        "max_grad_norm": positive(None, "clip each network's gradient norm (null: no clipping)",
                                   nullable=True),
        "capture": _CAPTURE_FUSED,
        "updates_per_graph": _PER_GRAPH,
        "twin_critics": choice("auto",
                               "the twin critics as two networks (separate) or as one of stacked layers, one "
                               "batched product per layer for both (stacked): the same function and start, "
                               "fewer device operations; auto: stacked on a CUDA learner, separate on the "
                               "CPU",
                               "auto", "separate", "stacked"),
        "target_forward": choice("separate",
                                 "with capture=fused: each critic evaluated with its target network in one "
                                 "pass, one batched product per layer for both (paired: fewer device "
                                 "operations; all four networks in one with twin_critics=stacked), or the "
                                 "targets as a pass of their own (separate)",
                                 "paired", "separate"),
    },
    "algo/ppo": {
        **named("drlmpi.algos.ppo.PPO", "ppo", "algorithm"),
        "hidden": int_list([64, 64], "hidden widths of the policy trunk and of the value trunk"),
        "encoder": choice("auto", "observation encoder: cnn for image observations (the Nature-DQN conv "
                                "stack), mlp for flat vectors; auto picks by the observation shape",
                        "auto", "mlp", "cnn"),
        "activation": choice("tanh", "hidden-layer activation", "tanh", "relu"),
        "ortho_init": flag(True, "orthogonal initialisation"),
        "lr": positive(3e-4, "Adam learning rate"),
        "lr_schedule": choice("constant", "linear: the learning rate falls linearly to 0 over the run's "
                                        "budget (run.max_env_steps, else run.max_train_seconds)",
                            "constant", "linear"),
        "adam_eps": positive(1e-5, "Adam epsilon"),
        "gamma": unit(0.99, "discount factor"),
        "gae_lambda": unit(0.95, "GAE lambda"),
        "rollout_steps": integer(2048, "rows (all envs of all simulators) per rollout"),
        "rollout_steps_per_env": integer(None, "steps of each environment per rollout: the rollout is "
                                               "this x the job's environments (env.num_envs x the ranks "
                                               "that step), replacing rollout_steps (null: rollout_steps "
                                               "holds)", nullable=True),
        "batch_size": integer(64, "minibatch size"),
        "num_minibatches": integer(None, "minibatches per epoch: batch_size is the rollout's rows / "
                                         "this, replacing batch_size (null: batch_size holds)",
                                   nullable=True),
        "epochs": integer(10, "passes over each rollout"),
        "clip_range": positive(0.2, "clip of the probability ratio"),
        "clip_range_vf": positive(None, "clip of the value change (null: no clipping)", nullable=True),
        "ent_coef": real(0.0, "entropy bonus coefficient", low=0),
        "vf_coef": real(0.5, "value loss coefficient", low=0),
        "max_grad_norm": positive(0.5, "clip the global gradient norm (null: no clipping)",
                                   nullable=True),
        "normalize_advantage": flag(True, "normalise advantages per minibatch"),
        "log_std_init": real(0.0, "Box actions: initial log standard deviation"),
        "reward_scale": positive(1.0, "rewards are multiplied by this before GAE"),
        "vtrace": flag(True, "V-trace targets, the ratio clipped around the policy at rollout start and "
                              "weighted by the truncated ratio (false: GAE, ratio against the behaviour)"),
        "vtrace_rho_clip": positive(1.0, "V-trace rho bar: truncation of pi/mu in the TD errors and the "
                                          "policy loss weight"),
        "vtrace_c_clip": positive(1.0, "V-trace c bar: truncation of pi/mu in the traces (times "
                                        "gae_lambda)"),
        "capture": _CAPTURE,
    },
    "algo/random": named("drlmpi.algos.random_policy.RandomPolicy", "random", "algorithm"),
}


def default_of(option: Option) -> Any:
    """An option's default as a plain value of its own (a list where the option holds a tuple)."""
    return list(option.default) if isinstance(option.default, tuple) else copy.copy(option.default)


def defaults(scope: str) -> dict[str, Any]:
    """The defaults of one scope as plain values (``???`` where an option has none)."""
    return {key: default_of(option) for key, option in SCHEMA[scope].items()}


def node(scope: str) -> DictConfig:
    """The ConfigStore node of ``scope``: its defaults - an environment family's (``env/<name>``)
    over every environment's. A map option whose default is a mapping stays open: a key is set
    with or without ``+`` (``env.atari.frame_stack=2``)."""
    options = {**SCHEMA["env"], **SCHEMA[scope]} if scope.startswith("env/") else SCHEMA[scope]
    out = OmegaConf.create({key: default_of(option) for key, option in options.items()})
    for key, option in options.items():
        if option.kind == "map" and isinstance(option.default, Mapping):
            OmegaConf.set_struct(out[key], False)
    return out


def nodes() -> dict[str, Any]:
    """ConfigStore path -> node: ``schema/root`` (top level and ``run``), ``schema/env``,
    ``schema/algo/<name>``, ``schema/topology/<name>`` and ``schema/env/<family>`` (the
    topologies' and families' once registered)."""
    out: dict[str, Any] = {"schema/root": {**defaults(""), "run": defaults("run")}}
    for scope in SCHEMA:
        if scope not in ("", "run"):
            out[f"schema/{scope}"] = node(scope)
    return out


def _store(path: str, value: Any) -> None:
    from hydra.core.config_store import ConfigStore

    group, _, name = path.rpartition("/")
    ConfigStore.instance().store(group=group, name=name, node=value)


def register() -> None:
    """Store every scope's defaults in Hydra's ConfigStore (plain nodes: values are checked by
    :func:`check_config`, which words its refusals for users, not by OmegaConf's types)."""
    for path, value in nodes().items():
        _store(path, value)


def add_scope(scope: str, options: dict[str, Option]) -> None:
    """Add a scope declared outside this module - a topology's or an environment family's, which
    its own module declares (:mod:`drlmpi.topologies.registry`, :mod:`drlmpi.envs.families` add
    them all) - and store its node for Hydra."""
    SCHEMA[scope] = options
    _store(f"schema/{scope}", node(scope))


def group_scopes(group: str) -> dict[str, dict[str, Option]]:
    """Every scope of ``algo``, ``topology`` or ``env`` (the families') added so far, by name
    (``dqn``, ``star``, ``atari``)."""
    return {scope.split("/", 1)[1]: options for scope, options in SCHEMA.items()
            if scope.startswith(f"{group}/")}


def file_scope(group: str, name: str) -> str | None:
    """The scope whose node ``conf/<group>/<name>.yaml`` starts from (``env/atari`` for a file
    whose defaults list names ``/schema/env/atari@_here_``); ``None``: no such file or scope."""
    path = group_files(group).get(name)
    if path is None:
        return None
    for entry in OmegaConf.load(path).get("defaults") or ():
        text = str(entry)
        if text.startswith("/schema/") and text.endswith("@_here_"):
            scope = text.removeprefix("/schema/").removesuffix("@_here_")
            return scope if scope in SCHEMA else None
    return None


def group_config(group: str, name: str) -> DictConfig:
    """``conf/<group>/<name>.yaml`` over its schema defaults, without Hydra (what composing
    ``<group>=<name>`` puts under ``<group>``, before tuned files, presets and overrides)."""
    own = OmegaConf.load(group_files(group)[name])
    scope = file_scope(group, name)
    own_values = {k: v for k, v in OmegaConf.to_container(own).items() if k != "defaults"}
    return OmegaConf.merge(node(scope) if scope else OmegaConf.create({}), own_values)


def scope_values(options: Mapping[str, Option], section: Mapping[str, Any]) -> dict[str, Any]:
    """``section``'s values of ``options`` (plain), an option's default where ``section`` lacks
    it (a family's options where ``env.id=`` names one of its ids on another family's env file)."""
    return {key: plain(section[key]) if key in section else default_of(option)
            for key, option in options.items()}


register()  # importing the schema makes its nodes available to Hydra (entry point, compose API)
