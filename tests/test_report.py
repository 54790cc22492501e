"""drlmpi.report on synthetic run directories (no MPI, no training)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from drlmpi.report import build_report
from drlmpi.report.__main__ import main
from drlmpi.report.curves import mean_curve
from drlmpi.report.plots import PLOT_FILES
from tests.conftest import REPO

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
THRESHOLD = 475.0

# (topology, world size) -> train_seconds per seed (seeds 0 and 1); every run solves at 90% of it.
TIMES = {("sequential", 1): [100.0, 120.0], ("p2p", 2): [60.0, 66.0],
         ("star", 2): [80.0, 90.0], ("star", 3): [50.0, 70.0]}
TOPOLOGY_TARGETS = {"sequential": "Sequential", "p2p": "PointToPoint", "star": "Star"}
# What each topology declares in summary.json: (sort key, the DQN paper's column name or None).
DECLARED = {"sequential": (0, lambda n: "Standard"), "p2p": (10, lambda n: "2 Processes"),
            "star": (20, lambda n: f"MP({n})"), "parameter_server": (30, lambda n: None),
            "async": (40, lambda n: None), "allgather": (50, lambda n: None)}


class FakeTopology:
    """A topology class as the report asks one (summaries without the label fields, missing runs)."""

    report_order = 25

    @classmethod
    def report_label(cls, topo_cfg):
        return f"fake[{topo_cfg.get('mode', 'plain')}]"

    @classmethod
    def paper_label(cls, world_size):
        return f"F({world_size})"

    @classmethod
    def fixed_world_size(cls):
        return 7


def _config_yaml(topology: str, seed: int, algo: str = "dqn", env: str = "cartpole",
                 extra_topology: str = "", max_env_steps: int = 100000, target: str | None = None) -> str:
    target = target or f"drlmpi.topologies.{topology}.{TOPOLOGY_TARGETS.get(topology, 'X')}"
    return (f"seed: {seed}\ndevice: cpu\nthreads_per_rank: 1\nworld_size: null\n"
            f"run:\n  max_env_steps: {max_env_steps}\n  eval_every: 2000\n  stop_on_solve: true\n"
            f"algo:\n  name: {algo}\n"
            f"env:\n  name: {env}\n  id: CartPole-v1\n  reward_threshold: {THRESHOLD}\n  sim_cost_ms: 0\n"
            f"topology:\n  _target_: {target}\n  name: {topology}\n{extra_topology}")


def make_run(root, name, topology, world_size, seed, train_s, *, algo="dqn", env="cartpole",
             stats=None, solved=True, lag=None, extra_topology="", label=None, declared=True,
             steps=None, updates=None, max_env_steps=100000, extra_config=""):
    """A run directory as drlmpi writes it: summary.json, metrics.csv, .hydra/config.yaml.

    ``declared``: the summary carries the topology's own ``topology_label`` / ``topology_order``
    / ``paper_label`` (``label`` overrides the label); else the report must ask the class."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        _config_yaml(topology, seed, algo, env, extra_topology, max_env_steps) + extra_config)
    (run / ".hydra" / "overrides.yaml").write_text(f"- topology={topology}\n- seed={seed}\n")
    steps = steps or 20000 + 1000 * world_size
    updates = steps // 2 if updates is None else updates
    tts = 0.9 * train_s if solved else None
    per_rank = []
    for r in range(world_size):
        learner = r == 0
        per_rank.append({"rank": r, "role": "learner" if learner else "simulator",
                         "simulate_s": 0.1 * train_s if (not learner or world_size == 1) else 0.0,
                         "learn_s": 0.7 * train_s if learner else 0.0,
                         "mpi_wait_s": 0.0 if world_size == 1 else 0.2 * train_s,
                         "wall_s": train_s + 1.0, "env_steps": steps, "episodes": 100, "updates": updates})
    summary = {
        "solved": solved, "train_seconds_to_threshold": tts,
        "env_steps_to_threshold": steps if solved else None,
        "updates_to_threshold": updates if solved else None,
        "reward_threshold": THRESHOLD, "best_eval_return": 500.0 if solved else 200.0,
        "last_eval_return": 500.0 if solved else 200.0, "evaluations": 10,
        "stop_reason": "solved" if solved else "max_env_steps", "env_steps": steps, "episodes": 100,
        "updates": updates, "train_seconds": train_s, "eval_seconds": 1.0, "wall_seconds": train_s + 1.0,
        "env_steps_per_s": steps / train_s, "updates_per_s": updates / train_s,
        "mpi_wait_share": 0.0 if world_size == 1 else 0.2, "policy_lag_mean": lag,
        "topology_stats": stats or {}, "algo": algo, "env_id": "CartPole-v1", "env": env,
        "topology": topology, "world_size": world_size, "seed": seed, "sim_cost_ms": 0.0, "num_envs": 1,
        "device": "cpu", "threads_per_rank": 1, "run_dir": str(run), "per_rank": per_rank,
    }
    if declared:
        order, paper = DECLARED.get(topology, (99, lambda n: None))
        summary.update(topology_label=label or topology, topology_order=order, paper_label=paper(world_size))
    (run / "summary.json").write_text(json.dumps(summary))
    with open(run / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["kind", "train_seconds", "wall_seconds", "env_steps", "updates", "return",
                         "return_std", "length", "rank"])
        writer.writerow(["episode", 0.5, 0.5, 20, 0, 20.0, "", 20, 1])
        for i, frac in enumerate((0.3, 0.6, 0.9)):
            ret = 500.0 if (frac == 0.9 and solved) else 100.0 * (i + 1)
            t = frac * train_s
            writer.writerow(["eval", t, t + 0.1, int(frac * steps), 0, ret, 3.0, 0, -1])
    (run / "rank0.log").write_text("[drlmpi] start\n[drlmpi] eval: mean return 500.0\n")
    return run


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A sweep folder: runs nested two levels deep (as Hydra multirun does), one partial run,
    a topology without a paper column and a jobs.json with one failed job."""
    root = tmp_path_factory.mktemp("synthetic") / "sweep"
    for (topology, ws), times in TIMES.items():
        for seed, t in enumerate(times):
            make_run(root / f"{topology}_{ws}", str(seed), topology, ws, seed, t)
    make_run(root, "grad_2", "parameter_server", 2, 0, 200.0, stats={"rounds": 10})
    partial = root / "star_3" / "2"
    (partial / ".hydra").mkdir(parents=True)
    (partial / ".hydra" / "config.yaml").write_text(_config_yaml("star", 7))
    (partial / "rank0.log").write_text("line one\nTraceback (most recent call last):\nRuntimeError: boom\n")
    # a job that died before Hydra wrote .hydra/: only the launcher's job.log
    early = root / "3_dqn_cartpole_star_n4"
    early.mkdir()
    (early / "job.log").write_text("$ mpiexec -n 4 python -m mpi4py -m drlmpi topology=star seed=5 "
                                   f"hydra.run.dir={early} hydra.mode=RUN\nmpiexec: no such host\n")
    # records as hydra_plugins/drlmpi_launcher writes them (relative run_dir resolved at the root)
    (root / "jobs.json").write_text(json.dumps([
        {"job": 0, "overrides": ["topology=star", "seed=7"], "run_dir": "star_3/2", "ranks": 3,
         "status": "failed", "returncode": 1, "log_tail": "RuntimeError: boom"},
        {"job": 1, "overrides": ["topology=p2p", "seed=0"], "run_dir": str(root / "p2p_2" / "0"),
         "ranks": 2, "status": "ok", "returncode": 0},
        {"job": 2, "overrides": ["topology=p2p", "world_size=4"], "run_dir": str(root / "never"),
         "status": "skipped", "returncode": None, "reason": "topology=p2p needs exactly 2 ranks"},
        {"job": 3, "overrides": ["topology=star", "seed=5"], "run_dir": str(early), "ranks": 4,
         "status": "failed", "returncode": 143, "log_tail": "mpiexec: no such host"},
    ]))
    return root


@pytest.fixture(scope="module")
def sweep_out(sweep, tmp_path_factory):
    """The report of ``sweep``, written once through the command-line entry point."""
    out = tmp_path_factory.mktemp("report") / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    return out


def _table(out):
    with open(out / "table.csv", newline="") as f:
        return {(r["env"], r["algo"], r["topology"], int(r["world_size"])): r for r in csv.DictReader(f)}


def test_table_has_every_key_and_correct_speedups(sweep_out):
    out = sweep_out
    rows = _table(out)
    expected = {("cartpole", "dqn", t, ws) for t, ws in TIMES} | {("cartpole", "dqn", "parameter_server", 2)}
    assert set(rows) == expected
    seq = np.mean(TIMES[("sequential", 1)])
    for (topology, ws), times in TIMES.items():
        row = rows[("cartpole", "dqn", topology, ws)]
        assert int(row["n"]) == 2 and int(row["solved"]) == 2
        assert float(row["train_s_mean"]) == pytest.approx(np.mean(times))
        assert float(row["speedup_fixed"]) == pytest.approx(seq / np.mean(times))
        assert float(row["efficiency_fixed"]) == pytest.approx(seq / np.mean(times) / ws)
        # every run solves at 90 % of its training time
        assert float(row["threshold_s_mean"]) == pytest.approx(0.9 * np.mean(times))
        assert float(row["speedup_threshold"]) == pytest.approx(seq / np.mean(times))
        assert float(row["efficiency_threshold"]) == pytest.approx(seq / np.mean(times) / ws)
    server = rows[("cartpole", "dqn", "parameter_server", 2)]
    assert float(server["speedup_fixed"]) == pytest.approx(seq / 200)
    assert len(list(csv.DictReader(open(out / "runs.csv")))) == 2 * len(TIMES) + 1


def test_markdown_lists_missing_and_failed_runs_and_paper_layout(sweep, sweep_out):
    text = (sweep_out / "report.md").read_text()
    partial = str(sweep / "star_3" / "2")
    assert "Missing or partial runs (2)" in text
    assert f"- `{partial}`: dqn / cartpole / star, 3 rank(s), seed 7 - no summary.json" in text
    assert "RuntimeError: boom" in text and "launcher (jobs.json): failed, return code 1" in text
    early = sweep / "3_dqn_cartpole_star_n4"
    assert f"- `{early}`: ? / ? / star, 4 rank(s), seed 5 - no summary.json" in text
    assert "mpiexec: no such host" in text and "overrides: `topology=star seed=5`" in text
    assert "Failed launcher jobs (2)" in text and "topology=star seed=7" in text
    assert "Skipped launcher jobs (1)" in text and "needs exactly 2 ranks" in text
    lines = text.splitlines()
    assert "|  | Standard | 2 Processes | MP(2) | MP(3) |" in lines
    assert "|  | Standard | parameter_server(2) |" in lines
    seq = np.mean(TIMES[("sequential", 1)])
    t_row = lines[lines.index("|  | Standard | 2 Processes | MP(2) | MP(3) |") + 2]
    speed_row = lines[lines.index("|  | Standard | 2 Processes | MP(2) | MP(3) |") + 3]
    order = [("sequential", 1), ("p2p", 2), ("star", 2), ("star", 3)]
    assert t_row == "| t(s) | " + " | ".join(f"{np.mean(TIMES[k]):.1f}" for k in order) + " |"
    assert speed_row == "| Speedup | " + " | ".join(f"{seq / np.mean(TIMES[k]):.2f}" for k in order) + " |"


def test_plots_are_valid_pngs(sweep_out):
    for name in PLOT_FILES:
        path = sweep_out / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_default_out_is_first_path_slash_report(tmp_path, capsys):
    run = make_run(tmp_path / "runs", "only", "sequential", 1, 0, 10.0)
    partial = tmp_path / "runs" / "partial"
    (partial / ".hydra").mkdir(parents=True)
    (partial / ".hydra" / "config.yaml").write_text(_config_yaml("p2p", 3).replace("null", "2"))
    assert main([str(tmp_path / "runs")]) == 0
    assert (tmp_path / "runs" / "report" / "report.md").is_file()
    printed = capsys.readouterr().out
    assert "1 complete run(s)" in printed and "1 missing/partial" in printed
    assert f"missing: {partial} (dqn/cartpole/p2p, 2 rank(s), seed 3" in printed
    assert str(tmp_path / "runs" / "report" / "report.md") in printed
    # a second report over the same folder ignores the first report's files
    assert main([str(tmp_path / "runs")]) == 0 and run.is_dir()


def test_no_baseline_says_na_and_labels_come_from_the_topologies(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "a", "star", 3, 0, 50.0, algo="ppo")
    make_run(root, "b", "allgather", 2, 0, 40.0, algo="ppo", label="allgather[allgather]")
    make_run(root, "c", "async", 3, 0, 30.0, algo="ppo", label="async[free]", lag=3.5)
    # no label fields in the summary: the class named by topology._target_ is asked ...
    fake = "tests.test_report.FakeTopology"
    make_run(root, "d", "fake", 2, 0, 30.0, algo="ppo", declared=False,
             extra_topology="  mode: turbo\n", extra_config="")
    (root / "d" / ".hydra" / "config.yaml").write_text(
        _config_yaml("fake", 0, "ppo", extra_topology="  mode: turbo\n", target=fake))
    # ... and a class that cannot be imported leaves the plain name
    make_run(root, "e", "gone", 2, 0, 30.0, algo="ppo", declared=False)
    report = build_report([root], tmp_path / "out")
    rows = _table(report.out)
    assert {k[2] for k in rows} == {"star", "allgather[allgather]", "async[free]", "fake[turbo]", "gone"}
    for row in rows.values():  # table.csv: empty cells and why (report.md: the reason in the cell)
        assert row["speedup_fixed"] == row["efficiency_threshold"] == ""
        assert row["note"] == ("speedup_fixed, efficiency_fixed, speedup_threshold, efficiency_threshold, "
                               "speedup_threshold_median, speedup_throughput, efficiency_throughput: "
                               "no sequential run")
    assert float(rows[("cartpole", "ppo", "async[free]", 3)]["policy_lag_mean"]) == 3.5
    # rows in the topologies' own order: star 20, fake 25, async 40, allgather 50, unknown last
    assert [g.topology for g in report.groups] == ["star", "fake[turbo]", "async[free]",
                                                   "allgather[allgather]", "gone"]
    assert [g.paper for g in report.groups] == ["MP(3)", "F(2)", None, None, None]


def test_table_csv_keeps_its_numeric_columns_numeric(tmp_path):
    """A figure that cannot be given leaves its cell empty and the note says why, so that a
    reader (a spreadsheet, pandas) gets numbers; report.md keeps the reason in the cell."""
    from drlmpi.report.tables import RUN_COLUMNS, RUN_TEXT, TABLE_COLUMNS, TABLE_TEXT

    root = tmp_path / "runs"
    make_run(root, "seq", "sequential", 1, 0, 100.0, solved=False)
    make_run(root, "star", "star", 3, 0, 40.0)
    make_run(root, "star_short", "star", 3, 1, 30.0, max_env_steps=3000)
    make_run(root, "p2p", "p2p", 2, 0, 50.0, solved=False)
    (root / "p2p" / ".hydra" / "config.yaml").write_text(_config_yaml("p2p", 0).replace("100000", "null"))
    report = build_report([root], tmp_path / "out")
    for name, columns, text in (("table.csv", TABLE_COLUMNS, TABLE_TEXT),
                                ("runs.csv", RUN_COLUMNS, RUN_TEXT)):
        with open(report.out / name, newline="") as f:
            rows = list(csv.DictReader(f))
        assert rows and list(rows[0]) == columns
        for row in rows:
            for column in set(columns) - set(text) - {"note"}:
                if row[column]:
                    float(row[column])  # a number, or nothing
    rows = _table(report.out)
    star = rows[("cartpole", "dqn", "star", 3)]
    assert float(star["speedup_fixed"]) == pytest.approx(100.0 / 35.0)
    assert star["speedup_threshold"] == star["max_env_steps"] == ""
    assert star["note"] == ("max_env_steps: 3000/100000; speedup_threshold, efficiency_threshold, "
                            "speedup_threshold_median: sequential not solved")
    p2p = rows[("cartpole", "dqn", "p2p", 2)]
    assert p2p["max_env_steps"] == "" and p2p["note"].startswith("max_env_steps: null; ")
    assert p2p["note"].endswith("speedup_threshold_median: sequential not solved")
    text = (report.out / "report.md").read_text()
    assert "n/a (sequential not solved)" in text and "| 3000/100000 |" in text


def test_star_rounds_of_another_size_are_a_regime_of_their_own(tmp_path):
    """Runs that differ only in ``topology.sync_every`` are never averaged together: the label
    names a size other than the class's own default (a plugin subclass has its own)."""
    from drlmpi.topologies.star import Star
    from tests.plugin_topology.ring import Ring

    root = tmp_path / "runs"
    make_run(root, "a", "star", 3, 0, 50.0, declared=False, extra_topology="  sync_every: 256\n")
    make_run(root, "b", "star", 3, 1, 40.0, declared=False, extra_topology="  sync_every: 64\n")
    make_run(root, "c", "star", 3, 2, 30.0, declared=False,
             extra_topology="  sync_every: 1\n  sync_unit: episodes\n")
    groups = {g.topology: len(g.runs) for g in build_report([root], tmp_path / "out").groups}
    assert groups == {"star": 1, "star[sync_every=64]": 1, "star[sync_every=1,episodes]": 1}
    assert Ring.report_label({"sync_every": 128}) == "ring"  # the plugin's own default
    assert Ring.report_label({"sync_every": 256}) == "ring[sync_every=256]"
    assert Star.report_label({}) == "star"


