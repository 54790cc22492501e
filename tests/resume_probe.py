"""What a resumed learner holds when it starts learning again, against what its checkpoint saved.

:class:`ResumeProbeDQN` is a DQN (selected with ``algo._target_=tests.resume_probe.ResumeProbeDQN``)
whose learner, at the start of its first ``run_updates`` call, writes a digest of its state to
``<probe dir>/digest-rank<r>.json``: a SHA-256 of every network tensor (online and target), of every
optimizer tensor (Adam's moments and step) and of every random state (numpy's, torch's CPU
generator, the replay sampler's generator), plus the update counter, the optimizer's
hyperparameters and whether the sampler was seeded. The probe directory is
:data:`PROBE_DIR` (set by :func:`resume`, a pool job) or the environment's ``RESUME_PROBE_DIR``
(a run started as a subprocess); without either, nothing is written (the killed first part).

:func:`saved_digest` computes the same digest from a checkpoint rank file's contents, so a test
compares the two key by key.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from drlmpi.algos.dqn import DQN
from drlmpi.algos.exchange import LOCAL

#: where the resumed learners of this process write their digests (see the module docstring)
PROBE_DIR: Path | None = None
ENV_VAR = "RESUME_PROBE_DIR"


def tensor_hash(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and bytes (on the CPU)."""
    t = t.detach().cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _plain(value: Any) -> Any:
    """A hyperparameter as JSON compares it (a one-element tensor as its float, tuples as lists)."""
    if isinstance(value, torch.Tensor):
        return float(value.item())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def optimizer_digest(name: str, state: Mapping[str, Any]) -> dict[str, Any]:
    """Digest of one ``torch.optim`` state dict: a hash per tensor of each parameter's state
    (``exp_avg``, ``exp_avg_sq``, ``step``), its param groups' values."""
    out: dict[str, Any] = {}
    for index, per_param in state["state"].items():
        for key, value in per_param.items():
            out[f"optimizer.{name}.{index}.{key}"] = (tensor_hash(value) if isinstance(value, torch.Tensor)
                                                      else _plain(value))
    for i, group in enumerate(state["param_groups"]):
        out[f"optimizer.{name}.group{i}"] = {k: _plain(v) for k, v in sorted(group.items())}
    return out


def digest(networks: Mapping[str, torch.Tensor], optimizers: Mapping[str, Mapping[str, Any]],
           updates: int, numpy_state: Mapping[str, Any], torch_state: torch.Tensor,
           sampler_state: torch.Tensor | None, sampler_seeded: bool | None) -> dict[str, Any]:
    """The digest both sides compute (keys name what they hash)."""
    out: dict[str, Any] = {f"network.{k}": tensor_hash(v) for k, v in networks.items()}
    for name, state in optimizers.items():
        out.update(optimizer_digest(name, state))
    out["updates"] = int(updates)
    numpy_text = json.dumps(numpy_state, sort_keys=True, default=str)
    out["rng.numpy"] = hashlib.sha256(numpy_text.encode()).hexdigest()
    out["rng.torch"] = tensor_hash(torch_state)
    if sampler_state is not None:
        out["rng.replay_sampler"] = tensor_hash(sampler_state)
        out["replay_sampler_seeded"] = bool(sampler_seeded)
    return out


def saved_digest(rank_state: Mapping[str, Any]) -> dict[str, Any]:
    """The digest of a checkpoint rank file's contents (``torch.load`` of ``rank<r>.g<g>.pt``)."""
    algo = rank_state["algo"]
    storage = algo.get("storage")
    return digest(algo["networks"], algo["optimizers"], algo["updates"], algo["rng"]["numpy"],
                  algo["rng"]["torch"], None if storage is None else storage["replay"]["generator"],
                  None if storage is None else storage["sampler_seeded"])


