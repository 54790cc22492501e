"""``python -m drlmpi.bench.ingest``: a central learner's ingest of one serve, timed."""

from __future__ import annotations

from drlmpi.bench.ingest import main, serves


def test_the_ingest_benchmark_times_building_and_storing_a_serve(capsys):
    """A serve of 3 groups of 2 games on the CPU: both parts take time, every serve is counted,
    and the table has a row per games-a-group setting (about 1 s: the IMPALA network is built
    once per setting)."""
    got = serves(3, 2, "cpu", 0.05)
    assert got["serves"] > 0 and got["build_us"] > 0 and got["store_us"] > 0
    assert main(["--groups", "3", "--games", "1", "2", "--seconds", "0.05"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("central ingest, PPO Breakout rows, 3 groups a serve, device cpu")
    assert [line.split()[:2] for line in lines[2:]] == [["1", "3"], ["2", "6"]]