def test_an_algorithm_variant_is_a_regime_of_its_own(tmp_path):
    """Async PPO with and without V-trace (``algo.vtrace``, a declared report variant) are never
    averaged together; the default's label stays plain, and a device joins the variant."""
    from drlmpi.algos.dqn import DQN
    from drlmpi.algos.ppo import PPO
    from drlmpi.report.labels import algo_label

    root = tmp_path / "runs"
    for name, seed, vtrace in (("a", 0, None), ("b", 1, "true"), ("c", 2, "false"), ("d", 3, "false")):
        make_run(root, name, "async", 3, seed, 30.0 + seed, algo="ppo", declared=False)
        config = root / name / ".hydra" / "config.yaml"
        own = "  _target_: drlmpi.algos.ppo.PPO\n" + (f"  vtrace: {vtrace}\n" if vtrace else "")
        config.write_text(config.read_text().replace("algo:\n  name: ppo\n", "algo:\n  name: ppo\n" + own))
    groups = {g.algo: sorted(r.seed for r in g.runs) for g in build_report([root], tmp_path / "out").groups}
    assert groups == {"ppo": [0, 1], "ppo[vtrace=false]": [2, 3]}
    assert PPO.report_variant_parts({"name": "ppo", "vtrace": False}) == ["vtrace=false"]
    # IMPALA's stack is a regime of its own; cnn, what auto gives on images, reads as the default
    assert PPO.report_variant_parts({"name": "ppo", "encoder": "impala"}) == ["encoder=impala"]
    assert PPO.report_variant_parts({"name": "ppo", "encoder": "cnn"}) == []
    assert DQN.report_variant_parts({"name": "dqn", "encoder": "impala"}) == ["encoder=impala"]
    assert algo_label("ppo", "cuda", 10, capture="graph",
                      variants=["vtrace=false"]) == "ppo[cuda,graph,vtrace=false]"


