"""The learning role: a :class:`Learner` stores experience, runs the updates it entitles, evaluates,
logs and decides when the run stops (no MPI here: a topology moves the rows in and the policy's
flat parameters out). Its budget, evaluations and stop decision, and the training clock, which
leaves evaluations out, are :mod:`drlmpi.roles.stopping`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from drlmpi.algos.base import Algorithm
from drlmpi.algos.exchange import LOCAL, GradientExchange
from drlmpi.config.errors import NonFiniteError
from drlmpi.config.scopes import RunSettings
from drlmpi.data.finite import first_non_finite
from drlmpi.device.acting import Acting, HostActing
from drlmpi.device.staging import DeviceSpan
from drlmpi.job_control.progress import PROGRESS
from drlmpi.outputs.pace import PaceNotes
from drlmpi.roles.actor import Actor, episode_ends, episode_stats
from drlmpi.roles.stopping import TrainingClock
from drlmpi.roles.training import Training


class Learner(Training):
    """Owns the learning algorithm, the job-wide counters, evaluation and the stop decision.

    Topologies drive it through methods only (they never assign its attributes):

    * :meth:`ingest` - experience arrived from a simulator: store it, count it, log its episodes;
    * :meth:`store` + :meth:`count_steps` - data-parallel ranks store their own rows and count
      the job-wide steps the ranks agreed on;
    * :meth:`discard` - count and log experience without learning from it (too stale);
    * :meth:`train` - run the updates the data entitles; :meth:`train_free` - one update
      regardless (a free-running learner); :meth:`train_exactly` - as many updates as the
      ranks it averages with run (a parameter server, whose gradients come from its workers).
      Every update goes through :meth:`~drlmpi.algos.base.Algorithm.run_updates` with the
      learner's ``exchange``;
    * :meth:`policy_weights` - the flat policy parameters simulators need (one copy on a GPU).

    Args:
        algo: the learner-side algorithm instance.
        make_eval_envs: builds the evaluation environments (called once, lazily).
        run: the ``run`` settings (budgets, evaluation, threshold handling; a config node is
            built into :class:`~drlmpi.config.scopes.RunSettings`).
        reward_threshold: greedy evaluation mean that counts as solved.
        log: receives ``log(kind, **fields)`` for episodes and evaluations (or ``None``).
        seed: seeds evaluation episodes (``seed + run.eval_seed_offset + ...``).
        mpi_clock: seconds spent inside MPI so far on this rank: MPI time during updates
            (gradient collectives) is counted as MPI wait, not as learning.
        exchange: how gradients reach the optimizers (the topology's: gradients averaged with
            other learners, a parameter server's round trip; :data:`~drlmpi.algos.exchange.LOCAL`
            for a single learner).
        rank: this learner's job rank (names where experience came from when the finite check
            of :meth:`store` stops the run).
    """

    def __init__(self, algo: Algorithm, make_eval_envs: Callable[[], list[gym.Env]],
                 run: RunSettings | Mapping[str, Any], reward_threshold: float | None,
                 log: Callable[..., None] | None = None, seed: int = 0,
                 mpi_clock: Callable[[], float] | None = None,
                 exchange: GradientExchange = LOCAL,
                 stop_request: Callable[[], str | None] | None = None, rank: int = 0) -> None:
        self.algo = algo
        self.rank = rank
        #: asks whether a signal wants the run stopped (the deciding learner only:
        #: :data:`drlmpi.job_control.stop.STOP` on rank 0 with ``run.checkpoint_on_signal``)
        self.stop_request = stop_request
        self._stopped_by: str | None = None  # the reason the run stopped, once it has
        self.exchange = exchange
        self._make_eval_envs = make_eval_envs
        self._eval_envs: list[gym.Env] | None = None
        run = RunSettings.coerce(run)
        self.max_env_steps = run.max_env_steps
        self.max_train_seconds = run.max_train_seconds
        self.max_episodes = run.max_episodes
        self.eval_every = run.eval_every
        self.eval_episodes = run.eval_episodes
        self.eval_seed_offset = run.eval_seed_offset
        self.recent_window = run.recent_window
        self.stop_on_solve = run.stop_on_solve
        self.reward_threshold = reward_threshold
        self.log = log
        self.seed = seed
        with PROGRESS.paused("start-up: compiling the learner's update"):
            algo.warm_up()  # algo.capture=fused: compile now, before the training clock starts
        self.clock = TrainingClock()
        #: the pace as episodes end (summary.json's second_half)
        self.pace = PaceNotes()
        self.env_steps = 0
        self.episodes = 0
        self.pending_updates = 0
        self.learn_s = 0.0
        self._unsettled: list[DeviceSpan] = []  # batches of updates queued by train(settle=False)
        self.next_eval = self.eval_every
        self.solved_at: dict[str, float] | None = None
        self.last_eval: float | None = None
        self.best_eval: float | None = None
        self.evaluations = 0
        self.resumes = 0  # how many times the run was resumed from a checkpoint (resume=)
        #: the counters this part of the run started from (a resumed run: the checkpoint's; else 0):
        #: the per-rank figures of summary.json count this part alone
        self.part_start = {"env_steps": 0, "updates": 0, "learn_s": 0.0, "train_seconds": 0.0}
        self.recent_returns: list[float] = []
        # The latest update's metrics (loss, Q, KL...): a mapping name -> float whose values
        # may still be one device tensor (drlmpi.device.metrics.Metrics), converted when first read.
        self.last_metrics: Mapping[str, float] = {}
        self.policy_lags: list[int] = []  # learner updates between acting and learning
        self._time_schedules = True  # see follow_steps_only
        self.mpi_clock: Callable[[], float] = mpi_clock or (lambda: 0.0)

    @property
    def updates(self) -> int:
        """Gradient updates done so far."""
        return self.algo.updates

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint_state(self, with_storage: bool = True) -> dict[str, Any]:
        """The algorithm's training state and this learner's counters, clocks and evaluation
        history (tensors and plain values only: see :mod:`drlmpi.outputs.checkpoint`)."""
        self.settle()
        return {
            "algo": self.algo.training_state(with_storage=with_storage),
            "learner": {
                "env_steps": self.env_steps, "episodes": self.episodes,
                # updates owed for rows the checkpoint leaves out are owed no more
                "pending_updates": self.pending_updates if with_storage else 0, "learn_s": self.learn_s,
                "next_eval": self.next_eval, "solved_at": self.solved_at, "last_eval": self.last_eval,
                "best_eval": self.best_eval, "evaluations": self.evaluations, "resumes": self.resumes,
                "recent_returns": list(self.recent_returns),
                "policy_lags": torch.tensor(self.policy_lags, dtype=torch.int64),
                "train_seconds": self.clock.elapsed(), "wall_seconds": self.clock.wall(),
                "startup_seconds": self.clock.startup_s,
            },
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`checkpoint_state`: the clocks go on from the saved times."""
        self.algo.load_training_state(state["algo"])
        saved = state["learner"]
        for key in ("env_steps", "episodes", "pending_updates", "next_eval", "evaluations"):
            setattr(self, key, int(saved[key]))
        self.learn_s = float(saved["learn_s"])
        self.resumes = (int(saved["resumes"]) if "resumes" in saved else 0) + 1  # (older checkpoints: 0)
        self.solved_at = saved["solved_at"]
        self.last_eval, self.best_eval = saved["last_eval"], saved["best_eval"]
        self.recent_returns = [float(r) for r in saved["recent_returns"]]
        self.policy_lags = saved["policy_lags"].tolist()
        wall, train = float(saved["wall_seconds"]), float(saved["train_seconds"])
        startup = float(saved["startup_seconds"]) if "startup_seconds" in saved else 0.0  # (older: none)
        self.clock.set_to(wall, train, startup)
        self.part_start = {"env_steps": self.env_steps, "updates": self.updates, "learn_s": self.learn_s,
                           "train_seconds": train}

    def successive_rows(self) -> None:
        """The topology builds every row itself, each env stream's in step order, none missing
        (central): the algorithm may rely on it (:meth:`~drlmpi.algos.base.Algorithm.successive_rows`)."""
        self.algo.successive_rows()

    @property
    def part_learn_s(self) -> float:
        """Seconds of updates in this part of the run (all of it unless it was resumed)."""
        return self.learn_s - self.part_start["learn_s"]

    @property
    def part_updates(self) -> int:
        """Updates in this part of the run (all of them unless it was resumed)."""
        return self.updates - self.part_start["updates"]

    @property
    def device(self) -> torch.device:
        """The device this learner's updates run on."""
        return self.algo.device

    @property
    def layout(self) -> Any:
        """The experience layout of the rows this learner takes."""
        return self.algo.layout

    # -- experience ---------------------------------------------------------------------------
    def ingest(self, rows: np.ndarray, source_rank: int, policy_lag: int | None = None) -> int:
        """Store experience from ``source_rank``, count it, log the episodes it finished.

        ``policy_lag``: learner updates between the policy that acted and now, if known.
        Returns the updates these rows entitle.
        """
        return self.ingest_parts(rows, [(rows.shape[0], source_rank, policy_lag)])

    def ingest_parts(self, rows: np.ndarray, parts: list[tuple[int, int, int | None]]) -> int:
        """:meth:`ingest` of consecutive parts of ``rows`` from several sources at once:
        ``parts`` holds ``(row count, source rank, policy lag)`` in order. The rows are stored as
        ONE chunk (one copy to the learner's device); counted and logged per part."""
        if rows.shape[0] == 0:
            return 0
        due = self.store(rows, [source for count, source, _ in parts for _ in range(count)])
        ends, episodes = episode_ends(rows, self.algo.layout)  # one scan for every part's (mostly none)
        stop, first = 0, 0
        for count, source_rank, policy_lag in parts:
            if count:
                stop += count
                self.env_steps += count
                if policy_lag is not None:
                    self.policy_lags.append(int(policy_lag))
                last = int(np.searchsorted(ends, stop))
                for episode_return, length in episodes[first:last]:
                    self.record_episode(float(episode_return), int(length), source_rank)
                first = last
        return due

    def store(self, rows: np.ndarray, sources: list[int] | None = None) -> int:
        """Store rows and accrue the updates they entitle, without counting job-wide steps
        (data-parallel ranks count the agreed job-wide total with :meth:`count_steps`).
        Returns the updates these rows entitle.

        Every topology's experience reaches the algorithm here, so this is where it is checked:
        a NaN or an infinity in a float column raises :class:`NonFiniteError` before anything is
        stored (``sources``: the rank each row came from, for the message; this rank's own by
        default)."""
        if rows.shape[0] == 0:
            return 0
        found = first_non_finite(rows, self.algo.layout)
        if found is not None:
            row, what = found
            source = self.rank if sources is None else sources[row]
            self.stop_non_finite(f"non-finite {what} in the experience of rank {source} "
                                 f"at env step {self.env_steps + row + 1:,}")
        self.algo.observe(rows)
        due = self.algo.updates_due(rows.shape[0])
        self.pending_updates += due
        return due

    def count_steps(self, n: int) -> None:
        """Count ``n`` job-wide environment steps stored or learned from elsewhere."""
        self.env_steps += int(n)

    def discard(self, rows: np.ndarray, source_rank: int) -> None:
        """Count experience and log its episodes without learning from it (e.g. too stale)."""
        self.env_steps += rows.shape[0]
        self.log_episodes(rows, source_rank)

    def log_episodes(self, rows: np.ndarray, source_rank: int) -> None:
        """Count and log the episodes that ``rows`` finished (without storing the rows)."""
        for ret, length in episode_stats(rows, self.algo.layout):
            self.record_episode(float(ret), int(length), source_rank)

    def record_episode(self, episode_return: float, length: int, source_rank: int) -> None:
        """Count and log one finished training episode run by ``source_rank``."""
        self.episodes += 1
        # One moment stamps the pace's note and the row (two reads of the clock differ on a
        # loaded host, and the summary's second half must name rows of metrics.csv).
        at = self.moment()
        self.pace.note(at.train_seconds, at.env_steps)
        self.recent_returns.append(episode_return)
        del self.recent_returns[:-self.recent_window]
        if self.log is not None:
            self.log("episode", return_=episode_return, length=length, rank=source_rank, at=at)

    def finite_weights(self) -> bool:
        """Whether every parameter of every trained network is finite (one check per flat
        buffer: a network trained into NaN must not be written as a policy or a checkpoint)."""
        return all(bool(torch.isfinite(group.flat.params).all()) for group in self.algo.groups.values())

    def check_weights(self) -> None:
        """Raise :class:`NonFiniteError` if a trained network holds a NaN or an infinity."""
        if not self.finite_weights():
            self.stop_non_finite(f"non-finite policy weights after {self.updates:,} updates "
                                 f"at env step {self.env_steps:,}")

    def stop_non_finite(self, what: str) -> None:
        """Stop the run: raise :class:`NonFiniteError` saying ``what``, carrying the policy's
        state while its weights are still finite (the run writes it as ``policy.pt``)."""
        raise NonFiniteError(what, policy=self.algo.state_dict() if self.finite_weights() else None)

    def policy_weights(self) -> np.ndarray:
        """The policy's flat float32 parameters (a view on CPU, one copy from a GPU)."""
        return self.algo.policy.flat.params_numpy()

    # -- what topologies ask of the algorithm (they never reach into ``learner.algo``) ----------
    def lead(self, actor: Actor) -> None:
        """Have ``actor`` (on this rank) act with this learner's current policy."""
        actor.follow(self.algo)

    def rollout_updates(self) -> int | None:
        """The updates one rollout entitles (on-policy algorithms; ``None`` otherwise)."""
        return self.algo.rollout_updates()

    @property
    def queues_updates(self) -> bool:
        """Whether updates are queued on an accelerator (finishing after the call returns)."""
        return self.algo.queues_updates

    def ready_to_update(self) -> bool:
        """Whether the algorithm holds enough experience for an update (flat-out training)."""
        return self.algo.ready_to_update()

    def row_buffer(self, n: int) -> np.ndarray:
        """``n`` rows to build experience into (pinned staging rows on a device learner)."""
        return self.algo.row_buffer(n)

    def acting_for_simulators(self, max_rows: int, beside_updates: bool = False) -> Acting | HostActing:
        """:func:`simulator_acting` of this learner's algorithm, its passes captured at every batch
        size it may serve (:meth:`~drlmpi.device.acting.Acting.prepare`) before training starts:
        the capturing is start-up, off the training clock, and no capture waits for queued
        updates once the run serves."""
        acting = simulator_acting(self.algo, max_rows, beside_updates)
        with PROGRESS.paused("start-up: capturing the acting pass"):
            acting.prepare()
        self.clock.starts_now()
        return acting

    def extras_of(self, out: Any, obs: np.ndarray, actions: np.ndarray) -> np.ndarray | None:
        """The extra columns (PPO: log-probabilities, values) of ``actions`` other than the ones
        acted for (Atari's forced FIRE): from the forward pass's output ``out`` when it holds
        them, else from another pass over ``obs``."""
        redone = None if out is None else self.algo.extras_of(out, actions)
        return self.algo.extras_for(obs, actions) if redone is None else redone


def simulator_acting(algo: Algorithm, max_rows: int, beside_updates: bool = False) -> Acting | HostActing:
    """``act(observations, env_steps) -> (actions, extras, forward output)``: ``algo`` acting for
    simulators that hold no policy (central inference; the planner's probe times the same). On a
    CUDA learner with ``algo.capture`` other than ``off`` (``compile`` too) the forward pass is
    replayed from CUDA graphs
    (:class:`~drlmpi.device.forward.CapturedForward`), exploration finished on the host; an
    algorithm that acts on the host only acts as it does (no forward output). ``beside_updates``:
    from copies of the acting modules, on a stream of their own, while updates queued by
    ``train(settle=False)`` run (:mod:`drlmpi.device.acting`)."""
    if type(algo).act_tensor is Algorithm.act_tensor:
        return HostActing(algo)
    # a compiled update (algo.capture=compile) still serves from CUDA graphs: an eager pass of a
    # CNN launches its dozens of kernels one by one from Python at every serve
    mode = "off" if algo.capture == "off" else "graph"
    return Acting(algo, max_rows, mode, beside_updates=beside_updates and bool(algo.acting_modules))
