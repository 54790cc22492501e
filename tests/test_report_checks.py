"""The report's health checks (drlmpi/report/checks.py, ``python -m drlmpi.report --check``):
synthetic runs that pass and fail each check, and a real async run that sampled its memory."""

from __future__ import annotations

import json
import time

import pytest

from drlmpi.report import build_report
from drlmpi.report.__main__ import main
from drlmpi.report.checks import memory_growth
from drlmpi.run.memory import MemorySampler
from tests.shared_runs import TINY_DQN, declare
from tests.test_report import make_run

SAMPLED_ASYNC = declare("async-memory-sampled", 3, ["topology=async", "run.memory_sample_s=0.1",
                                                    "topology.max_policy_lag=64", *TINY_DQN])


def _edit(run, **fields):
    path = run / "summary.json"
    summary = json.loads(path.read_text())
    summary.update(fields)
    path.write_text(json.dumps(summary))


def _async_run(root, name, *, grow=0.0, lag=10, received=(5, 7)):
    """An async run of a learner and two simulators, 600 s, memory sampled every 10 s; rank 2's
    memory grows by ``grow`` after the warm-up; the learner received ``received`` chunks."""
    run = make_run(root, name, "async", 3, 0, 600.0, extra_topology="  max_policy_lag: 64\n")
    summary = json.loads((run / "summary.json").read_text())
    for rank in summary["per_rank"]:
        base = 500_000 + 1000 * rank["rank"]
        series = [[t, base * (0.5 if t < 60 else 1.0)] for t in range(0, 601, 10)]  # start-up growth
        if rank["rank"] == 2:
            series[-1][1] = base * (1.0 + grow)
        rank["rss_kib"] = series
        if rank["role"] == "simulator":
            rank["chunks_sent"] = {1: 5, 2: 7}[rank["rank"]]
    _edit(run, per_rank=summary["per_rank"], policy_lag_max=lag, topology_stats={
        "discarded_chunks": 0, "chunks_received": {"1": received[0], "2": received[1]}})
    return run


def _verdicts(report):
    return {(c.path.name, c.name): c.ok for c in report.checks}


def test_each_check_passes_and_fails_on_what_it_checks(tmp_path):
    _async_run(tmp_path, "good")
    _async_run(tmp_path, "leaky", grow=0.25)
    _async_run(tmp_path, "over_lag", lag=65)
    _async_run(tmp_path, "lost_chunk", received=(5, 6))
    make_run(tmp_path, "plain", "sequential", 1, 0, 30.0)
    broken = make_run(tmp_path, "crashed", "sequential", 1, 1, 30.0)
    (broken / "summary.json").unlink()
    report = build_report([tmp_path], tmp_path / "out")
    verdicts = _verdicts(report)
    assert all(verdicts[("good", name)] for name in ("finished", "memory flat", "lag bound", "chunks"))
    assert verdicts[("leaky", "memory flat")] is False and verdicts[("leaky", "chunks")]
    assert verdicts[("over_lag", "lag bound")] is False and verdicts[("over_lag", "memory flat")]
    assert verdicts[("lost_chunk", "chunks")] is False and verdicts[("lost_chunk", "lag bound")]
    assert verdicts[("crashed", "finished")] is False
    # a run without memory samples or async stats gets only the checks that apply to it
    assert {name for path, name in verdicts if path == "plain"} == {"finished"}
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Health checks" in text and "| `leaky` | memory flat | **FAIL** | largest growth" in text
    assert "+25.0%" in text


def test_check_flag_sets_the_exit_status(tmp_path, capsys):
    _async_run(tmp_path / "ok", "good")
    assert main([str(tmp_path / "ok"), "--check"]) == 0
    assert "PASS  memory flat" in capsys.readouterr().out
    _async_run(tmp_path / "bad", "lost_chunk", received=(4, 7))
    assert main([str(tmp_path / "bad"), "--check"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  chunks" in out and "sent/received differ: {'1': (5, 4)}" in out
    assert main([str(tmp_path / "bad")]) == 0  # without --check the report is all that is asked


def test_memory_growth_ignores_the_warm_up_and_needs_samples():
    flat = [[t, 100 if t < 120 else 200] for t in range(0, 601, 10)]  # warm-up: 120 s
    assert memory_growth(flat) == (0.0, 48)
    assert memory_growth([[0, 100], [10, 100]]) is None
    short = [[t / 10, 100 + t] for t in range(0, 41)]  # 4 s: the warm-up is half of it
    growth, samples = memory_growth(short)
    assert growth == pytest.approx(140 / 120 - 1) and samples == 20


def test_the_sampler_records_this_process():
    assert MemorySampler.start_if(0) is None
    sampler = MemorySampler.start_if(0.02)
    time.sleep(0.15)
    samples = sampler.stop()
    assert len(samples) >= 4 and all(kib > 10_000 for _, kib in samples)
    assert [t for t, _ in samples] == sorted(t for t, _ in samples)


def test_a_real_async_run_carries_its_memory_and_passes_its_checks(runs, tmp_path):
    run = runs.get(SAMPLED_ASYNC)
    per_rank = run.summary()["per_rank"]
    assert len(per_rank) == 3 and all(len(r["rss_kib"]) >= 3 for r in per_rank)
    report = build_report([run.run_dir], tmp_path / "out")
    verdicts = {c.name: c for c in report.checks}
    assert verdicts["finished"].ok and verdicts["chunks"].ok and verdicts["lag bound"].ok, report.checks
    assert "memory flat" in verdicts  # its verdict depends on this short run's start-up
