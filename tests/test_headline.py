"""``python -m drlmpi.bench.headline PART OUT``: every study of docs/results/ as its list of commands.

Each part's sweeps are checked without running a job: every value each sweep names - its preset's
grid with the command's own values and the part's - composes in this process (a covering set of
jobs: each value of each swept key at least once, with every other key's values in turn), and its
config resolves; the benchmark and planner commands parse with their own parsers. The launcher's
own dry run of the new presets: tests/test_sweep.py. One part end to end on the CPU takes about a
minute (docs/experiments.md), so here its runner is checked with the commands replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from drlmpi.bench import headline
from tests.mpirun import REPO


def _swept(args: list[str]) -> dict[str, list[str]]:
    """key -> values of a sweep's command line (``hydra.`` keys left out: the launcher's)."""
    parsed = OverridesParser.create().parse_overrides([a for a in args if not a.startswith("hydra.")])
    return {o.get_key_element(): (list(o.sweep_string_iterator()) if o.is_sweep_override()
                                  else [o.get_value_element_as_str()]) for o in parsed}


def _compose(overrides: list[str], hydra: bool = False):
    from hydra import compose, initialize_config_dir

    from drlmpi.run.command_line import _launch_time_resolver

    OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=hydra)


def covering_jobs(args: list[str]) -> list[list[str]]:
    """Jobs of the sweep ``args`` (after ``python -m drlmpi -m``) that hold every value of every
    key: its preset's ``hydra.sweeper.params`` first, the command's values replacing a key's, as
    Hydra's basic sweeper orders them."""
    given = _swept(args)
    first = [f"{k}={v[0]}" for k, v in given.items()]
    params = _compose(first, hydra=True).hydra.sweeper.params or {}
    grid = {**_swept([f"{k}={v}" for k, v in params.items()]), **given}
    width = max(len(values) for values in grid.values())
    return [[f"{k}={v[i % len(v)]}" for k, v in grid.items()] for i in range(width)]


@pytest.mark.parametrize("part", headline.PARTS)
def test_every_command_of_every_part_composes(part, tmp_path):
    from drlmpi.bench.learner import build_parser
    from drlmpi.planner.cli import parse_args as plan_args

    steps = headline.steps(part, [])
    folders = set()
    for step in steps:
        args = headline.command(step, tmp_path, [])[2:]
        module = args[0]
        if module == "drlmpi":
            assert args[1] == "-m" and step.into is not None
            for job in covering_jobs(args[2:]):
                OmegaConf.to_container(_compose(job), resolve=True)  # fails on a value that is not there
            folders.add(step.into)
        elif module == "drlmpi.bench.learner":
            build_parser().parse_args(args[1:])
        elif module == "drlmpi.plan":
            plan_args(args[1:])
        else:  # the report, of this part's own sweeps
            assert module == "drlmpi.report"
            runs = [Path(a).relative_to(tmp_path).as_posix() for a in args[1:args.index("--out")]]
            assert runs and all(any(r == f or f.startswith(f"{r}/") for f in folders) for r in runs), runs


def test_the_covering_jobs_hold_every_value_of_a_presets_grid_and_the_commands_own():
    jobs = covering_jobs(["+experiment=ppo_async_vtrace", "seed=0,1"])
    assert len(jobs) == 5  # the five settings, each with both V-trace values and both seeds in turn
    assert {j[0] for j in jobs} == {f"+experiment/vtrace={s}" for s in (
        "lunarlander", "pendulum", "cartpole_sb3", "cartpole", "cartpole_publish200")}
    assert {j[1] for j in jobs} == {"algo.vtrace=True", "algo.vtrace=False"}
    assert {j[2] for j in jobs} == {"seed=0", "seed=1"} and jobs[0][3] == "+experiment=ppo_async_vtrace"
    with pytest.raises(Exception, match="no_such_one"):
        for job in covering_jobs(["+experiment=ppo_async_vtrace", "+experiment/vtrace=cartpole,no_such_one"]):
            _compose(job)


def test_a_part_runs_its_commands_with_the_overrides_and_keeps_the_artifact_layout(tmp_path, monkeypatch,
                                                                                   capsys):
    """The part's overrides replace its sweeps' own values of a key; OUT gets provenance.json; every
    run is trimmed to the layout; a failed command is named and makes the exit status 1."""
    ran = []

    def fake_run(cmd, log):
        ran.append(cmd)
        if "hydra.sweep.dir" in " ".join(cmd):  # the sweep: a finished run with what trimming drops
            run = tmp_path / "out" / "runs" / "0_dqn_lunarlander_sequential_n1"
            (run / "checkpoint").mkdir(parents=True)
            for name in ("summary.json", "rank0.log", "rank1.log", "policy.pt", "metrics.csv"):
                (run / name).write_text("{}")
            return 0
        (tmp_path / "out" / "report").mkdir()
        (tmp_path / "out" / "report" / "speedup.png").write_bytes(b"png")
        return 3

    monkeypatch.setattr(headline, "run", fake_run)
    assert headline.main(["seed_spread", str(tmp_path / "out"), "seed=0", "run.max_env_steps=4000"]) == 1
    sweep, report = ran
    assert sweep[1:] == ["-m", "drlmpi", "-m", "+experiment=dqn_lunarlander_seed_spread", "seed=0",
                         "run.max_env_steps=4000", f"hydra.sweep.dir={tmp_path / 'out' / 'runs'}"]
    assert report[1:4] == ["-m", "drlmpi.report", str(tmp_path / "out" / "runs")]
    run = tmp_path / "out" / "runs" / "0_dqn_lunarlander_sequential_n1"
    assert sorted(p.name for p in run.iterdir()) == ["metrics.csv", "rank0.log", "summary.json"]
    assert not list((tmp_path / "out" / "report").iterdir())
    record = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert record["command"] == f"python -m drlmpi.bench.headline seed_spread {tmp_path / 'out'} seed=0 " \
                                "run.max_env_steps=4000"
    assert "drlmpi.report" in capsys.readouterr().err


