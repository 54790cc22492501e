"""Experience storage for off-policy learners: a ring buffer of packed experience rows.

Rows use :class:`drlmpi.data.layout.ExperienceLayout`. The buffer lives where the learner computes
(``device``): on a GPU the rows arriving from the wire are copied once per chunk (pinned
staging, ``non_blocking``) and minibatches are sampled ON the device, so nothing crosses the bus
per update. Sampling is graph-safe: uniform floats from a torch generator on the device are
scaled by a device scalar holding the current size, so a captured update needs no host integer.
A minibatch is written into preallocated tensors (one gather of whole rows), and
:meth:`ReplayBuffer.sample` returns the same column views every time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from drlmpi.data.layout import ExperienceLayout
from drlmpi.device.compiled import Compiled
from drlmpi.device.staging import Staging

FLOAT_BYTES = 4
# A minibatch's preallocated tensors: uniform draws, indices, gathered rows, column views.
_Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]


def replay_bytes(layout: ExperienceLayout, capacity: int) -> int:
    """Bytes of memory a :class:`ReplayBuffer` of ``capacity`` rows takes when full
    (``layout.row_bytes`` each: image observations as bytes); minibatch buffers are negligible
    next to it."""
    return int(capacity) * layout.width * FLOAT_BYTES


class ReplayBuffer:
    """Preallocated ring buffer of ``capacity`` experience rows on ``device``.

    Args:
        layout: the column layout of incoming rows.
        capacity: the number of transitions kept (oldest overwritten first).
        device: where the rows are stored and minibatches are sampled.
        seed: seeds the sampling generator (a torch generator on ``device``).
    """

    def __init__(self, layout: ExperienceLayout, capacity: int, device: torch.device | str = "cpu",
                 seed: int = 0) -> None:
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.layout = layout
        self.capacity = int(capacity)
        self.device = torch.device(device)
        # Uninitialised: rows are read only once written (sampling stays below ``size``), and on
        # the CPU the pages of a large image replay are then only touched as it fills.
        self.storage = torch.empty((self.capacity, layout.width), dtype=torch.float32, device=self.device)
        self.staging = Staging(layout.width, self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))
        self.next_index = 0
        self.size = 0
        # Device scalars read by (possibly captured) sampling: the valid size and its last index.
        self._size_f = torch.zeros((), dtype=torch.float32, device=self.device)
        self._last = torch.zeros((), dtype=torch.long, device=self.device)
        self._batches: dict[int, _Batch] = {}
        self._gather: Compiled | None = None

    def __len__(self) -> int:
        return self.size

    @property
    def rows(self) -> np.ndarray:
        """The valid rows as numpy (a view on the CPU, a copy from a device)."""
        if self.device.type == "cpu":
            return self.storage[: self.size].numpy()
        return self.storage[: self.size].cpu().numpy()

    def add(self, rows: np.ndarray) -> None:
        """Append ``rows`` (numpy, shape ``(n, layout.width)``), wrapping around the ring: one
        host-to-device copy per contiguous part."""
        n = rows.shape[0]
        if n == 0:
            return
        if n >= self.capacity:
            rows = rows[-self.capacity :]
            n = self.capacity
        end = self.next_index + n
        if end <= self.capacity:
            self._put(self.next_index, rows)
        else:
            first = self.capacity - self.next_index
            self._put(self.next_index, rows[:first])
            self._put(0, rows[first:])
        self.next_index = end % self.capacity
        self.size = min(self.size + n, self.capacity)
        self._size_f.fill_(float(self.size))
        self._last.fill_(self.size - 1)

    def state(self) -> dict[str, object]:
        """The stored rows (on the CPU), the ring position and the sampler's state."""
        return {"rows": self.storage[: self.size].detach().cpu().clone(), "next_index": self.next_index,
                "size": self.size, "generator": self.generator.get_state()}

    def load_state(self, state: dict[str, object]) -> None:
        """Inverse of :meth:`state` (the capacity must hold the saved rows)."""
        rows = state["rows"]
        size = int(state["size"])
        if size > self.capacity:
            raise ValueError(f"a replay of {size} rows does not fit a capacity of {self.capacity}")
        self.storage[:size].copy_(rows)
        self.next_index, self.size = int(state["next_index"]), size
        self._size_f.fill_(float(size))
        self._last.fill_(max(size - 1, 0))
        self.generator.set_state(state["generator"])

    def _put(self, start: int, rows: np.ndarray) -> None:
        if self.device.type == "cpu":
            self.storage.numpy()[start : start + rows.shape[0]] = rows
        else:
            self.staging.copy(self.storage[start : start + rows.shape[0]], rows)

    def _buffers(self, batch_size: int) -> _Batch:
        bufs = self._batches.get(batch_size)
        if bufs is None:
            uniform = torch.empty(batch_size, dtype=torch.float32, device=self.device)
            index = torch.empty(batch_size, dtype=torch.long, device=self.device)
            rows = torch.empty((batch_size, self.layout.width), dtype=torch.float32, device=self.device)
            views: dict[str, torch.Tensor] = {}
            for name, cols in self.layout.slices.items():
                col = rows[:, cols]
                views[name] = col[:, 0] if col.shape[1] == 1 and name != "action" else col
            bufs = self._batches[batch_size] = (uniform, index, rows, views)
        return bufs

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """A uniformly sampled minibatch (with replacement) of the valid rows, keyed by column.

        Shapes: ``obs``/``next_obs`` ``(B, obs_dim)``, ``action`` ``(B, action_dim)``,
        ``reward``/``terminated`` and other single columns ``(B,)``, extras ``(B, width)``.
        The tensors are views of one preallocated ``(B, width)`` buffer that the next call
        overwrites (the same dict and the same tensors every time): copy what must outlive it.
        No host synchronisation and no allocation: safe inside a CUDA graph.
        """
        uniform, index, rows, views = self._buffers(batch_size)
        uniform.uniform_(generator=self.generator)
        if self._gather is not None:
            self._gather(self.storage, uniform, self._size_f, self._last, rows)
            return views
        uniform.mul_(self._size_f)
        index.copy_(uniform)  # truncation: floor of a non-negative float
        torch.minimum(index, self._last, out=index)  # float rounding may reach size: clamp
        torch.index_select(self.storage, 0, index, out=rows)
        return views

    def fuse(self, compiler: Callable[..., Any] = torch.compile) -> None:
        """Sample later minibatches with :func:`gather_rows` compiled: the index arithmetic
        and the gather in one kernel (``algo.capture=fused``)."""
        self._gather = Compiled(gather_rows, "replay sampling", compiler)

    def warm_up(self, batch_size: int) -> dict[str, torch.Tensor]:
        """Compile the fused gather now, into a scratch copy of the minibatch buffer (no draw
        from the sampler); returns the minibatch views :meth:`sample` will return, zeroed (valid
        actions and indices for a warm-up, overwritten by the first sample)."""
        uniform, _, rows, views = self._buffers(batch_size)
        if self._gather is not None:
            self._gather(self.storage, torch.zeros_like(uniform), self._size_f, self._last, rows.clone())
        rows.zero_()
        return views


def gather_rows(storage: torch.Tensor, uniform: torch.Tensor, size: torch.Tensor, last: torch.Tensor,
                out: torch.Tensor) -> None:
    """``out = storage[min(floor(uniform * size), last)]``: the rows that uniform draws in
    ``[0, 1)`` pick among the first ``size`` (``last`` = size - 1, against float rounding)."""
    index = torch.minimum((uniform * size).long(), last)
    out.copy_(storage[index])
