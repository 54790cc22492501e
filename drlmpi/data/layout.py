""":class:`ExperienceLayout`: the column layout of packed experience, one 2-D float32 array per
message known to both ends. uint8 image observations travel and are stored as their bytes,
packed into the float32 slots (copied, never computed on), so NaN, infinity and subnormal bit
patterns survive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True)
class ExperienceLayout:
    """Column layout of packed experience rows (float32, one row per environment step).

    Base columns: ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``, ``truncated``,
    ``stream`` (an id unique to one environment instance in the whole job, so an on-policy
    learner can rebuild per-environment sequences), ``episode_return`` and ``episode_length``
    (non-zero only on the row that ends an episode). Algorithms add their own columns through
    ``extras`` (for example PPO's behaviour ``log_prob``).

    Image observations (``obs_dtype="uint8"``, ``obs_shape`` the image's shape) are stored as
    their bytes: the ``obs`` and ``next_obs`` columns hold ``ceil(pixels / 4)`` float32 slots
    whose bit patterns ARE the uint8 pixels (zero-padded to a whole slot), so an 84x84x4 frame
    stack costs 28,224 bytes per column instead of 112,896 as floats. Rows are only ever
    copied (wire, replay, rollouts: ``np.concatenate``, MPI, ``index_select``, ``torch.cat``),
    never computed on as floats, so every bit survives; :meth:`put_obs` packs,
    :meth:`obs_array` and :meth:`obs_tensor` unpack (uint8, shaped), and image encoders
    (:mod:`drlmpi.algos.encoders`) convert to float on the learner's device.
    """

    obs_dim: int
    action_dim: int
    extras: tuple[tuple[str, int], ...] = ()
    obs_shape: tuple[int, ...] = ()
    obs_dtype: str = "float32"
    slices: dict[str, slice] = field(init=False, compare=False, repr=False)
    width: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.obs_dtype not in ("float32", "uint8"):
            raise ValueError(f"obs_dtype must be float32 or uint8, got {self.obs_dtype!r}")
        if not self.obs_shape:
            object.__setattr__(self, "obs_shape", (int(self.obs_dim),))
        obs_width = self.obs_slots
        widths = [
            ("obs", obs_width),
            ("action", self.action_dim),
            ("reward", 1),
            ("next_obs", obs_width),
            ("terminated", 1),
            ("truncated", 1),
            ("stream", 1),
            ("episode_return", 1),
            ("episode_length", 1),
            *self.extras,
        ]
        slices: dict[str, slice] = {}
        offset = 0
        for name, width in widths:
            if name in slices:
                raise ValueError(f"duplicate experience column {name!r}")
            slices[name] = slice(offset, offset + width)
            offset += width
        object.__setattr__(self, "slices", slices)
        object.__setattr__(self, "width", offset)

    @property
    def packed(self) -> bool:
        """Whether observations are stored as packed uint8 bytes."""
        return self.obs_dtype == "uint8"

    @property
    def obs_slots(self) -> int:
        """float32 slots one observation column takes."""
        return -(-self.obs_dim // 4) if self.packed else self.obs_dim

    @property
    def extras_slice(self) -> slice:
        """The algorithm's extra columns (the last ones of a row) as one slice."""
        return slice(self.width - sum(width for _, width in self.extras), self.width)

    @property
    def row_bytes(self) -> int:
        """Bytes of one packed row (on the wire and in storage)."""
        return 4 * self.width

    def column(self, rows: np.ndarray, name: str) -> np.ndarray:
        """The columns of ``name`` in ``rows`` (shape ``(n, width_of_name)``, a view)."""
        return rows[:, self.slices[name]]

    def empty(self, n: int) -> np.ndarray:
        """A zeroed ``(n, width)`` float32 array."""
        return np.zeros((n, self.width), dtype=np.float32)

    def put_obs(self, rows: np.ndarray, name: str, obs: np.ndarray) -> None:
        """Write observations ``(n, *obs_shape)`` into column ``name`` (``obs``/``next_obs``) of
        ``rows`` ``(n, width)``: as floats, or as their bytes for images."""
        cols = rows[:, self.slices[name]]
        flat = np.asarray(obs).reshape(rows.shape[0], -1)
        if self.packed:
            cols.view(np.uint8)[:, : self.obs_dim] = flat
        else:
            cols[:] = flat

    def obs_array(self, rows: np.ndarray, name: str = "obs") -> np.ndarray:
        """Column ``name``'s observations ``(n, *obs_shape)``: float32, or uint8 images (a
        view where the layout allows it)."""
        cols = rows[:, self.slices[name]]
        if self.packed:
            cols = cols.view(np.uint8)[:, : self.obs_dim]
        return cols.reshape(rows.shape[0], *self.obs_shape)

    def obs_tensor(self, rows: torch.Tensor, name: str = "obs") -> torch.Tensor:
        """:meth:`obs_array` for a tensor of rows, on its device (no host synchronisation)."""
        return unpack_obs(rows[:, self.slices[name]], self)


def unpack_obs(cols: torch.Tensor, layout: ExperienceLayout) -> torch.Tensor:
    """Observation columns (``(n, obs_slots)`` float32 as stored) as ``(n, *obs_shape)``:
    unchanged for float observations, the uint8 pixels (a view of the same memory as far as
    strides allow) for images. Already unpacked uint8 input is only reshaped."""
    n = cols.shape[0]
    if layout.packed and cols.dtype != torch.uint8:
        cols = cols.view(torch.uint8)[:, : layout.obs_dim]
    return cols.reshape(n, *layout.obs_shape)
