"""A CartPole that stops answering on one rank: used to test that a rank which hangs (without
raising) ends the job through its watchdog (``run.rank_timeout_s``) instead of leaving the
others waiting forever.

Ranks import it through the environment id ``tests.blocking_env:BlockingCartPole-v0``; its
options come as ``+env.kwargs.<name>=...``:

* ``hang_rank`` / ``hang_after``: on that MPI rank, ``step`` number ``hang_after`` of an
  environment never returns (it sleeps, so the watchdog thread keeps running);
* ``slow_rank`` / ``slow_step_s``: every ``step`` on that rank takes ``slow_step_s`` longer
  (slow but alive: progress continues).
"""

from __future__ import annotations

import sys
import time

from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.registration import register


def _rank() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank()


class BlockingCartPole(CartPoleEnv):
    """CartPole-v1 that blocks forever on its ``hang_after``-th step on rank ``hang_rank``."""

    def __init__(self, hang_rank: int = -1, hang_after: int = 100, slow_rank: int = -1,
                 slow_step_s: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        rank = _rank()
        self.hangs = rank == hang_rank
        self.hang_after = hang_after
        self.delay_s = slow_step_s if rank == slow_rank else 0.0
        self.steps_taken = 0

    def step(self, action):
        self.steps_taken += 1
        if self.hangs and self.steps_taken >= self.hang_after:
            print(f"BlockingCartPole: rank {_rank()} stops answering at t={time.time():.3f}",
                  file=sys.stderr, flush=True)
            while True:  # a simulator that stopped answering (the GIL stays free for its watchdog)
                time.sleep(0.05)
        if self.delay_s:
            time.sleep(self.delay_s)
        return super().step(action)


register(id="BlockingCartPole-v0", entry_point=BlockingCartPole, max_episode_steps=500)
