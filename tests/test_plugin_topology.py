"""A topology added from outside drlmpi - one module and one YAML file in a plugin directory on
``DRLMPI_PLUGIN_PATH`` (tests/plugin_topology/: ring.py, topology/ring.yaml) - is checked, run
under mpiexec, planned and reported, with no edit to drlmpi (drlmpi.topologies.core.registry).

About 6 s: the one real 3-rank job (every rank of a user's mpiexec launch must find the plugin's
class and options) is most of it; the checks, the plan and the report run in-process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from drlmpi.config.checks import check_override
from drlmpi.config.errors import ConfigError
from drlmpi.config.plugins import PLUGIN_PATH
from drlmpi.config.schema import SCHEMA, SETTINGS
from drlmpi.planner.model import predict, topology_names
from drlmpi.report import build_report
from drlmpi.run.preflight import make_plan
from drlmpi.run.reference import help_lines
from drlmpi.topologies.core.registry import register
from drlmpi.topologies.star import Star
from tests.conftest import CONF
from tests.mpirun import run_job
from tests.shared_runs import CUE
from tests.test_plan import probe

PLUGINS = Path(__file__).resolve().parent / "plugin_topology"
RUN = ["topology=ring", CUE, "env.reward_threshold=null", "algo.hidden=[32,32]", "algo.learning_starts=200",
       "run.max_env_steps=768", "run.eval_every=100000", "run.progress_every_s=0", "run.tensorboard=false"]


@pytest.fixture
def plugin(monkeypatch):
    """The plugin directory on DRLMPI_PLUGIN_PATH and its topology registered; afterwards the
    session's other tests see drlmpi's own topologies only."""
    monkeypatch.setenv(PLUGIN_PATH, str(PLUGINS))
    register()
    yield
    SCHEMA.pop("topology/ring", None)
    SETTINGS.pop("topology/ring", None)
    sys.modules.pop("ring", None)
    if str(PLUGINS) in sys.path:
        sys.path.remove(str(PLUGINS))


# A report panel with nothing drawn (no evaluation) shows no empty legend: matplotlib warned
@pytest.mark.filterwarnings("error:No artists with labels:UserWarning")
def test_a_plugin_topology_is_checked_run_planned_and_reported(plugin, tmp_path):
    # Its options are the schema's: its own defaults and types, its YAML file's values.
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=RUN)
    assert (cfg.topology._target_, cfg.topology.laps, cfg.topology.sync_every) == ("ring.Ring", 5, 128)
    with pytest.raises(ConfigError, match=r"^topology\.laps must be >= 1, got 0$"):
        check_override("topology.laps=0", {"topology": "ring"})
    assert any(line.strip().startswith("topology.laps=3 ") for line in help_lines())
    # Declared as a dataclass: the scope is its settings class (star's options, its own default and
    # option; _target_ and name its YAML file's), and the run's topology reads them typed.
    ring_settings = SETTINGS["topology/ring"]
    assert ring_settings.__name__ == "RingSettings" and issubclass(ring_settings, Star.settings_class)
    assert (SCHEMA["topology/ring"]["name"].default, SCHEMA["topology/ring"]["_target_"].default) == (
        "ring", "ring.Ring")
    assert list(SCHEMA["topology/ring"]) == ["_target_", "name", "sync_every", "sync_unit", "round_rows",
                                             "ramp_from", "laps"]
    # Its rank rule, before any rank starts.
    with pytest.raises(ConfigError, match="^topology=ring needs at least 3 ranks, but the job has 2"):
        make_plan(cfg, 2)
    ring = make_plan(cfg, 3).topology_cls
    assert ring.__module__ == "ring" and issubclass(ring, Star)
    settings = ring(cfg.topology).cfg
    assert isinstance(settings, ring.settings_class) and (settings.laps, settings.sync_every) == (5, 128)
    # Planned: the planner lists it and asks its pace model.
    assert "ring" in topology_names()
    planned = predict(ring, 4, probe(), cfg)
    assert planned.topology == "ring" and planned.refused is None and planned.env_steps_per_s > 0

    # Run as a user runs it: mpiexec, every rank finding the plugin through the environment.
    job = run_job(3, RUN, tmp_path / "run", env={PLUGIN_PATH: str(PLUGINS)})
    assert job.returncode == 0, job.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["topology"], summary["world_size"]) == ("ring", 3) and summary["env_steps"] >= 768
    assert summary["updates"] > 0

    # Reported: its row, and the section its class adds.
    build_report([tmp_path / "run"], out=tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Ring\n\n1 run(s) of the ring, laps [5]." in text
    assert "| cartpole | dqn | ring | 3 | 1 |" in text  # its row in the results table


#: a plugin topology written for an older drlmpi: its options a dict, read by key ...
OLD_OPTIONS = """
from drlmpi.config.options import Option
from drlmpi.topologies.star import Star