def live_digest(algo: Any) -> dict[str, Any]:
    """The digest of a running learner, read from its modules, optimizers and generators."""
    networks = {f"{name}.{k}": v for name, group in algo.groups.items()
                for k, v in group.module.state_dict().items()}
    networks.update({f"q_target.{k}": v for k, v in algo.q_target.state_dict().items()})
    optimizers = {name: group.optimizer.state_dict() for name, group in algo.groups.items()
                  if group.optimizer is not None}
    return digest(networks, optimizers, algo.updates, algo.rng.bit_generator.state, torch.get_rng_state(),
                  algo.replay.generator.get_state(), algo._sampler_seeded)


def probe_dir() -> Path | None:
    if PROBE_DIR is not None:
        return PROBE_DIR
    found = os.environ.get(ENV_VAR)
    return Path(found) if found else None


class ResumeProbeDQN(DQN):
    """See the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probed = not kwargs.get("learner", True)  # acting copies never probe

    def run_updates(self, n, exchange=LOCAL):
        if not self._probed:
            self._probed = True
            out = probe_dir()
            if out is not None:
                from mpi4py import MPI

                out.mkdir(parents=True, exist_ok=True)
                rank = MPI.COMM_WORLD.Get_rank()
                (out / f"digest-rank{rank}.json").write_text(json.dumps(live_digest(self), sort_keys=True))
        return super().run_updates(n, exchange)


def resume(comm: Any, run_dir: str, probe: str, extra: list[str] | None = None) -> str:
    """A pool job: :func:`tests.pool_worker.resume` with this process's learners writing their
    digests to ``probe``."""
    global PROBE_DIR
    from tests.pool_worker import resume as pool_resume

    PROBE_DIR = Path(probe)
    try:
        return pool_resume(comm, run_dir, extra)
    finally:
        PROBE_DIR = None


def read_digests(probe: Path | str) -> dict[int, dict[str, Any]]:
    """The digests in ``probe``, by rank."""
    return {int(p.stem.removeprefix("digest-rank")): json.loads(p.read_text())
            for p in Path(probe).glob("digest-rank*.json")}


def differences(saved: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ (or that one side lacks), sorted."""
    missing = object()
    return sorted(k for k in set(saved) | set(live) if saved.get(k, missing) != live.get(k, missing))


#: the ranks whose checkpoint holds state, by topology (the rest: rank 0 alone)
STATE_HOLDERS = {"allgather": "all", "parameter_server": "all", "groups": [0, 2]}


def holders(topology: str, ranks: int) -> list[int]:
    """The ranks a checkpoint of ``topology`` on ``ranks`` ranks holds state for."""
    found = STATE_HOLDERS.get(topology, [0])
    return list(range(ranks)) if found == "all" else list(found)


def saved_digests(run_dir: Path, meta: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """The digest of each state-holding rank's file of the published generation (read it before
    resuming: the resumed part's own checkpoints delete that generation)."""
    from drlmpi.outputs.checkpoint import load_tensors, rank_file

    generation = meta["generation"]
    return {r: saved_digest(load_tensors(rank_file(run_dir, r, generation)))
            for r in meta["ranks_with_state"]}


def assert_restored(saved: Mapping[int, Mapping[str, Any]], probe: Path, generation: int,
                    advanced: tuple[str, ...] = ()) -> None:
    """Every rank that saved state holds exactly that state when its first new update starts:
    its networks (online and target), its optimizer (the learner's) and its random states - but
    the ``advanced`` keys, which the rank legitimately draws from before that update."""
    live = read_digests(probe)
    assert sorted(live) == sorted(saved), f"digests from ranks {sorted(live)}, state saved by {sorted(saved)}"
    for r in saved:
        kinds = {k.split(".")[0] + "." + k.split(".")[-1] for k in saved[r]}
        assert {"network.weight", "rng.numpy", "rng.torch", "rng.replay_sampler"} <= kinds, kinds
        assert any(k.startswith("network.q_target.") for k in saved[r])
        if r == 0:  # the learner (a parameter server's workers step no optimizer of their own)
            assert {"optimizer.exp_avg", "optimizer.exp_avg_sq", "optimizer.step"} <= kinds, kinds
        wrong = [k for k in differences(saved[r], live[r]) if k not in advanced]
        assert not wrong, f"rank {r} resumed from generation {generation} with other {wrong}"
