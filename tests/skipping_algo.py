"""A DQN whose update number 3 skips its gradient exchange (as an early stop on KL would) - used
to check that data-parallel topologies stop with a clear error instead of hanging."""

from __future__ import annotations

import torch

from drlmpi.algos.dqn import DQN

SKIPPED_UPDATE = 3


class SkippingDQN(DQN):
    def learn(self, batch, exchange, synced):
        if int(self.update_number) == SKIPPED_UPDATE:  # "nothing to learn": no backward, no exchange
            return torch.zeros(len(self.metric_names))
        return super().learn(batch, exchange, synced)