def test_missing_run_asks_the_topology_class(tmp_path):
    partial = tmp_path / "runs" / "p"
    (partial / ".hydra").mkdir(parents=True)
    (partial / ".hydra" / "config.yaml").write_text(
        _config_yaml("fake", 4, target="tests.test_report.FakeTopology").replace(
            "world_size: null", "world_size: ${by_topology.${topology.name}}"))
    make_run(tmp_path / "runs", "s", "sequential", 1, 0, 10.0)
    (missing,) = build_report([tmp_path / "runs"], tmp_path / "out").runset.missing
    assert (missing.topology, missing.world_size, missing.seed) == ("fake[plain]", 7, 4)


def test_unsolved_runs_are_left_out_of_time_to_threshold(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "s0", "sequential", 1, 0, 100.0)
    make_run(root, "p0", "p2p", 2, 0, 50.0)
    make_run(root, "p1", "p2p", 2, 1, 70.0, solved=False)
    rows = _table(build_report([root], tmp_path / "out").out)
    p2p = rows[("cartpole", "dqn", "p2p", 2)]
    assert int(p2p["solved"]) == 1
    assert float(p2p["threshold_s_mean"]) == pytest.approx(45.0)
    assert float(p2p["speedup_threshold"]) == pytest.approx(90.0 / 45.0)
    assert float(p2p["speedup_fixed"]) == pytest.approx(100.0 / 60.0)