class Old(Star):
    name = "old"
    options = {"laps": Option("int", "rounds a lap lasts", 3, low=1)}
"""
#: ... or made with the helpers that declared them then (gone: the settings classes replace them)
OLD_HELPERS = """
from drlmpi.topologies.core.base import sync_options
from drlmpi.topologies.star import Star


class Old(Star):
    name = "old"
    options = sync_options(128, "experience each simulator collects per round")
"""
NEW_WAY = (r"declare them as a frozen dataclass of drlmpi\.config\.scopes\.TopologySettings and name it "
           r"settings_class \(docs/topologies\.md, 'Writing a topology'\)$")


@pytest.mark.parametrize(("source", "said"), [
    (OLD_OPTIONS, r"^topology class old_plugin\.Old: it declares its options as a dict \(options = "
                  r"\{\.\.\.\}\), which drlmpi no longer reads: " + NEW_WAY),
    (OLD_HELPERS, r"^topology class old_plugin\.Old cannot be imported: cannot import name 'sync_options' "
                  r"from 'drlmpi\.topologies\.core\.base' .* \(written for an older drlmpi\? "
                  r"docs/topologies\.md, 'Writing a topology'\)$"),
])
def test_a_plugin_declaring_its_options_the_old_way_is_refused_in_one_line(monkeypatch, tmp_path, source,
                                                                           said):
    """A plugin written for an older drlmpi (``options = {...}``, its config read by key) is refused
    before anything is composed or any rank starts, with where the way to declare them now is; the
    registry registers nothing of it."""
    (tmp_path / "topology").mkdir()
    (tmp_path / "old_plugin.py").write_text(source)
    (tmp_path / "topology" / "old.yaml").write_text(
        "defaults:\n  - /schema/topology/old@_here_\n  - _self_\n_target_: old_plugin.Old\n")
    monkeypatch.setenv(PLUGIN_PATH, str(tmp_path))
    try:
        with pytest.raises(ConfigError, match=said):
            register()
        assert "topology/old" not in SCHEMA and "topology/old" not in SETTINGS
    finally:
        sys.modules.pop("old_plugin", None)
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))


def test_a_plugin_directory_that_does_not_exist_is_refused_in_one_line(monkeypatch, tmp_path, capsys):
    """Before any rank starts, for a run and for --help alike (exit code 2, no traceback)."""
    from drlmpi.run.arguments import check_command_line
    from drlmpi.run.reference import print_help

    missing = tmp_path / "nowhere"
    monkeypatch.setenv(PLUGIN_PATH, f"{PLUGINS}:{missing}")
    said = f"{PLUGIN_PATH} names {missing}, which is not a directory"
    with pytest.raises(ConfigError, match=f"^{said}$"):
        check_command_line(["topology=star"])
    with pytest.raises(SystemExit) as ended:
        print_help()
    assert ended.value.code == 2 and capsys.readouterr().err == f"drlmpi: error: {said}\n"


@pytest.mark.parametrize("old", ["base", "context", "pace", "registry", "reports", "rounds", "data_parallel",
                                 "data_parallel.backend", "async_learner", "async_simulator", "central_wire"])
def test_a_plugin_written_for_the_old_layout_still_imports(old):
    """The modules that moved into topologies/core/ or into a topology's package keep their old
    names for plugins written before (``from drlmpi.topologies.base import Topology``): the old
    name is the moved module itself - its classes the registry checks against, one module object
    (a patch of one is a patch of the other) - and says where it is now."""
    import importlib

    from drlmpi.topologies import moved_to

    new = moved_to(f"drlmpi.topologies.{old}")
    sys.modules.pop(f"drlmpi.topologies.{old}", None)  # imported afresh: the warning is raised again
    with pytest.warns(DeprecationWarning, match=rf"^drlmpi\.topologies\.{old} is {new} now$"):
        module = importlib.import_module(f"drlmpi.topologies.{old}")
    assert module is importlib.import_module(new) and module.__spec__.name == new == module.__name__
    assert moved_to("drlmpi.topologies.star") is None


def test_the_old_base_gives_the_topology_class_plugins_subclass():
    from drlmpi.topologies.core.base import Topology

    sys.modules.pop("drlmpi.topologies.base", None)
    with pytest.warns(DeprecationWarning):
        from drlmpi.topologies.base import Topology as Old  # noqa: F401 (the old name)
    assert Old is Topology and issubclass(Star, Old)
