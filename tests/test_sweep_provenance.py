"""``provenance.json`` (drlmpi/sweep/provenance.py), which the sweep launcher writes into every sweep
directory: the command, the commit, and the machine down to each GPU's driver, clocks, power limit
and MIG mode (read from nvidia-smi, here a stand-in on PATH), and none of it where there is no
nvidia-smi or it fails. The sweep itself writing one: tests/test_sweep.py."""

from __future__ import annotations

import json

from drlmpi.sweep import provenance

FAKE_SMI = """#!/bin/sh
echo "NVIDIA H200, 580.95.05, 1980 MHz, 3201 MHz, 700.00 W, Disabled, 5, 143771 MiB"
"""
BROKEN_SMI = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
"""


def _path_with(tmp_path, script: str | None) -> str:
    """A PATH whose first folder holds ``script`` as nvidia-smi (none: no nvidia-smi at all)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    if script is not None:
        smi = folder / "nvidia-smi"
        smi.write_text(script)
        smi.chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


def test_a_record_names_the_command_commit_and_each_gpus_clocks(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _path_with(tmp_path, FAKE_SMI))
    monkeypatch.setenv("DRLMPI_COMMIT", "abc1234")
    path = provenance.write(tmp_path / "sweep", ["python", "-m", "drlmpi", "-m", "seed=0,1"], ["mpirun"])
    record = json.loads(path.read_text())
    assert record["command"] == "python -m drlmpi -m seed=0,1" and record["commit"] == "abc1234"
    assert record["launcher"] == ["mpirun"]
    machine = record["machine"]
    assert machine["gpus"] == ["NVIDIA H200"]
    assert machine["gpu_details"] == [{
        "driver_version": "580.95.05", "clocks.max.sm": "1980 MHz", "clocks.max.memory": "3201 MHz",
        "power.limit": "700.00 W", "mig.mode.current": "Disabled", "pcie.link.gen.current": "5",
        "memory.total": "143771 MiB"}]
    assert record["versions"]["python"] and record["versions"]["torch"]
    # the same folder again (a sweep continued): the newest record on top, the first kept
    monkeypatch.setenv("DRLMPI_COMMIT", "def5678")
    provenance.write(tmp_path / "sweep", ["python", "-m", "drlmpi", "-m", "seed=0,1,2"])
    again = json.loads(path.read_text())
    assert again["commit"] == "def5678" and [r["commit"] for r in again["earlier"]] == ["abc1234"]


def test_no_gpu_no_nvidia_smi_and_a_failing_one_give_no_gpus(tmp_path, monkeypatch):
    monkeypatch.delenv("DRLMPI_COMMIT", raising=False)
    for script in (None, BROKEN_SMI):
        monkeypatch.setenv("PATH", _path_with(tmp_path, script))
        record = provenance.record(["python", "-m", "drlmpi", "-m"])
        assert record["machine"]["gpus"] == [] and record["machine"]["gpu_details"] == []
        assert record["commit"]  # git's short commit here, "unknown" outside a checkout