def test_one_run_dir_as_path_and_overlapping_paths_read_once(tmp_path):
    run = make_run(tmp_path, "only", "sequential", 1, 0, 10.0)
    report = build_report([run, tmp_path], tmp_path / "out")
    assert len(report.runset.runs) == 1 and report.rows[0]["speedup_fixed"] == 1.0


def test_empty_dir_exits_2(tmp_path, capsys):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    assert main([str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("drlmpi.report: no run directories") and "\n" not in err
    assert not (tmp_path / "empty" / "report").exists()


def test_module_entry_point_exit_code(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "drlmpi.report", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no run directories" in proc.stderr


def test_mean_curve_holds_last_value_and_starts_when_all_have():
    grid, mean = mean_curve([(np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])),
                             (np.array([2.0, 4.0]), np.array([0.0, 40.0]))])
    assert grid.tolist() == [2.0, 3.0, 4.0]
    assert mean.tolist() == [10.0, 15.0, 35.0]


def _partial(root, name, topology, world_size, seed, extra=""):
    """A run directory that never wrote summary.json (crashed or killed)."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        _config_yaml(topology, seed).replace("world_size: null", f"world_size: {world_size}") + extra)
    return run


def test_learning_table_medians_ranges_and_budget(tmp_path):
    """The learning-matrix table: solved/run, median [min-max] steps and seconds to threshold,
    the budget verdict (with missing runs) and the speedup of median times."""
    root, budget = tmp_path / "lm", "budget_env_steps: 50000\n"
    cells = {  # (topology, ranks) -> [(steps to threshold or None if unsolved, train seconds)]
        ("sequential", 1): [(30000, 40.0), (35000, 50.0), (40000, 60.0)],
        ("p2p", 2): [(45000, 30.0), (48000, 32.0)],
        ("star", 3): [(20000, 20.0), (60000, 40.0), (None, 80.0)],
        ("async", 3): [(40000, 30.0), (None, 90.0)],
    }
    for (topology, ws), seeds in cells.items():
        for seed, (steps, secs) in enumerate(seeds):
            make_run(root, f"{topology}_{seed}", topology, ws, seed, secs, solved=steps is not None,
                     steps=steps or 100000, extra_config=budget)
    _partial(root, "p2p_9", "p2p", 2, 9, budget)
    _partial(root, "async_9", "async", 3, 9, budget)
    _partial(root, "allgather_0", "allgather", 3, 0, budget)
    report = build_report([root], tmp_path / "out")
    rows = _table(report.out)
    seq, p2p = rows[("cartpole", "dqn", "sequential", 1)], rows[("cartpole", "dqn", "p2p", 2)]
    star, asy = rows[("cartpole", "dqn", "star", 3)], rows[("cartpole", "dqn", "async", 3)]
    assert (seq["solved"], seq["n"], seq["missing"]) == ("3", "3", "0")
    assert float(seq["threshold_steps_median"]) == 35000 and float(seq["threshold_s_max"]) == 0.9 * 60
    assert seq["budget_env_steps"] == "50000" and seq["budget_source"] == "budget_env_steps"
    assert seq["budget_met"] == "yes"
    assert p2p["missing"] == "1" and p2p["budget_met"] == "yes"  # 45k, 48k, ?: median <= 48k
    assert star["budget_met"] == "no"            # 20k, 60k, never: median 60k > 50k
    assert asy["budget_met"] == "incomplete"     # 40k, never, ?: depends on the missing run
    assert float(star["threshold_steps_median"]) == 40000
    assert float(star["speedup_threshold_median"]) == pytest.approx((0.9 * 50) / (0.9 * 30))
    text = (report.out / "report.md").read_text()
    assert "## Learning: solved runs, steps and time to threshold" in text
    lines = text.splitlines()
    assert "| cartpole | dqn | star | 3 | 2/3 | 40k [20k-60k] | 27.0 [18.0-36.0] | 50k | no | 1.67 |" in lines
    assert ("| cartpole | dqn | p2p | 2 | 2/2 (+1 missing) | 46k [45k-48k] | 27.9 [27.0-28.8] | 50k | yes "
            "| 1.61 |") in lines
    assert "| cartpole | dqn | allgather | 3 | 0/0 (+1 missing) | - | - | - | incomplete | - |" in lines


def test_learning_budget_defaults_to_the_runs_own(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "s", "sequential", 1, 0, 10.0, steps=90000, max_env_steps=80000)
    row = _table(build_report([root], tmp_path / "out").out)[("cartpole", "dqn", "sequential", 1)]
    assert (row["budget_env_steps"], row["budget_source"], row["budget_met"]) == \
        ("80000", "run.max_env_steps", "no")


def test_throughput_table_speedup_and_raw_stepping_ceiling(tmp_path):
    root = tmp_path / "tp"
    for name, algo, topology, ws, secs in [("d1", "dqn", "sequential", 1, 100.0),
                                          ("d2", "dqn", "allgather", 2, 40.0),
                                          ("r1", "random", "sequential", 1, 10.0),
                                          ("r2", "random", "allgather", 2, 5.0)]:
        make_run(root, name, topology, ws, 0, secs, algo=algo, env="lunarlander", solved=False,
                 steps=10000, updates=0 if algo == "random" else None)
    report = build_report([root], tmp_path / "out")
    rows = _table(report.out)
    dqn2 = rows[("lunarlander", "dqn", "allgather", 2)]
    assert float(dqn2["speedup_throughput"]) == pytest.approx(2.5)
    assert float(dqn2["efficiency_throughput"]) == pytest.approx(1.25)
    assert float(dqn2["ceiling_env_steps_per_s"]) == pytest.approx(2000)
    assert float(rows[("lunarlander", "dqn", "sequential", 1)]["ceiling_env_steps_per_s"]) == 1000
    assert float(rows[("lunarlander", "random", "allgather", 2)]["speedup_throughput"]) == 2.0
    text = (report.out / "report.md").read_text()
    assert "| lunarlander | dqn | allgather | 2 | 1 | 250 | 125.0 | 2.50 | 1.25 | 2,000 | 20% |" \
        in text.splitlines()


def test_report_code_names_no_topology():
    """Labels, order and paper names come from the runs and topology classes, never from names
    written into drlmpi.report (docstrings and the documented --baseline default aside)."""
    import ast
    import re

    names = re.compile(r"\b(p2p|star|async|allgather|parameter_server|sequential|gradients)\b")
    for path in sorted((REPO / "drlmpi" / "report").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found = set(names.findall(node.value))
                if path.name in ("__init__.py", "__main__.py"):  # the --baseline default
                    found -= {"sequential"}
                assert not found, f"{path.name}: topology name in {node.value!r}"


def test_learner_device_is_its_own_regime(tmp_path):
    """Runs with a GPU learner are grouped apart from CPU-learner runs, each against the
    sequential run on its own device."""
    from drlmpi.report.labels import algo_label

    assert algo_label("dqn", "cpu") == "dqn"
    assert algo_label("dqn", "cuda") == "dqn[cuda]"
    assert algo_label("dqn", "cuda:1", updates=10) == "dqn[cuda:1]"
    assert algo_label("random", "cuda", updates=0) == "random"
    # a chosen update path is its own cell: graph and fused runs are never averaged together
    assert algo_label("dqn", "cuda", 10, capture="graph") == "dqn[cuda,graph]"
    assert algo_label("dqn", "cuda", 10, capture="auto") == "dqn[cuda]"
    assert algo_label("dqn", "cpu", 10, capture="graph") == "dqn"
    # so are lowered-precision products (run.matmul_precision), on a device only
    assert algo_label("td3", "cuda", 10, variants=["twin_critics=stacked"],
                      precision="high") == "td3[cuda,tf32,twin_critics=stacked]"
    # and several updates a graph replay (algo.updates_per_graph), the rate of other updates
    assert algo_label("dqn", "cuda", 10, precision="high", per_graph=8) == "dqn[cuda,tf32,x8]"
    assert algo_label("dqn", "cuda", 10, per_graph=1) == "dqn[cuda]" == algo_label("dqn", "cuda", 10)
    assert algo_label("dqn", "cpu", 10, per_graph=8) == "dqn"
    assert algo_label("td3", "cuda", 10, precision="highest") == "td3[cuda]"
    assert algo_label("dqn", "cpu", 10, precision="medium") == "dqn"


# The ranks x envs-per-rank grid: (world size, num_envs) -> samples/s of the learning runs (mean of
# two seeds at -10 / +10 of it) and of the raw-stepping ceiling (algo=random, one seed).
GRID_SPS = {(1, 1): 100.0, (2, 1): 180.0, (4, 1): 320.0, (1, 2): 200.0, (2, 2): 360.0,
            (1, 4): 400.0, (2, 4): 720.0, (4, 4): 1200.0}
CEILING_SPS = {(1, 1): 400.0, (2, 1): 600.0, (1, 4): 1600.0, (4, 4): 2400.0}


def _grid_run(root, name, world_size, num_envs, seed, sps, *, algo="ppo", topology="allgather",
              learner_only_rank=False, **kwargs):
    """A run of ``train_seconds`` 10 stepping ``sps`` env steps/s with ``num_envs`` per rank."""
    run = make_run(root, name, topology, world_size, seed, 10.0, algo=algo, env="tetris", solved=False,
                   steps=round(10 * sps), updates=0 if algo == "random" else None, **kwargs)
    summary = json.loads((run / "summary.json").read_text())
    summary["num_envs"] = num_envs
    if learner_only_rank:
        summary["per_rank"][0]["env_steps"] = 0
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def _section(text, title):
    """The lines of ``### title`` up to the next heading."""
    lines = text.splitlines()
    start = lines.index(f"### {title}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return lines[start:end]


@pytest.fixture(scope="module")
def grid_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid") / "runs"
    for (ws, envs), sps in GRID_SPS.items():
        for seed, delta in enumerate((-10.0, 10.0)):
            _grid_run(root, f"ppo_n{ws}_e{envs}_s{seed}", ws, envs, seed, sps + delta)
    for (ws, envs), sps in CEILING_SPS.items():
        _grid_run(root, f"random_n{ws}_e{envs}", ws, envs, 0, sps, algo="random")
    return build_report([root], root.parent / "out")


def test_scaling_grid_samples_and_raw_stepping_ceiling(grid_report):
    text = (grid_report.out / "report.md").read_text()
    assert "## Scaling: ranks x environments per rank" in text
    ppo = _section(text, "tetris / ppo / allgather")
    assert "| ranks | e=1 | e=2 | e=4 |" in ppo
    assert "| 1 | 100 (ceiling 400: 25%) | 200 | 400 (ceiling 1,600: 25%) |" in ppo
    assert "| 2 | 180 (ceiling 600: 30%) | 360 | 720 |" in ppo
    assert "| 4 | 320 | - | 1,200 (ceiling 2,400: 50%) |" in ppo
    # the ceiling runs are a grid of their own, without a ceiling
    random = _section(text, "tetris / random / allgather")
    assert "| 1 | 400 | 1,600 |" in random and "| 4 | - | 2,400 |" in random
    assert not any("ceiling" in line for line in random)
    assert "![Scaling of tetris / ppo / allgather](scaling_tetris_ppo.png)" in ppo
    assert (grid_report.out / "scaling_tetris_ppo.png").read_bytes()[:8] == PNG_SIGNATURE
    # the existing tables keep one group per num_envs setting
    assert {g.env for g in grid_report.groups} == {"tetris[envs=1]", "tetris[envs=2]", "tetris[envs=4]"}


def test_scaling_weak_efficiency_and_strong_speedup(grid_report):
    text = (grid_report.out / "report.md").read_text()
    ppo = _section(text, "tetris / ppo / allgather")
    # E(N) = sps(N, e) / (N / 1 * sps(1, e)): 180 / 200, 320 / 400; 360 / 400; 720 / 800, 1200 / 1600
    weak = ppo.index("| 1 | 1.00 | 1.00 | 1.00 |")
    assert ppo[weak + 1:weak + 3] == ["| 2 | 0.90 | 0.90 | 0.90 |", "| 4 | 0.80 | - | 0.75 |"]
    assert any(line.startswith("Weak scaling") and "N0 = 1 rank(s)" in line for line in ppo)
    # totals found at two world sizes or more: T = 2 (1x2, 2x1) and T = 4 (1x4, 2x2, 4x1)
    strong = ppo.index("| total envs | ranks | envs/rank | samples/s | speedup | efficiency |")
    assert ppo[strong + 2:strong + 7] == [
        "| 2 | 1 | 2 | 200 | 1.00 | 1.00 |",
        "| 2 | 2 | 1 | 180 | 0.90 | 0.45 |",       # 180 / 200, / 2
        "| 4 | 1 | 4 | 400 | 1.00 | 1.00 |",
        "| 4 | 2 | 2 | 360 | 0.90 | 0.45 |",       # 360 / 400, / 2
        "| 4 | 4 | 1 | 320 | 0.80 | 0.20 |",       # 320 / 400, / 4
    ]
    with open(grid_report.out / "scaling.csv", newline="") as f:
        rows = {(r["algo"], int(r["world_size"]), int(r["num_envs"])): r for r in csv.DictReader(f)}
    assert set(rows) == {("ppo", *k) for k in GRID_SPS} | {("random", *k) for k in CEILING_SPS}
    cell = rows[("ppo", 4, 4)]
    assert float(cell["env_steps_per_s"]) == pytest.approx(1200.0)
    assert float(cell["weak_efficiency"]) == pytest.approx(1200.0 / (4 * 400.0))
    assert cell["strong_speedup"] == ""          # T = 16 appears once
    assert float(cell["ceiling_fraction"]) == pytest.approx(0.5)
    assert float(rows[("ppo", 4, 1)]["strong_efficiency"]) == pytest.approx(320.0 / 400.0 / 4)
    assert rows[("ppo", 4, 1)]["strong_base_world_size"] == "1"
    assert float(rows[("random", 4, 4)]["weak_efficiency"]) == pytest.approx(2400.0 / (4 * 1600.0))


def test_scaling_counts_only_ranks_that_step_environments(tmp_path):
    """With a learner-only rank, the ideal grows with the simulating ranks (1, then 3)."""
    root = tmp_path / "runs"
    _grid_run(root, "a", 2, 1, 0, 100.0, topology="star", learner_only_rank=True)
    _grid_run(root, "b", 4, 1, 0, 270.0, topology="star", learner_only_rank=True, max_env_steps=5000)
    report = build_report([root], tmp_path / "out")
    (grid,) = report.grids
    assert grid.cell(4, 1).workers == 3 and grid.cell(4, 1).weak == pytest.approx(270.0 / (3 * 100.0))
    section = _section((report.out / "report.md").read_text(), "tetris / ppo / star")
    assert "| 4 (3 simulating) | 0.90 |" in section
    # a budget that differs between the grid's runs is named under its table
    assert ("- `run.max_env_steps` differs between the runs of this grid, so their samples/s are not "
            "comparable: 100000 (1 run(s)), 5000 (1 run(s)).") in section


def _figures(monkeypatch) -> dict:
    """The report's figures by file name, kept instead of saved (to read their panels' notes)."""
    from drlmpi.report import curves, drawing, plots

    saved: dict = {}
    for module in (curves, drawing, plots):
        monkeypatch.setattr(module, "save_figure", lambda fig, path: saved.__setitem__(path.name, fig))
    return saved


def _notes(figure) -> list[str]:
    return [" ".join(t.get_text().split()) for ax in figure.axes for t in ax.texts]


def test_an_empty_panel_says_why_and_what_to_run(tmp_path, monkeypatch):
    """Star at 2 and 4 ranks, one environment each (1 and 3 simulating ranks): no sequential
    run to compare with, no total of environments at two sizes - each panel says what is missing
    and which run gives it, and report.md says the same."""
    saved = _figures(monkeypatch)
    root = tmp_path / "runs"
    _grid_run(root, "a", 2, 1, 0, 100.0, topology="star", learner_only_rank=True)
    _grid_run(root, "b", 4, 1, 0, 270.0, topology="star", learner_only_rank=True)
    report = build_report([root], tmp_path / "out")
    strong = ("No strong scaling: no total of environments (simulating ranks x env.num_envs) was run at "
              "two world sizes. A run of env.num_envs=3 at world_size=2 gives it (3 environments, as "
              "world_size=4 with env.num_envs=1).")
    assert strong in _notes(saved["scaling_tetris_ppo.png"])
    assert strong in _section((report.out / "report.md").read_text(), "tetris / ppo / star")
    (speedup,) = _notes(saved["speedup.png"])
    assert speedup.startswith("No speedup: the runs read hold no sequential run of tetris / ppo")
    assert "topology=sequential" in speedup

    one_size = tmp_path / "one_size"  # one world size, two numbers of environments
    for envs in (1, 2):
        _grid_run(one_size, f"e{envs}", 1, envs, 0, 100.0 * envs)
    build_report([one_size], tmp_path / "out1")
    weak, strong = _notes(saved["scaling_tetris_ppo.png"])
    assert weak == ("No weak scaling: each env.num_envs was run at one world size only. A run of "
                    "env.num_envs=1 at world_size=2 gives it (the same environments per rank as "
                    "world_size=1).")
    assert strong.endswith("Runs with the same total at two world sizes give it, e.g. 8 environments as "
                           "2 simulating ranks x env.num_envs=4 and 4 x env.num_envs=2.")

    partial = tmp_path / "partial" / "run"  # only a run that never finished: nothing to draw
    (partial / ".hydra").mkdir(parents=True)
    (partial / ".hydra" / "config.yaml").write_text(_config_yaml("star", 0))
    build_report([partial.parent], tmp_path / "out2")
    assert _notes(saved["return_vs_time.png"])[0].startswith(
        "Nothing to draw: no run under the paths given has finished (a summary.json).")


def test_no_scaling_section_without_a_grid(tmp_path):
    """One world size and one num_envs per (env, algo, topology): no scaling section or files."""
    root = tmp_path / "runs"
    for name, topology, ws in [("s", "sequential", 1), ("p", "p2p", 2), ("a", "allgather", 3)]:
        for seed in (0, 1):
            make_run(root, f"{name}{seed}", topology, ws, seed, 10.0 + seed)
    make_run(root, "r", "allgather", 3, 0, 5.0, algo="random", updates=0, solved=False)
    report = build_report([root], tmp_path / "out")
    assert report.grids == []
    text = (report.out / "report.md").read_text()
    assert "Scaling" not in text and "## Throughput" in text
    assert not (report.out / "scaling.csv").exists() and not list(report.out.glob("scaling_*.png"))


def test_scaling_names_ceiling_settings_that_differ(tmp_path):
    """A tuned file loaded by the learning algorithm only (here topology.sync_every) makes the
    ceiling step differently: the grid says so."""
    root = tmp_path / "runs"
    for ws in (1, 2):
        _grid_run(root, f"p{ws}", ws, 1, 0, 100.0 * ws, extra_topology="  sync_every: 32\n")
        _grid_run(root, f"r{ws}", ws, 1, 0, 400.0 * ws, algo="random")
    report = build_report([root], tmp_path / "out")
    section = _section((report.out / "report.md").read_text(), "tetris / ppo / allgather")
    assert "| 2 | 200 (ceiling 800: 25%) |" in section
    assert ("- The ceiling runs differ from this grid's in env or topology settings: "
            "`topology.sync_every` (32 here, None in the ceiling runs).") in section


def test_training_return_curve_is_a_rolling_mean_of_episodes():
    from drlmpi.report.curves import rolling_mean

    assert rolling_mean(np.array([1.0, 2, 3, 4, 5]), 2).tolist() == [1.0, 1.5, 2.5, 3.5, 4.5]
    assert rolling_mean(np.array([4.0, 0, 2]), 100).tolist() == [4.0, 2.0, 2.0]


def test_env_label_names_worker_process_environments():
    from drlmpi.report.labels import env_label

    assert env_label("tetris", 0, {"vector": "async"}) == "tetris[vector=async]"
    assert env_label("tetris", 2, {"vector": "sync"}) == "tetris[sim=2ms]"
    assert env_label("cartpole", None, None) == "cartpole"


def test_report_shows_how_the_central_learner_served(runs, tmp_path):
    """A topology=central run: the report's Central inference table gives its serves, rows per
    serve, the learner's inference and update shares and the simulators' round trip."""
    run = runs.get("central-n3")
    summary = run.summary()
    stats = summary["topology_stats"]
    text = (build_report([run.run_dir], tmp_path / "out").out / "report.md").read_text()
    section = text.split("## Central inference", 1)[1].split("\n## ", 1)[0]
    (row,) = [line for line in section.splitlines() if "central(3)" in line]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == f"{stats['serves']:,}" and cells[5] == f"{stats['rows_per_serve']:.1f}"
    trips = [r["round_trip_ms"] for r in summary["per_rank"] if "round_trip_ms" in r]
    assert len(trips) == 2 and cells[8] == f"{sum(trips) / 2:.2f}"
    assert cells[6].endswith("%") and cells[7].endswith("%")


class Ring:
    """A topology from outside the package, as the report sees it: a section of its own."""

    name = "ring"

    @classmethod
    def report_section(cls, runs):
        return ["## Ring", "", *(f"- {pair} {label} seed {run.seed}" for pair, label, run in runs), ""]


def test_a_topology_adds_its_own_report_section(tmp_path):
    """The report asks the class each run's ``topology._target_`` names for its section
    (``report_section``, given that topology's runs): a topology from elsewhere (``Ring`` above)
    gets one with no edit of the report, and runs of classes without one add none. Fails when the
    report finds sections by topology name (as it once found central's)."""
    root = tmp_path / "runs"
    for seed in (0, 1):
        config = make_run(root, f"ring{seed}", "ring", 2, seed, 10.0) / ".hydra" / "config.yaml"
        config.write_text(config.read_text().replace("drlmpi.topologies.ring.X", f"{__name__}.Ring"))
    make_run(root, "seq", "sequential", 1, 0, 20.0)
    text = (build_report([root], tmp_path / "out").out / "report.md").read_text()
    section = text.split("## Ring\n", 1)[1].split("\n## ", 1)[0]
    assert sorted(line for line in section.splitlines() if line.startswith("- ")) == [
        "- cartpole / dqn ring(2) seed 0", "- cartpole / dqn ring(2) seed 1"]
    assert text.count("## Ring") == 1 and "## Central inference" not in text


def test_final_evaluations_sit_next_to_the_published_figure(tmp_path):
    """``+experiment=td3_mujoco``'s table: each cell's last and best evaluation over its seeds,
    beside the TD3 paper's final HalfCheetah return; a task without a published figure shows -."""
    root = tmp_path / "runs"
    for seed, (last, best) in enumerate([(9000.0, 9100.0), (9400.0, 9600.0)]):
        run = make_run(root, f"hc{seed}", "star", 8, seed, 300.0, algo="td3", env="halfcheetah",
                       solved=False, steps=1_000_000)
        summary = json.loads((run / "summary.json").read_text())
        summary.update(env_id="HalfCheetah-v5", last_eval_return=last, best_eval_return=best)
        (run / "summary.json").write_text(json.dumps(summary))
    make_run(root, "cp", "sequential", 1, 0, 10.0)
    text = (build_report([root], tmp_path / "out").out / "report.md").read_text()
    section = text.split("## Final evaluations")[1].split("\n## ")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in section.splitlines() if line.startswith("| ")}
    expected = "| star(8) | 2 | 1,000,000 | 9,200 +- 200 | 9,350 +- 250 | 9,637 +- 859 (TD3 paper"
    assert expected in rows["halfcheetah"]
    assert rows["cartpole"].endswith("| 500 | 500 | - |")


def test_runs_pinned_and_unbound_are_flagged_as_not_comparable(tmp_path):
    root = tmp_path / "runs"
    for seed, bind in ((0, "none"), (1, "core")):
        run = make_run(root, f"star_{bind}", "star", 4, seed, 10.0)
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "bind_ranks": bind}))
    text = (build_report([root], tmp_path / "out").out / "report.md").read_text()
    assert "`bind_ranks` differs between runs - 'core': star(4) seed 1; 'none': star(4) seed 0" in text


