"""DQNs that record how many updates each call of ``run_updates`` asked for: used to check that
the async learner runs a device learner's owed updates in bursts (``AsyncLearner._burst``) and a
CPU learner's one at a time. ``QueuingDQN`` says it queues its updates on an accelerator (as a
CUDA learner does) while computing on the CPU. ``ReplayRecordingDQN`` records how many rows its
replay holds when the run writes ``policy.pt`` (its ``state_dict``), after the last chunk was taken."""

from __future__ import annotations

from drlmpi.algos.dqn import DQN
from drlmpi.algos.exchange import LOCAL

#: the sizes of the learner's ``run_updates`` calls in this process's latest run
CALLS: list[int] = []
#: the rows the learner's replay held at the end of this process's latest run
REPLAY_ROWS: list[int] = []


class RecordingDQN(DQN):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("learner", True):
            CALLS.clear()

    def run_updates(self, n, exchange=LOCAL):
        CALLS.append(int(n))
        return super().run_updates(n, exchange)


class QueuingDQN(RecordingDQN):
    @property
    def queues_updates(self) -> bool:
        return True


class ReplayRecordingDQN(DQN):
    def state_dict(self):
        if self.replay is not None:  # the learner's copy (a simulator's has no replay)
            REPLAY_ROWS[:] = [len(self.replay)]
        return super().state_dict()
