"""The settings of the top level, ``run``, ``env`` and each built-in algorithm, and the base of
every topology's (:class:`TopologySettings`: each topology declares its own subclass beside its
class, :attr:`drlmpi.topologies.core.base.Topology.settings_class`). What each option means is its
doc here; docs/configuration.md's reference and ``--help-all`` are generated from these classes
(:mod:`drlmpi.run.reference`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from drlmpi.config.environment import BIND_CHOICES
from drlmpi.config.options import REQUIRED
from drlmpi.config.settings import (
    Settings,
    choice,
    flag,
    int_list,
    integer,
    mapping,
    positive,
    real,
    text,
    unit,
)


def target(path: str) -> Any:
    """``_target_``: the class Hydra builds."""
    return text(path, "the class Hydra builds (module.Class)")


def label(name: str, what: str) -> Any:
    """``name``: the algorithm's or topology's name."""
    return text(name, f"the {what}'s name")


@dataclass(frozen=True)
class AlgoSettings(Settings):
    """An algorithm's settings: the class Hydra builds and its name, then its own options."""

    _target_: str = target("")
    name: str = label("", "algorithm")


@dataclass(frozen=True)
class TopologySettings(Settings):
    """A topology's settings: the class Hydra builds and its name, then its own options (a
    topology's subclass declares them with the field makers; mixins of several topologies'
    shared options live beside the code that reads them, in :mod:`drlmpi.topologies.core`)."""

    _target_: str = target("")
    name: str = label("", "topology")


def fused_capture() -> Any:
    """``capture`` of an algorithm whose update can be fused (DQN, TD3)."""
    return choice("auto", "device learner: auto (fused on CUDA, graph for a CNN, eager on cpu) | fused "
                          "(loss and gradient compiled by inductor, replayed in CUDA graphs) | graph | "
                          "compile | off", "auto", "fused", "graph", "compile", "off")


def encoder_choice() -> Any:
    """``encoder`` of an algorithm that takes image observations (DQN, PPO)."""
    return choice("auto", "observation encoder: cnn for image observations (the Nature-DQN conv stack), "
                          "impala (IMPALA's residual stack, about 6x cnn's compute), mlp for flat vectors; "
                          "auto picks cnn or mlp by the observation shape", "auto", "mlp", "cnn", "impala")


def per_graph() -> Any:
    return integer(1, "captured updates: this many updates per graph replay when that many are due")


@dataclass(frozen=True)
class RootSettings(Settings):
    scope: ClassVar[str] = ""
    seed: int = integer(0, "base seed; rank r uses seed + 10000 * r", low=0)
    device: str = text("cpu", "learner device: cpu | cuda | cuda:N | auto (checked by run.preflight)")
    act_device: str = choice(
        "auto", "where a rank that holds a learner and simulates (sequential, allgather, parameter_server "
                "workers) acts: learner (with the learner's own network, on its device: no weight copies), "
                "cpu (a CPU copy loaded after each round), auto (learner for image observations on a CUDA "
                "learner, else cpu)", "auto", "learner", "cpu")
    threads_per_rank: int = integer(1, "torch, OpenMP and MKL threads per rank")
    bind_ranks: str = choice(
        "auto", "pin each rank to a core of its own: auto (when a host's ranks are exactly the cores they "
                "may use, no launcher bound them and each runs one thread), core (always: rank i on the "
                "i-th usable core), none", *BIND_CHOICES)
    world_size: int | None = integer(None, "the number of ranks the job must have (null: any)", nullable=True)
    budget_env_steps: int | None = integer(
        None, "the step budget the report judges 'budget met' by (null: run.max_env_steps)", nullable=True)
    resume: str | None = text(
        None, "a run directory to continue from its last checkpoint (python -m drlmpi resume=DIR)",
        nullable=True)


