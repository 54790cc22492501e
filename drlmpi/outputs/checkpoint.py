"""Checkpoints of a running job and what ``resume=RUN_DIR`` reads back.

Layout in the run directory::

    checkpoint/meta.json          which generation is complete, and what wrote it
    checkpoint/rank<r>.g<g>.pt    the training state of rank r at generation g

Every rank that holds learning state (the learner; in allgather every peer; in a parameter
server job the server and every worker) writes its file with :func:`atomic_save` (a temporary
file, then ``os.replace``); then rank 0 writes ``meta.json`` (also atomically) naming the
generation, and only then deletes the previous generation's files. A job killed at any moment
therefore leaves one complete generation that ``meta.json`` points to. Collective topologies
(``allgather``, ``parameter_server``) decide to checkpoint on rank 0 and tell the others in the
round's control message; every rank saves at the same point of the same round and they meet in
one small ``Allreduce`` before rank 0 writes ``meta.json``. Single-learner topologies
(``sequential``, ``p2p``, ``star``, ``async``) checkpoint on the learner alone: simulators hold
nothing that must survive (they receive the weights; a resumed simulator starts new episodes
with a fresh seed), and async's credits, pre-posted receives and lag counters restart from
their initial state.

A file holds tensors, numbers, strings, lists and dicts only, and is loaded with
``torch.load(weights_only=True)``: resuming never unpickles code.
"""

from __future__ import annotations

import json
import re
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from drlmpi.config.scopes import RunSettings
from drlmpi.outputs.files import FileWriteError, atomic_save, atomic_write_json

CHECKPOINT_DIR = "checkpoint"
META_FILE = "meta.json"
#: storage (replay, rollouts) above this size is left out of checkpoints (networks, optimizers,
#: counters and random states are always in): a resumed run then refills it.
MAX_STORAGE_BYTES = 2 * 2**30


def checkpoint_dir(run_dir: Path | str) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def rank_file(run_dir: Path | str, rank: int, generation: int) -> Path:
    return checkpoint_dir(run_dir) / f"rank{rank}.g{generation}.pt"


def file_generation(path: Path) -> int | None:
    """The generation in a rank file's name (``rank3.g12.pt`` -> 12; ``None``: not a rank file)."""
    match = re.fullmatch(r"rank\d+\.g(\d+)\.pt", path.name)
    return int(match.group(1)) if match else None


def remove_older_generations(run_dir: Path | str, generation: int) -> None:
    """Delete every rank file older than ``generation`` - the previous one, and any a job killed
    between publishing ``meta.json`` and this deletion left behind."""
    for path in checkpoint_dir(run_dir).glob("rank*.g*.pt"):
        found = file_generation(path)
        if found is not None and found < generation:
            path.unlink(missing_ok=True)


def read_meta(run_dir: Path | str) -> dict[str, Any] | None:
    """The last complete checkpoint's description (``None``: the run has none)."""
    path = checkpoint_dir(run_dir) / META_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


class DamagedFileError(ValueError):
    """A checkpoint or policy file that exists but cannot be read back (truncated, corrupted)."""


class CheckpointWriteError(FileWriteError):
    """A checkpoint file could not be written; the previous generation is intact."""


def load_tensors(path: Path | str) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU; a file that cannot be read raises
    :class:`DamagedFileError` with one line naming it (torch's own advice to unpickle code with
    ``weights_only=False`` is wrong for a damaged file)."""
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 (zip, pickle, EOF and I/O errors alike)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise DamagedFileError(f"{path} cannot be read: it is damaged or incomplete ({first})") from None


def check_rank_files(run_dir: Path | str, meta: dict[str, Any]) -> str | None:
    """Why the generation ``meta`` names cannot be resumed (a rank file missing, or not a
    complete archive: a truncated write), or ``None``. Cheap: opens each file's directory only."""
    for rank in meta["ranks_with_state"]:
        path = rank_file(run_dir, rank, int(meta["generation"]))
        if not path.is_file():
            return f"{path} is missing"
        try:
            with zipfile.ZipFile(path):
                pass
        except (zipfile.BadZipFile, OSError) as exc:
            return f"{path} cannot be read: it is damaged or incomplete ({exc})"
    return None


