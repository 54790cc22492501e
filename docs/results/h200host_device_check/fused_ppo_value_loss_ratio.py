"""Per update: eager and fused PPO (IMPALA, bfloat16) value losses and their relative difference
(the two learners of tests/test_capture.py::test_ppo_fused_learns_what_eager_learns[impala])."""
import os

import torch

from drlmpi.algos.ppo import PPO
from drlmpi.bench.learner import ATARI_SPEC
from tests.test_capture import cfg_for, ppo_pair
from tests.test_device_learner import random_rows

os.environ["DRLMPI_CUDNN_BENCHMARK"] = "0"
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
cfg = cfg_for("ppo", rollout_steps=96, batch_size=32, epochs=1, hidden=[64], activation="relu",
              encoder="impala", autocast="bfloat16", channels_last=True, lr_schedule="linear")
rows = random_rows(PPO(ATARI_SPEC, cfg, device="cpu", seed=0, learner=False), cfg.rollout_steps)
rows[:, PPO.experience_layout(ATARI_SPEC).slices["log_prob"]] = -1.4
eager, fused, m_eager, m_fused = ppo_pair(ATARI_SPEC, cfg, rows, schedule=True, mode="fused")
cells = []
for a, b in zip(m_eager, m_fused):
    diff = abs(a["value_loss"] - b["value_loss"]) / abs(b["value_loss"])
    cells.append(f"{a['value_loss']:.3f}/{b['value_loss']:.3f}/{diff:.3f}")
print("value_loss eager/fused rel diff:", " ".join(cells))