@dataclass(frozen=True)
class RunSettings(Settings):
    scope: ClassVar[str] = "run"
    max_env_steps: int | None = integer(
        100_000, "budget: job-wide environment steps (null: no step budget)", nullable=True)
    max_train_seconds: float | None = positive(
        None, "budget: training wall-clock seconds, evaluation excluded (null: none)", nullable=True)
    max_episodes: int | None = integer(None, "budget: job-wide training episodes (null: none)", nullable=True)
    eval_every: int = integer(5000, "greedy evaluation every this many job-wide env steps")
    eval_episodes: int = integer(10, "episodes per evaluation")
    stop_on_solve: bool = flag(True, "stop at the first evaluation that reaches env.reward_threshold")
    progress_every_s: float = real(5, "seconds between progress lines on rank 0 (0: quiet)", low=0)
    eval_envs: int = integer(10, "evaluation environments stepped together (at most eval_episodes)")
    eval_seed_offset: int = integer(1_000_000, "evaluation episodes are seeded from seed + this", low=0)
    eval_on: str = choice(
        "learner", "who plays the evaluations: learner (training pauses) | simulators (p2p, star: split "
                   "across them, in the time they wait for the learner)", "learner", "simulators")
    recent_window: int = integer(20, "training episodes averaged in the progress line's recent return")
    idle_busy_share: float = unit(0.2, "a rank busy less than this share of its wall time is reported idle")
    checkpoint_every_s: float | None = real(
        300, "seconds between checkpoints (0 or null: none)", low=0, nullable=True)
    checkpoint_on_signal: bool = flag(
        True, "SIGTERM, SIGUSR1 or Ctrl-C stops the run at the next safe point with a checkpoint, summary "
              "and policy (exit code 4)")
    checkpoint_replay: bool = flag(
        True, "checkpoints include the replay or rollout contents (skipped above 2 GiB)")
    overwrite: bool = flag(
        False, "a hydra.run.dir holding a finished run (summary.json) is replaced (its summary, policy, "
               "checkpoints and tb/ removed) instead of refused")
    tensorboard: bool = flag(True, "rank 0 writes TensorBoard event files to <run dir>/tb/")
    tensorboard_every_s: float = positive(
        2, "seconds between TensorBoard records (update metrics averaged over each)")
    rank_timeout_s: float | None = real(
        120, "a rank without progress (MPI, env step, updates) this long ends the job (0 or null: no "
               "watchdog)", low=0, nullable=True)
    deterministic: bool = flag(
        False, "CUDA learners repeat bit for bit: deterministic kernels, a fixed cuBLAS workspace, no cuDNN"
               " autotuning (slower; CPU runs repeat without it)")
    matmul_precision: str = choice(
        "highest", "float32 matrix products: highest (full float32), high (TF32 tensor cores on GPUs that "
                   "have them: faster, a 10-bit mantissa per product) or medium (bfloat16); "
                   "torch.set_float32_matmul_precision", "highest", "high", "medium")
    objective: str | None = choice(
        None, "the summary.json field each run returns to a tuner (hydra/sweeper=optuna): its value, else "
              "run.objective_unsolved (null: none returned)",
        "train_seconds_to_threshold", "env_steps_to_threshold", "updates_to_threshold", "best_eval_return",
        "last_eval_return", "env_steps_per_s", "updates_per_s", nullable=True)
    objective_unsolved: float | None = real(
        None, "run.objective's value for a run that leaves the field empty (not solved, never evaluated); "
              "null: the run's own total for a *_to_threshold field (train_seconds, env_steps, updates), "
              "-inf for an evaluation return", nullable=True)
    memory_sample_s: float = real(
        0, "every rank records its resident memory this often into summary.json's per_rank rss_kib, for "
             "the report's memory check (0: off)", low=0)


@dataclass(frozen=True)
class EnvSettings(Settings):
    scope: ClassVar[str] = "env"
    name: str = text(REQUIRED, "the environment's short name (run directories, report)")
    id: str = text(REQUIRED, "the Gymnasium id (module:Id imports the module first)")
    reward_threshold: float | None = real(
        REQUIRED, "greedy mean return that solves the task (null: never solved)", nullable=True)
    sim_cost_ms: float = real(0, "CPU milliseconds of busy work added per step", low=0)
    sim_cost_ms_by_rank: Mapping[str, Any] | None = mapping(
        None, "per-rank sim_cost_ms, e.g. {1: 20} (null: none)", nullable=True)
    num_envs: int = integer(1, "environments stepped in lock step by each simulator")
    vector: str = choice(
        "sync", "how a simulator steps its num_envs environments: sync (in its own process: one after "
                "another, or in one vector env where the id's family has one) or async (one worker "
                "process each, where the family allows it)", "sync", "async")
    max_episode_steps: int | None = integer(
        None, "override the registered time limit (null keeps it)", nullable=True)
    kwargs: Mapping[str, Any] = mapping({}, "extra keyword arguments for gymnasium.make")

    def sim_cost_of(self, rank: int) -> float:
        """The CPU milliseconds of busy work a step costs on ``rank``: its entry in
        ``sim_cost_ms_by_rank`` (keyed by the rank as an int or a string), else ``sim_cost_ms``."""
        by_rank = self.sim_cost_ms_by_rank or {}
        for key in (rank, str(rank)):
            if key in by_rank:
                return float(by_rank[key])
        return self.sim_cost_ms


