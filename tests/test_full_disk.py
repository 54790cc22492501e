"""A disk that fills while a run writes its files: the write fails with one line naming the file and
the cause, the partial file is removed, and the checkpoint generation published before stays
complete and resumable. In-process with a file that refuses bytes past a limit (ENOSPC), and one
job whose second checkpoint lands on /dev/full."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from drlmpi.config.schema import defaults
from drlmpi.outputs import files
from drlmpi.outputs.checkpoint import (
    Checkpointer,
    CheckpointWriteError,
    check_rank_files,
    checkpoint_dir,
    load_rank_state,
    read_meta,
)
from drlmpi.outputs.files import FileWriteError, atomic_save
from tests.conftest import REPO


class _FillingFile(io.BufferedWriter):
    """A real file on a disk with ``room["free"]`` bytes left: a write past them raises ENOSPC."""

    def __init__(self, path: Path, room: dict[str, int]) -> None:
        super().__init__(io.FileIO(path, "wb"))
        self.room = room

    def write(self, data) -> int:
        if len(data) > self.room["free"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room["free"] -= len(data)
        return super().write(data)


def _disk_with_room(monkeypatch, free: int) -> None:
    """From now on, the writers' files together take at most ``free`` more bytes."""
    room = {"free": free}
    monkeypatch.setattr(files, "open", lambda path, mode: _FillingFile(Path(path), room), raising=False)


def _learner(weights: torch.Tensor) -> SimpleNamespace:
    algo = SimpleNamespace(spec=None, cfg=None, storage_bytes=lambda spec, cfg: 0)
    return SimpleNamespace(algo=algo, env_steps=100, updates=10, clock=SimpleNamespace(elapsed=lambda: 1.0),
                           check_weights=lambda: None,
                           checkpoint_state=lambda with_storage: {"weights": weights.clone()})


def _checkpointer(run_dir: Path) -> Checkpointer:
    return Checkpointer(run_dir, 0, 1, {**defaults("run"), "checkpoint_every_s": 1},
                        {"topology": "sequential"})


def test_a_checkpoint_that_fills_the_disk_keeps_the_last_generation(tmp_path, monkeypatch):
    """Catches: torch.save given the path (its C++ writer ends in `unexpected pos`, no errno, and
    the file is never opened through Python), the partial `.tmp` left behind, a message without
    the file or the kept generation, and the generation counter advanced past a failed write."""
    saver = _checkpointer(tmp_path)
    saver.save(_learner(torch.ones(1000)))
    _disk_with_room(monkeypatch, 1500)  # the next rank file (~4 kB) does not fit
    with pytest.raises(CheckpointWriteError) as info:
        saver.save(_learner(torch.full((1000,), 2.0)))
    path = checkpoint_dir(tmp_path) / "rank0.g2.pt"
    assert str(info.value) == (f"checkpoint: cannot write {path}: No space left on device; the last complete "
                               f"generation 1 is kept: python -m drlmpi resume={tmp_path} continues from it")
    assert sorted(p.name for p in checkpoint_dir(tmp_path).iterdir()) == ["meta.json", "rank0.g1.pt"]
    meta = read_meta(tmp_path)
    assert meta["generation"] == saver.generation == 1 and check_rank_files(tmp_path, meta) is None
    assert torch.equal(load_rank_state(tmp_path, 0, meta)["weights"], torch.ones(1000))


def test_a_full_disk_at_meta_json_removes_the_unpublished_generation(tmp_path, monkeypatch):
    """Catches: the new generation's rank file left beside a meta.json that still names the old
    one, or the old generation deleted although the new one was never published."""
    saver = _checkpointer(tmp_path)
    saver.save(_learner(torch.ones(10)))
    _disk_with_room(monkeypatch, 1700)  # the rank file (1.6 kB) fits, meta.json (0.25 kB) then does not
    with pytest.raises(CheckpointWriteError, match=r"meta\.json: No space left on device; the last complete "
                                                   r"generation 1 is kept"):
        saver.save(_learner(torch.zeros(10)))
    assert sorted(p.name for p in checkpoint_dir(tmp_path).iterdir()) == ["meta.json", "rank0.g1.pt"]
    assert read_meta(tmp_path)["generation"] == 1


def test_the_first_checkpoint_failing_says_none_is_complete(tmp_path, monkeypatch):
    _disk_with_room(monkeypatch, 100)
    with pytest.raises(CheckpointWriteError, match="no checkpoint generation was complete yet$"):
        _checkpointer(tmp_path).save(_learner(torch.ones(10)))
    assert list(checkpoint_dir(tmp_path).iterdir()) == []


def test_an_object_that_cannot_be_saved_is_a_bug_not_a_full_disk(tmp_path):
    """Catches: every RuntimeError or exception of torch.save told as a write failure (a bug
    must keep its traceback); the temporary file must go all the same."""
    with pytest.raises(Exception) as info:  # noqa: PT011 (pickle's own error, whichever it is)
        atomic_save({"f": lambda: 0}, tmp_path / "policy.pt")
    assert not isinstance(info.value, FileWriteError)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_run_whose_disk_fills_at_a_checkpoint_ends_in_one_line_and_resumes(tmp_path):
    """A job whose second checkpoint goes to /dev/full (its temporary name is a link there): one
    line naming the file, no traceback, generation 1 kept and accepted by resume=. Catches a job
    that ends in torch's two `unexpected pos` tracebacks. A subprocess (~4 s, most of it start-up)
    is what shows the job's own output and exit code; one rank, as the learner alone writes."""
    from drlmpi.run.arguments import resume_arguments
    from drlmpi.run.preflight import make_plan
    from tests.pool_worker import compose

    run_dir = tmp_path / "run"
    checkpoint_dir(run_dir).mkdir(parents=True)
    (checkpoint_dir(run_dir) / "rank0.g2.pt.tmp").symlink_to("/dev/full")
    overrides = ["run.checkpoint_every_s=0.05", "run.max_env_steps=100000", "algo.hidden=[16]",
                 "run.tensorboard=false", "run.eval_every=1000000", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run([sys.executable, "-m", "drlmpi", *overrides], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    path = checkpoint_dir(run_dir) / "rank0.g2.pt"
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("failed") == 1, proc.stderr
    assert (f"drlmpi: rank 0 failed: checkpoint: cannot write {path}: No space left on device; the last "
            f"complete generation 1 is kept: python -m drlmpi resume={run_dir} continues from it"
            ) in proc.stderr
    assert sorted(p.name for p in checkpoint_dir(run_dir).iterdir()) == ["meta.json", "rank0.g1.pt"]
    assert json.loads((checkpoint_dir(run_dir) / "meta.json").read_text())["generation"] == 1
    argv, ranks = resume_arguments([f"resume={run_dir}"])
    plan = make_plan(compose([a for a in argv if not a.startswith("hydra.")]), ranks)
    assert plan.resume_meta["generation"] == 1 and ranks == 1