def test_run_directories_written_before_the_topologies_package_report_as_they_did():
    """The run directories committed under docs/results/ were written before topologies/ held
    core/ and a package per topology (central.py became central/, asynchronous.py asynchronous/):
    every topology class their saved configs name (``_target_``) still resolves to the topology
    they ran, and the old central run gets central's own section, row for row as its committed
    report shows it. (resume= composes a run from its overrides, so only the report reads these.)"""
    import yaml

    from drlmpi.report.discovery import discover
    from drlmpi.report.labels import topology_class
    from drlmpi.report.markdown import topology_sections
    from drlmpi.report.tables import group_runs

    results = REPO / "docs" / "results"
    targets: dict[str, set[str]] = {}
    for path in sorted(results.glob("*/**/.hydra/config.yaml")):
        topology = yaml.safe_load(path.read_text())["topology"]
        targets.setdefault(topology["_target_"], set()).add(topology["name"])
    assert {"drlmpi.topologies.star.Star", "drlmpi.topologies.asynchronous.Asynchronous",
            "drlmpi.topologies.central.Central", "drlmpi.topologies.allgather.Allgather"} <= set(targets)
    resolved = {target: topology_class({"topology": {"_target_": target}}) for target in targets}
    assert {target: {cls.name} for target, cls in resolved.items() if cls is not None} == targets
    study = results / "h200host_ppo_breakout_overlap"
    section = topology_sections(group_runs(discover([study / "central_seed3"]).runs))
    assert section[0] == "## Central inference"
    committed = (study / "report" / "report.md").read_text().splitlines()
    rows = [line for line in section if line.startswith("| breakout / ppo")]
    assert len(rows) == 1 and rows[0] in committed, rows