@dataclass(frozen=True)
class DQNSettings(AlgoSettings):
    scope: ClassVar[str] = "algo/dqn"
    _target_: str = target("drlmpi.algos.dqn.DQN")
    name: str = label("dqn", "algorithm")

    hidden: tuple[int, ...] = int_list([256, 256], "hidden layer widths of the Q-network")
    encoder: str = encoder_choice()
    lr: float = positive(0.0023, "Adam learning rate")
    gamma: float = unit(0.99, "discount factor")
    double_q: bool = flag(True, "double-DQN target (false: the target net's own maximum)")
    target_forward: str = choice(
        "paired", "with capture=fused and an MLP Q-network: the online and target networks evaluated in one"
                  " pass, one batched product per layer for both (paired: fewer device operations), or the "
                  "target as a pass of its own (separate)", "paired", "separate")
    batch_size: int = integer(64, "minibatch size per update")
    buffer_size: int = integer(100_000, "replay capacity (transitions)")
    learning_starts: int = integer(1000, "transitions in the replay before the first update", low=0)
    updates_per_step: float = positive(0.5, "gradient updates per job-wide environment step")
    target_update_every: int = integer(128, "hard target copy every this many updates (tau = 1)")
    tau: float = real(1.0, "Polyak rate of the target (1: hard copies instead)", low=0, high=1, low_open=True)
    eps_start: float = unit(1.0, "epsilon-greedy: initial epsilon")
    eps_end: float = unit(0.04, "epsilon-greedy: final epsilon")
    exploration_steps: int = integer(8000, "job-wide env steps over which epsilon decays linearly", low=0)
    eps_ladder: float = real(
        0.0, "Ape-X's exploration ladder: the job's environment i of N explores with epsilon^(1 + "
             "eps_ladder * i / (N - 1)) (0: every environment alike)", low=0)
    max_grad_norm: float | None = positive(10.0, "clip the gradient norm (null: no clipping)", nullable=True)
    capture: str = fused_capture()
    updates_per_graph: int = per_graph()


@dataclass(frozen=True)
class TD3Settings(AlgoSettings):
    scope: ClassVar[str] = "algo/td3"
    _target_: str = target("drlmpi.algos.td3.TD3")
    name: str = label("td3", "algorithm")

    hidden: tuple[int, ...] = int_list([400, 300], "hidden widths of the actor and of each critic")
    actor_lr: float = positive(0.001, "Adam learning rate of the actor")
    critic_lr: float = positive(0.001, "Adam learning rate of the twin critics")
    gamma: float = unit(0.98, "discount factor")
    tau: float = real(0.005, "Polyak rate of the target networks", low=0, high=1, low_open=True)
    batch_size: int = integer(256, "minibatch size per update")
    buffer_size: int = integer(200_000, "replay capacity (transitions)")
    learning_starts: int = integer(
        10_000, "uniform random actions, and no updates, before this many env steps", low=0)
    updates_per_step: float = positive(1.0, "critic updates per job-wide environment step")
    policy_delay: int = integer(2, "actor and target updates every this many critic updates")
    policy_noise: float = real(0.2, "target smoothing noise std (fraction of the half action range)", low=0)
    noise_clip: float = real(0.5, "target smoothing noise clip (fraction of the half action range)", low=0)
    exploration_noise: float = real(0.1, "exploration noise std (fraction of the half action range)", low=0)
    max_grad_norm: float | None = positive(
        None, "clip each network's gradient norm (null: no clipping)", nullable=True)
    capture: str = fused_capture()
    updates_per_graph: int = per_graph()
    twin_critics: str = choice(
        "auto", "the twin critics as two networks (separate) or as one of stacked layers, one batched "
                "product per layer for both (stacked): the same function and start, fewer device "
                "operations; auto: stacked on a CUDA learner, separate on the CPU",
        "auto", "separate", "stacked")
    target_forward: str = choice(
        "separate", "with capture=fused: each critic evaluated with its target network in one pass, one "
                    "batched product per layer for both (paired: fewer device operations; all four networks"
                    " in one with twin_critics=stacked), or the targets as a pass of their own (separate)",
        "paired", "separate")


