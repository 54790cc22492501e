"""A config-group choice that names no config (``env=lunar``, ``topology=Star``,
``hydra/sweeper=optna``) is refused on the command line in one line, with the nearest choices
and the list of them, before Hydra composes (drlmpi.config.choices) - for a run, a sweep (every
value), the planner and ``--help``; valid choices and Hydra's sweep syntax pass untouched.

In-process, through the functions the commands call (the command line's checks, the planner's
main, ``python -m drlmpi``'s main for ``--help``), but one subprocess showing what a user sees
and how soon. About 1 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore

from drlmpi.config.choices import check_group_choices, group_choices
from drlmpi.config.errors import ConfigError, did_you_mean, nearest
from drlmpi.config.plugins import PLUGIN_PATH, group_files
from drlmpi.planner.cli import main as plan_main
from drlmpi.run import command_line
from drlmpi.run.arguments import check_command_line
from tests.conftest import REPO

PLUGINS = Path(__file__).resolve().parent / "plugin_topology"


def refusal(*argv: str) -> str:
    """The one-line message with which the command line ``argv`` is refused."""
    with pytest.raises(ConfigError) as info:
        check_command_line(list(argv))
    message = str(info.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize(("argv", "key", "got", "meant"), [
    (["env=lunar"], "env", "lunar", "env=lunarlander"),
    (["topology=Star"], "topology", "Star", "topology=star"),
    (["algo=pp0"], "algo", "pp0", "algo=ppo"),
    (["+experiment=ppo_breakout16"], "+experiment", "ppo_breakout16", "+experiment=ppo_breakout_16"),
    (["experiment=ppo_breakout16"], "experiment", "ppo_breakout16", "experiment=ppo_breakout_16"),
    (["+experiment=pair/dqn_cartpol"], "+experiment", "pair/dqn_cartpol", "+experiment=pair/dqn_cartpole"),
    (["-m", "hydra/sweeper=optna", "seed=0"], "hydra/sweeper", "optna", "hydra/sweeper=optuna"),
    (["-m", "hydra/launcher=submitit_slrum"], "hydra/launcher", "submitit_slrum",
     "hydra/launcher=submitit_slurm"),
    # every value of a sweep, whichever way it is written
    (["--multirun", "topology=star,Star"], "topology", "Star", "topology=star"),
    (["-m", "env=choice(cartpole,lunar)"], "env", "lunar", "env=lunarlander"),
    (["env=[cartpole,lunar]"], "env", "lunar", "env=lunarlander"),
    # a package, a quoted value; the other overrides' checks wait for the groups'
    (["env@foo=lunar"], "env@foo", "lunar", "env@foo=lunarlander"),
    (["env='lunar'", "env.num_env=2"], "env", "lunar", "env=lunarlander"),
])
def test_a_choice_of_no_config_is_refused_naming_the_nearest(argv, key, got, meant):
    message = refusal(*argv)
    group = key.lstrip("+").split("@")[0]
    assert message.startswith(f"{key} must be one of "), message
    assert f" (did you mean {meant}" in message and message.endswith(f"?), got {got!r}")  # nearest first
    own = [name for name in group_choices(group) if "/" not in name]
    assert own and ", ".join(own) in message  # the choices, all of them
    if group in ("algo", "env", "topology"):  # conf/'s files are the choices
        assert own == sorted(group_files(group))


def test_a_folder_of_presets_is_listed_as_one_choice_and_searched():
    message = refusal("+experiment=breakout")
    assert "breakout/..., pair/..." in message and "did you mean +experiment=breakout/" in message
    assert "+experiment=pair/dqn_cartpole" not in message  # not near


def test_nothing_near_names_no_choice():
    assert refusal("algo=zzzzz") == "algo must be one of dqn, ppo, random, td3, got 'zzzzz'"


@pytest.mark.parametrize("argv", [
    ["env=cartpole", "algo=ppo", "topology=star"],
    ["-m", "topology=star,p2p", "env=cartpole,lunarlander"],
    ["-m", "topology=choice(star,p2p)"],
    ["-m", "env=glob(*)"], ["-m", "env=glob(cart*,exclude=cartpole)"],  # globs: Hydra's to expand
    ["-m", "topology=range(1,3)"],  # a range over a group: Hydra's own refusal
    ["~topology"], ["~env=cartpole"],  # deletions
    ["env@foo=cartpole"], ["+env@foo=lunarlander"],
    ['env="cartpole"'], ["env='lunarlander'"], ["env=cartpole.yaml"],
    ["env=${oc.env:SOME_ENV}"], ["env=null"], ["env=1"],  # interpolations and other values
    ["env=[cartpole,pendulum]"],
    ["+experiment=ppo_breakout_16"], ["experiment=pair/dqn_cartpole"], ["+experiment=vtrace/cartpole"],
    ["-m", "hydra/sweeper=optuna"], ["-m", "hydra/sweeper=drlmpi"], ["-m", "hydra/sweeper=basic"],
    ["-m", "hydra/launcher=submitit_slurm"], ["-m", "hydra/launcher=mpi"], ["hydra/launcher=basic"],
    ["tuned=nothing_here"],  # not a checked group
    # configs found elsewhere: every choice left to Hydra
    ["--config-dir=/somewhere", "env=lunar"], ["-cd", "/somewhere", "env=lunar"],
    ["--config-name", "other", "topology=ring"], ["hydra.searchpath=[file:///somewhere]", "env=lunar"],
])
def test_valid_choices_and_sweep_syntax_pass(argv):
    check_command_line(argv)


def test_a_plugin_directorys_topology_is_a_choice(monkeypatch):
    monkeypatch.delenv(PLUGIN_PATH, raising=False)
    with pytest.raises(ConfigError, match=r"^topology must be one of .*, got 'ring'$"):
        check_group_choices(["topology=ring"])
    monkeypatch.setenv(PLUGIN_PATH, str(PLUGINS))
    check_group_choices(["topology=ring"])
    with pytest.raises(ConfigError, match=r"^topology must be one of .*, ring, .*"
                                          r"\(did you mean topology=ring\?\), got 'rng'$"):
        check_group_choices(["topology=rng"])


def test_a_config_store_choice_is_a_choice():
    """A config a Hydra plugin stores in the ConfigStore under a checked group is a choice."""
    store = ConfigStore.instance()
    store.store(group="topology", name="stored_ring", node={"name": "stored_ring"})
    try:
        check_group_choices(["topology=stored_ring"])
        with pytest.raises(ConfigError, match=r"did you mean topology=stored_ring\?"):
            check_group_choices(["topology=stored_rng"])
    finally:
        del store.repo["topology"]["stored_ring.yaml"]
        if not store.repo["topology"]:
            del store.repo["topology"]


def test_the_planner_refuses_a_choice_of_no_config(capsys):
    assert plan_main(["env=lunar", "--no-calibrate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("drlmpi.plan: error: env must be one of ") and err.count("\n") == 1
    assert "did you mean env=lunarlander?" in err


def test_help_refuses_a_choice_of_no_config(capsys):
    with pytest.raises(SystemExit) as info:
        command_line.main(["env=lunar", "--help"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("drlmpi: error: env must be one of ") and captured.err.count("\n") == 1
    command_line.main(["env=lunarlander", "--help"])
    assert "usage:" in capsys.readouterr().out


def test_the_nearest_choice():
    assert nearest("Star", ["p2p", "star", "async"]) == ["star"]  # case alone first
    assert nearest("optna", ["basic", "drlmpi", "optuna"]) == ["optuna"]
    assert nearest("zzz", ["basic"]) == []
    assert did_you_mean("pp0", ["dqn", "ppo"], lambda c: f"algo={c}") == "did you mean algo=ppo?"
    assert did_you_mean("submitit_slrum", ["submitit_slurm", "submitit_local"], n=3) == \
        "did you mean submitit_slurm or submitit_local?"
    assert did_you_mean("x", ["abc"]) == ""


def test_a_user_sees_one_line_in_under_2_s(tmp_path):
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "drlmpi", "env=lunar", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    took = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("drlmpi: error: env must be one of ant, breakout, cartpole, ")
    assert proc.stderr.count("\n") == 1 and "did you mean env=lunarlander?" in proc.stderr
    assert "Could not find" not in proc.stderr and "Traceback" not in proc.stderr and proc.stdout == ""
    assert took < 2.0, f"{took:.2f} s"
