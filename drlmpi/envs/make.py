"""Environments: ``gymnasium.make`` plus the wrappers every run uses.

* :class:`SimCost` burns real CPU time per step (a busy loop, not a sleep), so the
  simulator-bound regime of the DQN paper (its expensive Box Slider simulator) can be reproduced
  with cheap classic-control environments: ``env.sim_cost_ms=2``.
* :func:`make_env` builds one environment as a run configures it (ALE ids through
  :mod:`drlmpi.envs.atari_bank`); :func:`probe_spec` reads its spaces (:class:`~drlmpi.envs.spec.EnvSpec`).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import gymnasium as gym

from drlmpi.envs.spec import EnvSpec, env_spec


class SimCost(gym.Wrapper):
    """Adds ``cost_ms`` milliseconds of CPU-bound busy work to every ``step``.

    The loop runs until this thread has consumed ``cost_ms`` of *CPU* time (``thread_time``),
    not wall time: like a real physics simulator, a step costs a fixed amount of computation, so
    ranks oversubscribing a machine really compete for cores and each step takes longer in wall
    time when they do. A ``time.sleep`` would let ranks overlap for free.
    """

    def __init__(self, env: gym.Env, cost_ms: float) -> None:
        super().__init__(env)
        self.cost_s = cost_ms / 1000.0

    def step(self, action: Any):
        burn_cpu(self.cost_s)
        return self.env.step(action)


def burn_cpu(seconds: float) -> None:
    """Busy work until this thread has used ``seconds`` of CPU time (:class:`SimCost`)."""
    deadline = time.thread_time() + seconds
    x = 1.0
    while time.thread_time() < deadline:
        for _ in range(200):
            x = x * 1.0000001 + 1e-9


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` names an Arcade Learning Environment game (``ALE/<Game>-v5``)."""
    return str(env_id).startswith("ALE/")


def is_mujoco(env_id: str) -> bool:
    """Whether ``env_id`` is one of Gymnasium's MuJoCo environments (``HalfCheetah-v5``...)."""
    try:
        entry = gym.spec(str(env_id)).entry_point
    except gym.error.Error:
        return False
    return isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco")


def route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings (Gymnasium's v5 models use attributes MuJoCo 4 deprecates) through
    Python's ``warnings``, shown once per message, instead of MuJoCo's default: a line on stdout
    AND a ``MUJOCO_LOG.TXT`` appended in the working directory of every rank."""
    import mujoco

    mujoco.set_mju_user_warning(lambda message: warnings.warn(f"MuJoCo: {message}", stacklevel=2))


def make_env(env_id: str, sim_cost_ms: float = 0.0, max_episode_steps: int | None = None,
             atari: Any = None, train: bool = True, num_threads: int = 1, **kwargs: Any) -> gym.Env:
    """Create one environment with the project's wrappers.

    Args:
        env_id: any registered Gymnasium id (``CartPole-v1``, ``LunarLander-v3``, ...), or an
            ALE id (``ALE/Tetris-v5``: :func:`drlmpi.envs.atari_bank.make_atari`, one
            ``AtariVectorEnv`` environment with its preprocessing).
        sim_cost_ms: CPU milliseconds of busy work added per step (0 = none).
        max_episode_steps: override of the registered time limit (``None`` keeps it).
        atari: the ``env.atari`` preprocessing options of an ALE id (``None``: defaults).
        train: ``False`` for evaluation environments (Atari: whole games, raw rewards).
        num_threads: ALE ids: the threads of the vector env a simulator's environments join
            (:class:`~drlmpi.envs.vector.SerialEnvs`); others ignore it.
        kwargs: passed to ``gymnasium.make`` (ALE ids: to ``AtariVectorEnv``).
    """
    if is_atari(env_id):
        from drlmpi.envs.atari_bank import make_atari

        # The cost goes into the settings (the bank burns it), so the environment can still join
        # its simulator's vector env.
        return make_atari(env_id, atari, train=train, max_episode_steps=max_episode_steps,
                          sim_cost_ms=sim_cost_ms, num_threads=num_threads, **kwargs)
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = int(max_episode_steps)
    if is_mujoco(env_id):
        route_mujoco_warnings()
    env = gym.make(env_id, **kwargs)
    if sim_cost_ms and sim_cost_ms > 0:
        env = SimCost(env, sim_cost_ms)
    return env


def env_make_kwargs(env_cfg: Any) -> dict[str, Any]:
    """:func:`make_env`'s keyword arguments from an ``env`` config section (plain values, so
    they pickle into worker processes): the time limit, the Atari options and thread count of
    an ALE id and ``env.kwargs``."""
    def plain(value: Any) -> Any:
        try:
            from omegaconf import OmegaConf

            return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except ImportError:  # pragma: no cover
            return value

    out: dict[str, Any] = {"max_episode_steps": env_cfg.get("max_episode_steps")}
    if is_atari(env_cfg.get("id", "")):
        out["atari"] = plain(env_cfg.get("atari"))
        out["num_threads"] = int(env_cfg.get("num_threads") or 1)
    out.update(plain(env_cfg.get("kwargs")) or {})
    return out


def probe_spec(env_id: str, **kwargs: Any) -> EnvSpec:
    """Make ``env_id`` once, read its spec, close it (used by start-up validation)."""
    env = make_env(env_id, **kwargs)
    try:
        return env_spec(env)
    finally:
        env.close()