def test_a_sweep_step_replaces_its_own_value_of_a_key_the_overrides_name(tmp_path):
    (step, *_) = headline.steps("steady", [])
    cmd = headline.command(step, tmp_path, ["world_size=2", "device=cpu"], dry_run=True)
    assert "world_size=16" not in cmd and cmd.count("world_size=2") == 1
    assert cmd[-4:] == ["world_size=2", "device=cpu", f"hydra.sweep.dir={tmp_path / 'ceiling'}",
                        "hydra.launcher.dry_run=true"]
    plan, measured, _ = headline.steps("plan_check", ["world_size=1,4", "device=cuda"])
    assert plan.args[plan.args.index("--ranks") + 1] == "1,4" and "device=cuda" in plan.args
    assert "world_size=1,4" in measured.args and "env.sim_cost_ms=1" in measured.args
    plan, measured, _ = headline.steps("plan_check_breakout", ["world_size=8,16", "env.num_envs=8,24"])
    assert plan.args[plan.args.index("--ranks") + 1] == "8,16" and "+experiment=ppo_breakout_16" in plan.args
    assert plan.args[plan.args.index("--games") + 1] == "8,24" and "env.num_envs=8,24" in measured.args
    assert plan.args[plan.args.index("--topologies") + 1] == "central,star"
    assert "topology=central,star" in measured.args and "world_size=8,16" in measured.args
    assert "+experiment=topology_throughput" not in measured.args
    plan, measured, _ = headline.steps("plan_check", ["seed=3,4", "world_size=1,4"])
    assert "seed=3" in plan.args and "seed=3,4" not in plan.args
    assert measured.args.index("seed=3,4") < measured.args.index("world_size=1,4")  # seeds outermost


def test_a_ceiling_keeps_its_algorithm_and_topology_while_the_learners_take_the_overrides(tmp_path):
    """``breakout_levers OUT algo.epochs=2``: the ceiling (algo=random, whose config has no
    ``algo.epochs``) would not compose with it; the two central sweeps take it, and every sweep
    takes the other keys."""
    ceiling, central, levers, _ = headline.steps("breakout_levers", [])
    given = ["algo.epochs=2", "topology.overlap=off", "seed=7", "+algo.extra=1"]
    cmd = headline.command(ceiling, tmp_path, given)
    assert "seed=7" in cmd and not any(a.startswith(("algo.", "topology.", "+algo.")) for a in cmd)
    assert "algo=random" not in cmd  # the preset's own: +experiment/breakout=ceiling names it
    for step in (central, levers):
        cmd = headline.command(step, tmp_path, given)
        assert {"algo.epochs=2", "topology.overlap=off", "seed=7"} <= set(cmd)
        assert "topology.overlap=on" not in cmd
    assert "algo.autocast=bfloat16" in headline.command(levers, tmp_path, given)
    (ceiling, *_) = headline.steps("steady", [])
    cmd = headline.command(ceiling, tmp_path, ["algo=dqn", "world_size=2"])
    assert "algo=random" in cmd and "algo=dqn" not in cmd and "world_size=2" in cmd


def test_a_plan_check_run_again_into_its_folder_keeps_the_plan_and_continues(tmp_path, monkeypatch):
    """A time limit cut the check in its sweep: the same command again keeps the plan (its probe
    and calibration take minutes on a GPU host) and runs the sweep - whose launcher reuses the
    jobs that finished - and the comparison. A plan that failed, or one of other overrides,
    runs again."""
    ran, status = [], {"drlmpi.plan": 0}

    def fake_run(cmd, log):
        ran.append(cmd[2])
        return status["drlmpi.plan"] if cmd[2] == "drlmpi.plan" and "--compare" not in cmd else 0

    monkeypatch.setattr(headline, "run", fake_run)
    monkeypatch.setattr(headline, "keep_artifacts", lambda out: None)
    out = str(tmp_path / "out")
    assert headline.main(["plan_check", out, "seed=0", "world_size=1,2"]) == 0
    assert ran == ["drlmpi.plan", "drlmpi", "drlmpi.plan"]
    ran.clear()
    assert headline.main(["plan_check", out, "seed=0", "world_size=1,2"]) == 0
    assert ran == ["drlmpi", "drlmpi.plan"]  # the plan kept: only the sweep and the comparison
    ran.clear()
    assert headline.main(["plan_check", out, "seed=0", "world_size=1,4"]) == 0  # other cells: plan again
    assert ran == ["drlmpi.plan", "drlmpi", "drlmpi.plan"]
    ran.clear()
    status["drlmpi.plan"] = 2
    assert headline.main(["plan_check", str(tmp_path / "fails"), "world_size=1,2"]) == 1
    status["drlmpi.plan"] = 0
    ran.clear()
    assert headline.main(["plan_check", str(tmp_path / "fails"), "world_size=1,2"]) == 0
    assert ran == ["drlmpi.plan", "drlmpi", "drlmpi.plan"]  # a failed plan is not kept
