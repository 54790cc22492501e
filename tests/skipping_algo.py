"""A DQN whose update number 3 skips its gradient sync (as an early stop on KL would) - used
to check that data-parallel topologies stop with a clear error instead of hanging."""

from __future__ import annotations

from drlmpi.algos.dqn import DQN
from drlmpi.algos.sync import local_sync

SKIPPED_UPDATE = 3


class SkippingDQN(DQN):
    def update_on(self, batch, sync=local_sync):
        if self.updates == SKIPPED_UPDATE:
            self.updates += 1  # "nothing to learn here": no backward, no sync
            return {}
        return super().update_on(batch, sync)