@dataclass(frozen=True)
class PPOSettings(AlgoSettings):
    scope: ClassVar[str] = "algo/ppo"
    _target_: str = target("drlmpi.algos.ppo.PPO")
    name: str = label("ppo", "algorithm")

    hidden: tuple[int, ...] = int_list([64, 64], "hidden widths of the policy trunk and of the value trunk")
    encoder: str = encoder_choice()
    activation: str = choice("tanh", "hidden-layer activation", "tanh", "relu")
    ortho_init: bool = flag(True, "orthogonal initialisation")
    lr: float = positive(0.0003, "Adam learning rate")
    lr_schedule: str = choice(
        "constant", "linear: the learning rate falls linearly to 0 over the run's budget "
                    "(run.max_env_steps, else run.max_train_seconds)", "constant", "linear")
    adam_eps: float = positive(1e-05, "Adam epsilon")
    gamma: float = unit(0.99, "discount factor")
    gae_lambda: float = unit(0.95, "GAE lambda")
    rollout_steps: int = integer(2048, "rows (all envs of all simulators) per rollout")
    rollout_steps_per_env: int | None = integer(
        None, "steps of each environment per rollout: the rollout is this x the job's environments "
              "(env.num_envs x the ranks that step), replacing rollout_steps (null: rollout_steps holds)",
        nullable=True)
    batch_size: int = integer(64, "minibatch size")
    num_minibatches: int | None = integer(
        None, "minibatches per epoch: batch_size is the rollout's rows / this, replacing batch_size (null: "
              "batch_size holds)", nullable=True)
    epochs: int = integer(10, "passes over each rollout")
    clip_range: float = positive(0.2, "clip of the probability ratio")
    clip_schedule: str = choice(
        "constant", "linear: the ratio's clip falls linearly over the run's budget as lr_schedule=linear's "
                    "rate does (to 1% of clip_range)", "constant", "linear")
    clip_range_vf: float | None = positive(
        None, "clip of the value change (null: no clipping)", nullable=True)
    ent_coef: float = real(0.0, "entropy bonus coefficient", low=0)
    vf_coef: float = real(0.5, "value loss coefficient", low=0)
    max_grad_norm: float | None = positive(
        0.5, "clip the global gradient norm (null: no clipping)", nullable=True)
    normalize_advantage: bool = flag(True, "normalise advantages per minibatch")
    log_std_init: float = real(0.0, "Box actions: initial log standard deviation")
    reward_scale: float = positive(1.0, "rewards are multiplied by this before GAE")
    vtrace: bool = flag(
        True, "V-trace targets, the ratio clipped around the policy at rollout start and weighted by the "
              "truncated ratio (false: GAE, ratio against the behaviour)")
    vtrace_rho_clip: float = positive(
        1.0, "V-trace rho bar: truncation of pi/mu in the TD errors and the policy loss weight")
    vtrace_c_clip: float = positive(
        1.0, "V-trace c bar: truncation of pi/mu in the traces (times gae_lambda)")
    capture: str = choice("auto", "device learner: auto (CUDA graphs on CUDA, eager on cpu) | fused (the "
                                  "loss and its gradient compiled by inductor before the training clock, "
                                  "replayed in CUDA graphs) | graph | compile | off",
                          "auto", "fused", "graph", "compile", "off")
    autocast: str = choice(
        "off", "image observations: the shared trunk (encoder and hidden layers) runs under torch.autocast "
               "in bfloat16 - its convolutions and matrix products; weights, heads, losses and Adam stay "
               "float32 (off: all float32)", "off", "bfloat16")
    channels_last: bool = flag(
        False, "convolution stacks (encoder cnn or impala): images and activations laid out channels-last "
               "in memory (NHWC, the layout of cuDNN's tensor-core kernels); the same network and values")


@dataclass(frozen=True)
class RandomSettings(AlgoSettings):
    scope: ClassVar[str] = "algo/random"
    _target_: str = target("drlmpi.algos.random_policy.RandomPolicy")
    name: str = label("random", "algorithm")