def load_rank_state(run_dir: Path | str, rank: int, meta: dict[str, Any]) -> dict[str, Any] | None:
    """Rank ``rank``'s state of the generation ``meta`` names (``None``: it saved none)."""
    if rank not in meta["ranks_with_state"]:
        return None
    return load_tensors(rank_file(run_dir, rank, int(meta["generation"])))


class Checkpointer:
    """Decides when checkpoints are due (on rank 0) and writes this rank's part of one.

    Args:
        run_dir: the run directory.
        rank, world_size: this rank and the job's size.
        run: the ``run`` config (``checkpoint_every_s``, ``checkpoint_replay``).
        description: what ``meta.json`` records about the job (topology, algorithm...), checked
            when resuming.
        generation: the generation the run resumed from (0: a fresh run).
    """

    def __init__(self, run_dir: Path, rank: int, world_size: int, run: RunSettings | Mapping[str, Any],
                 description: dict[str, Any], generation: int = 0) -> None:
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.world_size = world_size
        run = RunSettings.coerce(run)
        self.every_s = run.checkpoint_every_s or 0.0  # (0 or null: none)
        self.with_storage = run.checkpoint_replay
        self._with_storage = self.with_storage  # what the last written state held
        self.description = description
        self.generation = generation
        self.last = time.monotonic()
        self.saved = 0
        self.seconds = 0.0

    def due(self) -> bool:
        """Whether a checkpoint is due now (decided on rank 0 only)."""
        return self.every_s > 0 and time.monotonic() - self.last >= self.every_s

    def save(self, learner: Any, comm: Any = None, ranks_with_state: list[int] | None = None,
             metrics_rows: int | None = None) -> None:
        """Write this rank's state for the next generation. ``comm`` (collective checkpoints):
        every rank of ``comm`` calls this at the same point - a rank without learning state with
        ``learner=None`` (the final checkpoint of a signal stop, where simulators meet too) - and
        they meet in one small Allreduce before rank 0 publishes the generation in
        ``meta.json``. A network trained into NaN stops the run instead
        (``learner.check_weights``): the last generation, written while finite, stays the one
        to resume."""
        t0 = time.perf_counter()
        generation = self.generation + 1
        if learner is not None:
            learner.check_weights()
            checkpoint_dir(self.run_dir).mkdir(parents=True, exist_ok=True)
            algo = learner.algo
            fits = algo.storage_bytes(algo.spec, algo.cfg) <= MAX_STORAGE_BYTES
            self._with_storage = self.with_storage and fits
            state = learner.checkpoint_state(self._with_storage)
            self._write(lambda: atomic_save(state, rank_file(self.run_dir, self.rank, generation)))
        if comm is not None:
            from mpi4py import MPI

            done = np.ones(1, dtype=np.int64)
            comm.Allreduce(MPI.IN_PLACE, done, op=MPI.SUM, kind="checkpoint")
        if self.rank == 0:
            meta = {
                "generation": generation,
                "world_size": self.world_size,
                "ranks_with_state": sorted(ranks_with_state or [0]),
                "env_steps": learner.env_steps,
                "updates": learner.updates,
                "train_seconds": learner.clock.elapsed(),
                "metrics_rows": metrics_rows,
                "with_storage": self._with_storage,
                "saved_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                **self.description,
            }
            try:
                self._write(lambda: atomic_write_json(meta, checkpoint_dir(self.run_dir) / META_FILE))
            except CheckpointWriteError:  # the new generation's files would never be read
                for rank in meta["ranks_with_state"]:
                    rank_file(self.run_dir, rank, generation).unlink(missing_ok=True)
                raise
            remove_older_generations(self.run_dir, generation)
        self.generation = generation
        self.last = time.monotonic()
        self.saved += 1
        self.seconds += time.perf_counter() - t0

    def _write(self, write: Any) -> None:
        """Run ``write()``; a refused write becomes :class:`CheckpointWriteError`, whose line
        says which generation is still complete (nothing it names was touched)."""
        try:
            write()
        except FileWriteError as exc:
            kept = (f"the last complete generation {self.generation} is kept: python -m drlmpi "
                    f"resume={self.run_dir} continues from it" if self.generation
                    else "no checkpoint generation was complete yet")
            line = f"checkpoint: cannot write {exc.path}: {exc.reason}; {kept}"
            raise CheckpointWriteError(exc.path, exc.reason, line) from None
