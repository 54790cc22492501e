"""``experiments/provenance.py``: what a study's provenance.json records - the command, the
commit, and the machine down to each GPU's driver, clocks, power limit and MIG mode (read from
nvidia-smi, here a stand-in on PATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=name) echo "NVIDIA H200" ;;
  *) echo "580.95.05, 1980 MHz, 3201 MHz, 700.00 W, Disabled, 5, 143771 MiB" ;;
esac
"""


def test_provenance_names_the_command_commit_and_each_gpus_clocks(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    out = tmp_path / "study"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DRLMPI_COMMIT": "abc1234"}
    cmd = [sys.executable, "experiments/provenance.py", str(out), "--", "bash", "x.sh", "OUT"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((out / "provenance.json").read_text())
    assert record["command"] == "bash x.sh OUT" and record["commit"] == "abc1234"
    machine = record["machine"]
    assert machine["gpus"] == ["NVIDIA H200"]
    assert machine["gpu_details"] == [{
        "driver_version": "580.95.05", "clocks.max.sm": "1980 MHz", "clocks.max.memory": "3201 MHz",
        "power.limit": "700.00 W", "mig.mode.current": "Disabled", "pcie.link.gen.current": "5",
        "memory.total": "143771 MiB"}]
    assert record["versions"]["python"] and "torch" in record["versions"]
