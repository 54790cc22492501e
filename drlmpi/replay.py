"""Experience storage for off-policy learners: a ring buffer of packed experience rows.

Rows use :class:`drlmpi.comm.ExperienceLayout`, so what arrives over MPI is copied into the
buffer with one slice assignment and a sampled minibatch is one fancy-index.
"""

from __future__ import annotations

import numpy as np
import torch

from drlmpi.comm import ExperienceLayout


class ReplayBuffer:
    """Preallocated ring buffer of ``capacity`` experience rows.

    Args:
        layout: the column layout of incoming rows.
        capacity: the number of transitions kept (oldest overwritten first).
        device: where sampled minibatches are placed.
    """

    def __init__(self, layout: ExperienceLayout, capacity: int, device: torch.device | str = "cpu"):
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.layout = layout
        self.capacity = int(capacity)
        self.rows = layout.empty(self.capacity)
        self.device = torch.device(device)
        self.next_index = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, rows: np.ndarray) -> None:
        """Append ``rows`` (shape ``(n, layout.width)``), wrapping around the ring."""
        n = rows.shape[0]
        if n == 0:
            return
        if n >= self.capacity:
            rows = rows[-self.capacity :]
            n = self.capacity
        end = self.next_index + n
        if end <= self.capacity:
            self.rows[self.next_index : end] = rows
        else:
            first = self.capacity - self.next_index
            self.rows[self.next_index :] = rows[:first]
            self.rows[: n - first] = rows[first:]
        self.next_index = end % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """A uniformly sampled minibatch as tensors keyed by column name.

        Shapes: ``obs``/``next_obs`` ``(B, obs_dim)``, ``action`` ``(B, action_dim)``,
        ``reward``/``terminated`` ``(B,)``, extras ``(B, width)``.
        """
        index = rng.integers(0, self.size, size=batch_size)
        rows = torch.from_numpy(self.rows[index]).to(self.device, non_blocking=True)
        out: dict[str, torch.Tensor] = {}
        for name, cols in self.layout.slices.items():
            col = rows[:, cols]
            out[name] = col[:, 0] if col.shape[1] == 1 and name != "action" else col
        return out