def test_saved_configs_of_every_study_load_through_the_typed_settings():
    """The report reads a run's saved config through the same typed settings a run reads
    (drlmpi.report.runs.saved_settings): one run directory of each study under docs/results/,
    written over the project's history (options added since take their defaults, interpolations
    resolve), builds them; every run folder would take ~5 s, one per study covers each format."""
    from drlmpi.config.job import JobSettings
    from drlmpi.report.runs import read_yaml, saved_settings

    studies: dict[str, Path] = {}
    for config in sorted((REPO / "docs" / "results").glob("**/.hydra/config.yaml")):
        studies.setdefault(config.relative_to(REPO / "docs" / "results").parts[0], config)
    assert len(studies) >= 20
    for study, config in studies.items():
        settings = saved_settings(read_yaml(config))
        assert isinstance(settings, JobSettings), study
        assert settings.env.id and settings.run.eval_every >= 1 and settings.topology.name, study
    assert saved_settings({"env": {"id": "CartPole-v1"}, "run": {"eval_every": "often"}}) is None


def test_runs_of_one_cell_that_differ_in_an_algorithm_option_are_cells_of_their_own(tmp_path):
    """A sweep of ``algo.lr=1e-4,3e-4`` over two seeds: four runs of one env, algo, topology and
    size. The two learning rates are two cells of two seeds each, labelled with the option, never
    one cell of four "seeds"; a run without its algorithm's config keeps its label."""
    runs = {}
    for lr in (1e-4, 3e-4):
        for seed in (0, 1):
            run = make_run(tmp_path, f"lr{lr}_s{seed}", "sequential", 1, seed, 10.0)
            config = run / ".hydra" / "config.yaml"
            algo = f"algo:\n  _target_: drlmpi.algos.dqn.DQN\n  name: dqn\n  lr: {lr}\n"
            config.write_text(config.read_text().replace("algo:\n  name: dqn\n", algo))
            runs[(lr, seed)] = run
    (make_run(tmp_path, "no_algo_config", "sequential", 1, 2, 10.0) / ".hydra" / "config.yaml").unlink()
    build_report([tmp_path], tmp_path / "report")
    labels = {row["run_dir"]: row["algo"] for row in csv.DictReader(open(tmp_path / "report" / "runs.csv"))}
    for (lr, _), run in runs.items():
        assert labels[str(run)] == f"dqn[lr={lr:g}]"
    assert labels[str(tmp_path / "no_algo_config")] == "dqn"
    cells = {row["algo"]: row for row in csv.DictReader(open(tmp_path / "report" / "table.csv"))}
    assert sorted(cells) == ["dqn", "dqn[lr=0.0001]", "dqn[lr=0.0003]"]
    assert [cells[k]["n"] for k in sorted(cells)] == ["1", "2", "2"]
