"""ALE games stepped by ale-py's ``AtariVectorEnv``: a simulator's bank (:class:`AleBank`) and the
one-environment ``gymnasium.Env`` over the same bank (:class:`AleEnv`) that evaluation, start-up
probing and ``play`` use, so that training and evaluation share one emulator pipeline.

The vector env runs with ``autoreset_mode=SameStep``, its own episodic life, life-loss flags and
reward clipping off (:mod:`drlmpi.envs.atari` says why); the bank adds, per environment:

* the game's raw return and agent-step length, reported on the step that ends the game
  (``BankStep.raw``; the adapter's ``info[RAW_EPISODE_KEY]``);
* a lost life (``info["lives"]`` dropping while the game goes on) ends the training episode
  (``terminated``), when ``life_ends``;
* the sign of the reward for training, when ``clip_rewards``;
* FIRE as the environment's next action after a lost life, in games whose action set has FIRE
  (``BankStep.forced`` names the action actually sent, so the experience row records it).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

from drlmpi.envs.atari import SEED_RANGE, AleSettings, ale_settings
from drlmpi.envs.sim_cost import burn_cpu
from drlmpi.envs.spec import RAW_EPISODE_KEY, BankStep
from drlmpi.job_control.progress import PROGRESS


class AleBank:
    """``n`` environments of one ALE game in one ``AtariVectorEnv``, stepped by ``num_threads``
    C++ threads (the simulator's bank for an ALE id; same interface as
    :class:`~drlmpi.envs.vector.SerialEnvs`)."""

    mode = "ale"

    def __init__(self, settings: AleSettings, n: int, dtype: Any = np.uint8, num_threads: int = 1) -> None:
        from ale_py.vector_env import AtariVectorEnv

        self.settings = settings
        self.n = int(n)
        self.dtype = dtype
        self.num_threads = max(1, min(int(num_threads), self.n))
        # An explicit thread count: the vector env's default (0) takes every core of the host,
        # whatever the other ranks on it use.
        self.vec = AtariVectorEnv(settings.game, self.n, num_threads=self.num_threads, batch_size=0,
                                  autoreset_mode="SameStep", **settings.arguments)
        if len(self.vec.ale.get_action_set()) != settings.n_actions:
            raise RuntimeError(f"{settings.env_id}: the vector env has {len(self.vec.ale.get_action_set())} "
                               f"actions, the settings {settings.n_actions}")
        self.game_return = np.zeros(self.n)
        self.game_length = np.zeros(self.n, dtype=np.int64)
        self.lives = np.zeros(self.n, dtype=np.int64)
        self.fire_next = np.zeros(self.n, dtype=bool)
        self._work_s = settings.sim_cost_ms * self.n / 1000.0

    def reset(self, seed: int | None) -> np.ndarray:
        """Start new games everywhere; environment ``i`` gets seed ``seed + i`` (kept in the vector
        env's range), ``None``: the generators go on unseeded."""
        seeds = None if seed is None else (int(seed) + np.arange(self.n, dtype=np.int64)) % SEED_RANGE
        obs, info = self.vec.reset(seed=seeds)
        self.lives[:] = info["lives"]
        self.game_return[:] = 0.0
        self.game_length[:] = 0
        self.fire_next[:] = False
        return self._obs(obs)

    def step(self, actions: Any) -> BankStep:
        """One agent step of every environment (see the module docstring for what is added)."""
        sent = self._checked(actions)
        forced: dict[int, int] = {}
        if self.fire_next.any():
            fire = self.settings.fire_action
            sent[self.fire_next] = fire
            forced = {int(i): fire for i in np.nonzero(self.fire_next)[0]}
        PROGRESS.begin("env.step of %d ALE environments in %d thread(s)", self.n, self.num_threads)
        nxt, reward, terminated, truncated, info = self.vec.step(sent)
        if self._work_s > 0:
            burn_cpu(self._work_s)
        PROGRESS.done()
        raw_reward = np.asarray(reward, dtype=np.float64)
        game_over = np.asarray(terminated | truncated, dtype=bool)
        # On a game-over row info describes the next game already (SameStep): no life lost there.
        life_lost = ~game_over & (info["lives"] < self.lives)
        self.lives[:] = info["lives"]
        self.game_return += raw_reward
        self.game_length += 1
        nxt = self._obs(nxt)
        obs = nxt
        raw: dict[int, tuple[float, int]] = {}
        if game_over.any():
            # final_obs holds stale bytes where no game ended: only the ended rows are read.
            ended = np.nonzero(game_over)[0]
            obs = nxt.copy()
            obs[ended] = self._obs(info["final_obs"][ended])
            for i in ended:
                raw[int(i)] = (float(self.game_return[i]), int(self.game_length[i]))
            self.game_return[ended] = 0.0
            self.game_length[ended] = 0
        if self.settings.fire_action is not None:
            self.fire_next = life_lost
        ends = (terminated | life_lost) if self.settings.life_ends else terminated
        return BankStep(obs=obs, reward=np.sign(raw_reward) if self.settings.clip_rewards else raw_reward,
                        terminated=ends.astype(bool), truncated=truncated.astype(bool), next_obs=nxt,
                        raw=raw, forced=forced)

    def close(self) -> None:
        """Stop the emulators: the vector env's threads end only when the object is gone, which
        its ``close()`` alone does not do."""
        if self.vec is not None:
            self.vec.close()
            self.vec = None

    def _checked(self, actions: Any) -> np.ndarray:
        """``actions`` as the int64 array the vector env takes; an action outside the game's set
        raises here, because the vector env would wait for it forever."""
        a = np.asarray(actions)
        n_actions = self.settings.n_actions
        if a.shape != (self.n,):
            raise ValueError(f"{self.settings.env_id}: expected {self.n} actions, got shape {a.shape}")
        if a.dtype.kind not in "iub" and not (a.dtype.kind == "f" and np.array_equal(a, np.round(a))):
            raise ValueError(f"{self.settings.env_id}: actions must be integers, got {a.tolist()}")
        bad = np.nonzero((a < 0) | (a >= n_actions))[0]
        if len(bad):
            raise ValueError(f"{self.settings.env_id}: action {a[bad[0]]} of environment {bad[0]} is not "
                             f"one of the game's {n_actions} actions (0..{n_actions - 1})")
        return a.astype(np.int64)

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        """``(n, k, H, W)`` grayscale as is; RGB ``(n, k, H, W, 3)`` re-laid channels first,
        ``(n, 3k, H, W)``: each frame's three channels in turn, oldest frame first."""
        if obs.ndim == 5:
            n, k, h, w, c = obs.shape
            obs = obs.transpose(0, 1, 4, 2, 3).reshape(n, k * c, h, w)
        return np.ascontiguousarray(obs, dtype=self.dtype)


class AleEnv(gym.Env):
    """One ALE environment as a ``gymnasium.Env``: a bank of one (one thread), made on the first
    reset, so building one only to read its spaces (or to join a simulator's bank) starts no
    emulator.

    ``reset()`` without a seed after an episode ended continues from where the bank stands: the
    next game (already started by the vector env) or, after a lost life in training, the same
    game. ``info`` has ``lives`` and, on the step that ends a game, ``RAW_EPISODE_KEY``.
    """

    metadata = {"render_modes": []}
    #: the environment reports whole games (:data:`~drlmpi.envs.spec.RAW_EPISODE_KEY`)
    reports_raw_episodes = True

    def __init__(self, settings: AleSettings) -> None:
        self.settings = settings
        self.spec = EnvSpec(settings.env_id)
        self.observation_space = gym.spaces.Box(0, 255, settings.obs_shape, np.uint8)
        self.action_space = gym.spaces.Discrete(settings.n_actions)
        self.bank: AleBank | None = None
        self._next: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.bank is None:
            self.bank = AleBank(self.settings, 1)
        elif seed is None and self._next is not None:
            obs, self._next = self._next, None
            return obs, self._info()
        self._next = None
        return self.bank.reset(seed)[0], self._info()

    def step(self, action: Any):
        if self.bank is None:
            raise RuntimeError(f"{self.settings.env_id}: reset() before step()")
        out = self.bank.step([action])
        terminated, truncated = bool(out.terminated[0]), bool(out.truncated[0])
        self._next = out.next_obs[0] if terminated or truncated else None
        info = self._info()
        if 0 in out.raw:
            info[RAW_EPISODE_KEY] = out.raw[0]
        return out.obs[0], float(out.reward[0]), terminated, truncated, info

    def close(self) -> None:
        if self.bank is not None:
            self.bank.close()
            self.bank = None

    def _info(self) -> dict[str, Any]:
        return {"lives": int(self.bank.lives[0])}


def make_atari(env_id: str, options: Any = None, *, train: bool = True,
               max_episode_steps: int | None = None, **kwargs: Any) -> AleEnv:
    """One environment of ``env_id`` (any ALE id) with the ``env.atari`` ``options`` (see
    :func:`drlmpi.envs.atari.ale_settings` for the arguments)."""
    return AleEnv(ale_settings(env_id, options, train=train, max_episode_steps=max_episode_steps,
                               **kwargs))


def joined_bank(envs: list[gym.Env], dtype: Any) -> AleBank | None:
    """One :class:`AleBank` for a simulator's ALE environments (every one an unstarted
    :class:`AleEnv` of equal settings), stepped by their ``num_threads``; ``None`` when ``envs``
    are not ALE environments."""
    if not envs or not all(isinstance(env, AleEnv) for env in envs):
        return None
    settings = envs[0].settings
    if any(env.settings != settings or env.bank is not None for env in envs):
        raise ValueError(f"{settings.env_id}: a simulator's ALE environments must be unstarted and "
                         "made with the same options to share one vector env")
    return AleBank(settings, len(envs), dtype, settings.num_threads)
