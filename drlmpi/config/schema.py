"""The configuration schema: every option's type, default, allowed range and one-line doc.

:data:`SCHEMA` is the one place these live. :func:`register` stores each scope's defaults as a
node of Hydra's ConfigStore (``schema/root``, ``schema/env``, ``schema/algo/<name>``,
``schema/topology/<name>``); each YAML file in ``conf/`` starts its defaults list with its
scope's node and keeps only what differs (an environment's id and threshold, a tuned pair's
hyperparameters, a preset's sweep). Importing this module registers the nodes (the entry point
does; so must code that calls Hydra's ``compose`` API itself); :func:`group_config` gives one
group option's composed values without Hydra (tests, benchmarks). The checks against it:
:mod:`drlmpi.config.checks`; what users read of it: :mod:`drlmpi.config.reference`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from drlmpi.config.options import REQUIRED, Option

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"  # the checkout's conf/ (installed with pip -e)


def _int(default: int | None, doc: str, low: float | None = 1, high: float | None = None,
         nullable: bool = False) -> Option:
    return Option("int", doc, default, low=low, high=high, nullable=nullable)


def _float(default: float | None, doc: str, low: float | None = None, high: float | None = None,
           low_open: bool = False, nullable: bool = False) -> Option:
    return Option("float", doc, default, low=low, high=high, low_open=low_open, nullable=nullable)


def _positive(default: float | None, doc: str, nullable: bool = False) -> Option:
    return _float(default, doc, low=0, low_open=True, nullable=nullable)


def _unit(default: float, doc: str) -> Option:
    return _float(default, doc, low=0, high=1)


def _bool(default: bool, doc: str) -> Option:
    return Option("bool", doc, default)


def _str(default: str, doc: str, *choices: str) -> Option:
    return Option("str", doc, default, choices=tuple(choices))


def _ints(default: list[int], doc: str) -> Option:
    return Option("ints", doc, tuple(default))


def _named(target: str, name: str, what: str) -> dict[str, Option]:
    """``_target_`` (the class Hydra builds) and ``name`` of an algorithm or a topology."""
    return {"_target_": Option("str", "the class Hydra builds (module.Class)", target),
            "name": Option("str", f"the {what}'s name", name)}


_CAPTURE = _str("auto", "device learner: auto (CUDA graphs on CUDA, eager on cpu) | graph | compile | off",
                "auto", "graph", "compile", "off")
_CAPTURE_FUSED = _str("auto", "device learner: auto (fused on CUDA, graph for a CNN, eager on cpu) | fused "
                              "(loss and gradient compiled by inductor, replayed in CUDA graphs) | graph | "
                              "compile | off",
                      "auto", "fused", "graph", "compile", "off")
_PER_GRAPH = _int(1, "captured updates: this many updates per graph replay when that many are due")
_SYNC_UNIT = _str("steps", "what sync_every counts: environment steps or episodes", "steps", "episodes")
# The data-parallel topologies' share of the job's batch (drlmpi/topologies/data_parallel/batch_rule.py).
_BATCH_RULE = _str("global", "global: algo options describe the job (batch_size/N per rank, updates_per_step "
                             "per job-wide step); per_rank: each rank's", "global", "per_rank")
_LR_SCALE = _str("none", "batch_rule=per_rank: learning rates x N (linear), x sqrt(N) (sqrt) or as set "
                         "(none)", "none", "linear", "sqrt")


def _topology(cls: str, name: str, sync_every: int, sync_every_doc: str,
              **extra: Option) -> dict[str, Option]:
    return {**_named(f"drlmpi.topologies.{cls}", name, "topology"),
            "sync_every": _int(sync_every, sync_every_doc), "sync_unit": _SYNC_UNIT, **extra}


_BACKEND = _str("auto", "what averages the learners' gradients: mpi (host buffers), nccl (GPUs, one "
                        "learner rank per GPU), gloo (torch.distributed on CPUs), auto (nccl when the "
                        "learners are on CUDA and every node has a GPU per learner rank, else mpi)",
                "auto", "mpi", "nccl", "gloo")


SCHEMA: dict[str, dict[str, Option]] = {
    "": {
        "seed": _int(0, "base seed; rank r uses seed + 10000 * r", low=0),
        "device": _str("cpu", "learner device: cpu | cuda | cuda:N | auto (checked by run.plan)"),
        "act_device": _str("auto", "where a rank that holds a learner and simulates (sequential, "
                                   "allgather, parameter_server workers) acts: learner (with the learner's "
                                   "own network, on its device: no weight copies), cpu (a CPU copy loaded "
                                   "after each round), auto (learner for image observations on a CUDA "
                                   "learner, else cpu)",
                           "auto", "learner", "cpu"),
        "threads_per_rank": _int(1, "torch, OpenMP and MKL threads per rank"),
        "world_size": _int(None, "the number of ranks the job must have (null: any)", nullable=True),
        "budget_env_steps": _int(None, "the step budget the report judges 'budget met' by "
                                       "(null: run.max_env_steps)", nullable=True),
        "resume": Option("str", "a run directory to continue from its last checkpoint "
                                "(python -m drlmpi resume=DIR)", None, nullable=True),
    },
    "run": {
        "max_env_steps": _int(100_000, "budget: job-wide environment steps (null: no step budget)",
                              nullable=True),
        "max_train_seconds": _positive(None, "budget: training wall-clock seconds, evaluation excluded "
                                             "(null: none)", nullable=True),
        "max_episodes": _int(None, "budget: job-wide training episodes (null: none)", nullable=True),
        "eval_every": _int(5000, "greedy evaluation every this many job-wide env steps"),
        "eval_episodes": _int(10, "episodes per evaluation"),
        "stop_on_solve": _bool(True, "stop at the first evaluation that reaches env.reward_threshold"),
        "progress_every_s": _float(5, "seconds between progress lines on rank 0 (0: quiet)", low=0),
        "eval_envs": _int(10, "evaluation environments stepped together (at most eval_episodes)"),
        "eval_seed_offset": _int(1_000_000, "evaluation episodes are seeded from seed + this", low=0),
        "recent_window": _int(20, "training episodes averaged in the progress line's recent return"),
        "idle_busy_share": _unit(0.2, "a rank busy less than this share of its wall time is reported idle"),
        "checkpoint_every_s": _float(300, "seconds between checkpoints (0 or null: none)", low=0,
                                     nullable=True),
        "checkpoint_on_signal": _bool(True, "SIGTERM, SIGUSR1 or Ctrl-C stops the run at the next safe "
                                            "point with a checkpoint, summary and policy (exit code 4)"),
        "checkpoint_replay": _bool(True, "checkpoints include the replay or rollout contents "
                                         "(skipped above 2 GiB)"),
        "overwrite": _bool(False, "a hydra.run.dir holding a finished run (summary.json) is replaced "
                                  "(its summary, policy, checkpoints and tb/ removed) instead of refused"),
        "tensorboard": _bool(True, "rank 0 writes TensorBoard event files to <run dir>/tb/"),
        "tensorboard_every_s": _positive(2, "seconds between TensorBoard records (update metrics "
                                            "averaged over each)"),
        "rank_timeout_s": _float(120, "a rank without progress (MPI, env step, updates) this long ends "
                                      "the job (0 or null: no watchdog)", low=0, nullable=True),
        "deterministic": _bool(False, "CUDA learners repeat bit for bit: deterministic kernels, a fixed "
                                      "cuBLAS workspace, no cuDNN autotuning (slower; CPU runs repeat "
                                      "without it)"),
        "objective": Option("str", "the summary.json field each run returns to a tuner (hydra/sweeper="
                                   "optuna): its value, else run.objective_unsolved (null: none returned)",
                            None, choices=("train_seconds_to_threshold", "env_steps_to_threshold",
                                           "updates_to_threshold", "best_eval_return",
                                           "last_eval_return", "env_steps_per_s", "updates_per_s"),
                            nullable=True),
        "objective_unsolved": _float(None, "run.objective's value for a run that leaves the field empty "
                                           "(not solved, never evaluated); null: the run's own total "
                                           "for a *_to_threshold field (train_seconds, env_steps, "
                                           "updates), -inf for an evaluation return", nullable=True),
        "memory_sample_s": _float(0, "every rank records its resident memory this often into "
                                     "summary.json's per_rank rss_kib, for the report's memory check "
                                     "(0: off)", low=0),
    },
    "env": {
        "name": Option("str", "the environment's short name (run directories, report)"),
        "id": Option("str", "the Gymnasium id (module:Id imports the module first)"),
        "reward_threshold": _float(REQUIRED, "greedy mean return that solves the task "
                                             "(null: never solved)", nullable=True),
        "sim_cost_ms": _float(0, "CPU milliseconds of busy work added per step", low=0),
        "sim_cost_ms_by_rank": Option("map", "per-rank sim_cost_ms, e.g. {1: 20} (null: none)", None,
                                      nullable=True),
        "num_envs": _int(1, "environments stepped in lock step by each simulator"),
        "vector": _str("sync", "how a simulator steps its num_envs environments: sync (one after "
                               "another in its own process; ALE/ ids: one AtariVectorEnv on "
                               "num_threads threads) or async (one worker process each; not ALE/ ids)",
                       "sync", "async"),
        "num_threads": _int(1, "ALE/ ids: threads stepping a simulator's num_envs environments (one "
                               "AtariVectorEnv); at most the cores each rank may use"),
        "atari": Option("map", "Atari preprocessing for ALE/ ids (docs/environments.md lists the keys; "
                               "null: the defaults there)", None, nullable=True),
        "max_episode_steps": _int(None, "override the registered time limit (null keeps it)",
                                  nullable=True),
        "kwargs": Option("map", "extra keyword arguments for gymnasium.make", {}),
    },
    "algo/dqn": {
        **_named("drlmpi.algos.dqn.DQN", "dqn", "algorithm"),
        "hidden": _ints([256, 256], "hidden layer widths of the Q-network"),
        "encoder": _str("auto", "observation encoder: cnn for image observations (the Nature-DQN conv "
                                "stack), mlp for flat vectors; auto picks by the observation shape",
                        "auto", "mlp", "cnn"),
        "lr": _positive(2.3e-3, "Adam learning rate"),
        "gamma": _unit(0.99, "discount factor"),
        "double_q": _bool(True, "double-DQN target (false: the target net's own maximum)"),
        "batch_size": _int(64, "minibatch size per update"),
        "buffer_size": _int(100_000, "replay capacity (transitions)"),
        "learning_starts": _int(1000, "transitions in the replay before the first update", low=0),
        "updates_per_step": _positive(0.5, "gradient updates per job-wide environment step"),
        "target_update_every": _int(128, "hard target copy every this many updates (tau = 1)"),
        "tau": _float(1.0, "Polyak rate of the target (1: hard copies instead)", low=0, high=1,
                      low_open=True),
        "eps_start": _unit(1.0, "epsilon-greedy: initial epsilon"),
        "eps_end": _unit(0.04, "epsilon-greedy: final epsilon"),
        "exploration_steps": _int(8000, "job-wide env steps over which epsilon decays linearly", low=0),
        "max_grad_norm": _positive(10.0, "clip the gradient norm (null: no clipping)", nullable=True),
        "capture": _CAPTURE_FUSED,
        "updates_per_graph": _PER_GRAPH,
    },
    "algo/td3": {
        **_named("drlmpi.algos.td3.TD3", "td3", "algorithm"),
        "hidden": _ints([400, 300], "hidden widths of the actor and of each critic"),
        "actor_lr": _positive(1e-3, "Adam learning rate of the actor"),
        "critic_lr": _positive(1e-3, "Adam learning rate of the twin critics"),
        "gamma": _unit(0.98, "discount factor"),
        "tau": _float(0.005, "Polyak rate of the target networks", low=0, high=1, low_open=True),
        "batch_size": _int(256, "minibatch size per update"),
        "buffer_size": _int(200_000, "replay capacity (transitions)"),
        "learning_starts": _int(10_000, "uniform random actions, and no updates, before this many "
                                        "env steps", low=0),
        "updates_per_step": _positive(1.0, "critic updates per job-wide environment step"),
        "policy_delay": _int(2, "actor and target updates every this many critic updates"),
        "policy_noise": _float(0.2, "target smoothing noise std (fraction of the half action range)",
                               low=0),
        "noise_clip": _float(0.5, "target smoothing noise clip (fraction of the half action range)",
                             low=0),
        "exploration_noise": _float(0.1, "exploration noise std (fraction of the half action range)",
                                    low=0),
        "max_grad_norm": _positive(None, "clip each network's gradient norm (null: no clipping)",
                                   nullable=True),
        "capture": _CAPTURE_FUSED,
        "updates_per_graph": _PER_GRAPH,
    },
    "algo/ppo": {
        **_named("drlmpi.algos.ppo.PPO", "ppo", "algorithm"),
        "hidden": _ints([64, 64], "hidden widths of the policy trunk and of the value trunk"),
        "encoder": _str("auto", "observation encoder: cnn for image observations (the Nature-DQN conv "
                                "stack), mlp for flat vectors; auto picks by the observation shape",
                        "auto", "mlp", "cnn"),
        "activation": _str("tanh", "hidden-layer activation", "tanh", "relu"),
        "ortho_init": _bool(True, "orthogonal initialisation"),
        "lr": _positive(3e-4, "Adam learning rate"),
        "lr_schedule": _str("constant", "linear: the learning rate falls linearly to 0 over the run's "
                                        "budget (run.max_env_steps, else run.max_train_seconds)",
                            "constant", "linear"),
        "adam_eps": _positive(1e-5, "Adam epsilon"),
        "gamma": _unit(0.99, "discount factor"),
        "gae_lambda": _unit(0.95, "GAE lambda"),
        "rollout_steps": _int(2048, "rows (all envs of all simulators) per rollout"),
        "batch_size": _int(64, "minibatch size"),
        "epochs": _int(10, "passes over each rollout"),
        "clip_range": _positive(0.2, "clip of the probability ratio"),
        "clip_range_vf": _positive(None, "clip of the value change (null: no clipping)", nullable=True),
        "ent_coef": _float(0.0, "entropy bonus coefficient", low=0),
        "vf_coef": _float(0.5, "value loss coefficient", low=0),
        "max_grad_norm": _positive(0.5, "clip the global gradient norm (null: no clipping)",
                                   nullable=True),
        "normalize_advantage": _bool(True, "normalise advantages per minibatch"),
        "log_std_init": _float(0.0, "Box actions: initial log standard deviation"),
        "reward_scale": _positive(1.0, "rewards are multiplied by this before GAE"),
        "vtrace": _bool(True, "V-trace targets, the ratio clipped around the policy at rollout start and "
                              "weighted by the truncated ratio (false: GAE, ratio against the behaviour)"),
        "vtrace_rho_clip": _positive(1.0, "V-trace rho bar: truncation of pi/mu in the TD errors and the "
                                          "policy loss weight"),
        "vtrace_c_clip": _positive(1.0, "V-trace c bar: truncation of pi/mu in the traces (times "
                                        "gae_lambda)"),
        "capture": _CAPTURE,
    },
    "algo/random": _named("drlmpi.algos.random_policy.RandomPolicy", "random", "algorithm"),
    "topology/sequential": _topology("sequential.Sequential", "sequential", 256,
                                     "experience collected between training phases"),
    "topology/p2p": _topology("p2p.PointToPoint", "p2p", 256,
                              "experience the simulator collects between exchanges"),
    "topology/star": _topology("star.Star", "star", 256, "experience each simulator collects per round"),
    "topology/parameter_server": _topology("param_server.ParameterServer", "parameter_server", 64,
                                           "experience each worker collects per round",
                                           batch_rule=_BATCH_RULE, lr_scale=_LR_SCALE),
    "topology/async": _topology(
        "asynchronous.Asynchronous", "async", 64, "steps (per environment) per experience chunk",
        publish_every=_int(32, "the learner publishes weights every this many updates"),
        max_policy_lag=_int(None, "discard chunks acted with weights older than this many updates "
                                  "(null: on-policy algorithms one rollout's updates + publish_every, "
                                  "others keep all)", low=0, nullable=True),
        utd_mode=_str("ratio", "ratio: algo.updates_per_step per received step; free: train flat out",
                      "ratio", "free"),
        max_pending_updates=_int(None, "ratio mode: owed updates above which credits are withheld "
                                       "(null: the most one chunk entitled, twice that for replay-based "
                                       "algorithms)", nullable=True),
        slots=_int(2, "experience buffers in flight per simulator"),
    ),
    "topology/allgather": _topology(
        "allgather.Allgather", "allgather", 64, "steps (per environment) each rank collects per round",
        reduce=_str("allreduce", "allreduce: Allreduce(SUM)/N; allgather: Allgather + sum in rank order",
                    "allreduce", "allgather"),
        check_every=_int(1000, "verify identical parameters every N updates (0: only at the end)",
                         low=0),
        batch_rule=_BATCH_RULE, lr_scale=_LR_SCALE, backend=_BACKEND,
    ),
    "topology/central": {
        **_named("drlmpi.topologies.central.Central", "central", "topology"),
        "env_groups": _int(2, "groups each simulator's environments step in, taking turns (2: one group "
                              "steps while the learner acts for the other; at most env.num_envs, and 8)",
                           high=8),
        "updates_per_serve": _int(8, "updates the learner runs between two serves of the simulators while "
                                     "updates are owed"),
        "max_pending_updates": _int(None, "owed updates above which the learner trains them all before "
                                          "serving again (null: twice one PPO rollout's updates, else twice "
                                          "updates_per_serve)", nullable=True),
    },
}


SCHEMA["topology/groups"] = _topology(
    "groups.Groups", "groups", 64, "steps (per environment) each simulator sends per round (star) "
                                   "or chunk (async)",
    learners=_int(2, "L: the world splits into L groups of one learner and its simulators; the L "
                     "learners average gradients every update"),
    group_wiring=_str("star", "how each group's simulators feed its learner: star (collective rounds) "
                              "or async (nonblocking chunks)", "star", "async"),
    backend=_BACKEND,
    reduce=SCHEMA["topology/allgather"]["reduce"],
    check_every=SCHEMA["topology/allgather"]["check_every"],
    batch_rule=_BATCH_RULE, lr_scale=_LR_SCALE,
    **{key: SCHEMA["topology/async"][key] for key in ("publish_every", "max_policy_lag",
                                                      "max_pending_updates", "slots")},
)


def defaults(scope: str) -> dict[str, Any]:
    """The defaults of one scope as plain values (``???`` where an option has none)."""
    return {key: list(option.default) if isinstance(option.default, tuple) else option.default
            for key, option in SCHEMA[scope].items()}


def nodes() -> dict[str, dict[str, Any]]:
    """ConfigStore path -> node: ``schema/root`` (top level and ``run``), ``schema/env``,
    ``schema/algo/<name>``, ``schema/topology/<name>``."""
    out = {"schema/root": {**defaults(""), "run": defaults("run")}, "schema/env": defaults("env")}
    for scope in SCHEMA:
        if "/" in scope:
            out[f"schema/{scope}"] = defaults(scope)
    return out


def register() -> None:
    """Store every scope's defaults in Hydra's ConfigStore (plain nodes: values are checked by
    :func:`check_config`, which words its refusals for users, not by OmegaConf's types)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for path, node in nodes().items():
        group, _, name = path.rpartition("/")
        store.store(group=group, name=name, node=node)


def group_config(group: str, name: str) -> DictConfig:
    """``conf/<group>/<name>.yaml`` over its schema defaults, without Hydra (what composing
    ``<group>=<name>`` puts under ``<group>``, before tuned files, presets and overrides)."""
    own = OmegaConf.load(CONF_DIR / group / f"{name}.yaml")
    base = defaults(f"{group}/{name}" if group in ("algo", "topology") else group)
    own_values = {k: v for k, v in OmegaConf.to_container(own).items() if k != "defaults"}
    return OmegaConf.merge(OmegaConf.create(base), own_values)


def scope_of(cfg: Mapping[str, Any], path: str) -> dict[str, Option] | None:
    """The schema of ``cfg[path]`` (``algo``/``topology`` by their composed ``name``)."""
    if path in ("", "run", "env"):
        return SCHEMA[path]
    name = (cfg.get(path) or {}).get("name")
    return SCHEMA.get(f"{path}/{name}")


register()  # importing the schema makes its nodes available to Hydra (entry point, compose API)
