"""The configuration schema (drlmpi/config/schema.py): every option typed, ranged and documented, and
every refusal one line - on the command line, after composition, in sweeps. (What a refused
command prints and its exit code: tests/test_refusals.py.)"""

from __future__ import annotations

import dataclasses

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from drlmpi.config.checks import check_config, check_override
from drlmpi.config.errors import ConfigError
from drlmpi.config.options import REQUIRED
from drlmpi.config.overrides import parse, values
from drlmpi.config.schema import SCHEMA, defaults, group_config
from drlmpi.config.schema import node as schema_node
from drlmpi.envs.families import family_of
from drlmpi.run.arguments import check_writable
from drlmpi.run.command_line import _launch_time_resolver, main
from drlmpi.run.preflight import make_plan
from drlmpi.run.reference import (
    MOST_USED,
    WIDTH,
    generated_block,
    reference_table,
    shown_default,
    topology_names,
    topology_table,
)
from drlmpi.topologies.core.registry import built_in
from tests.conftest import CONF, REPO

#: drlmpi's own topologies, from the registry (a new one is tested here with no edit)
TOPOLOGIES = list(built_in())

OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True)


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_yaml_files_start_from_the_schema_and_keep_only_what_differs():
    root = OmegaConf.load(CONF / "config.yaml")
    assert root.defaults[0] == "schema/root@_here_"
    assert not set(root) - {"defaults", "hydra"}, "root and run.* defaults belong in the schema"
    for group in ("algo", "env", "topology"):
        for path in sorted((CONF / group).glob("*.yaml")):
            node = OmegaConf.load(path)
            # an env file starts from its id's family's node: every env option and the family's own
            scope = f"env/{family_of(node.id).name}" if group == "env" else f"{group}/{path.stem}"
            assert list(node.defaults) == [f"/schema/{scope}@_here_", "_self_"], path
            base = OmegaConf.to_container(schema_node(scope))
            own = {k: node[k] for k in node if k != "defaults"}
            if group == "topology":  # the file names its class, whose options make the scope
                assert own.pop("_target_") == base["_target_"], path
            assert set(own) <= set(base), (path, set(own) - set(base))
            for key, value in own.items():  # a value equal to the schema's default is noise
                assert value != base[key], f"{path.name}: {key} repeats its default"
    assert all(option.doc and "\n" not in option.doc for s in SCHEMA.values() for option in s.values())


def test_tuned_files_keep_only_what_differs_from_the_defaults():
    tuned = sorted((CONF / "tuned").glob("*.yaml")) + sorted((CONF / "tuned" / "atari").glob("*.yaml"))
    assert len(tuned) > 8
    for path in tuned:
        node = OmegaConf.to_container(OmegaConf.load(path))
        algo = path.stem if path.parent.name == "atari" else path.stem.split("_")[0]
        for section, scope in (("algo", f"algo/{algo}"), ("run", "run")):
            for key, value in (node.get(section) or {}).items():
                default = defaults(scope).get(key)
                assert value != default, f"{path.name}: {section}.{key} repeats its default {default}"


def test_every_default_passes_its_own_check():
    for scope, options in SCHEMA.items():
        for key, option in options.items():
            if option.default != REQUIRED:
                assert option.problem(defaults(scope)[key]) is None, (scope, key, option.default)


@pytest.mark.parametrize("algo", ["dqn", "td3", "ppo", "random"])
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_composing_a_group_gives_the_schema_defaults(algo, topology):
    cfg = _compose(f"algo={algo}", "env=pendulum", f"topology={topology}", "~tuned")  # untuned
    assert OmegaConf.to_container(cfg.algo) == defaults(f"algo/{algo}")
    assert OmegaConf.to_container(cfg.topology) == defaults(f"topology/{topology}")
    assert OmegaConf.to_container(cfg.run) == defaults("run")
    assert {k: cfg[k] for k in defaults("")} == defaults("")
    env = OmegaConf.to_container(cfg.env)
    assert env == {**defaults("env"), "name": "pendulum", "id": "Pendulum-v1", "reward_threshold": -200}
    assert OmegaConf.to_container(group_config("algo", algo)) == defaults(f"algo/{algo}")


def test_a_schema_default_is_what_a_run_gets(monkeypatch):
    """The schema is the source: changing a default there changes the composed config."""
    from hydra.core.global_hydra import GlobalHydra

    from drlmpi.config import schema

    changed = dict(SCHEMA["algo/dqn"], lr=dataclasses.replace(SCHEMA["algo/dqn"]["lr"], default=0.125))
    monkeypatch.setitem(SCHEMA, "algo/dqn", changed)
    schema.register()
    try:
        GlobalHydra.instance().clear()
        assert _compose("algo=dqn", "~tuned").algo.lr == 0.125
    finally:
        monkeypatch.undo()
        schema.register()
    assert _compose("algo=dqn", "~tuned").algo.lr == 2.3e-3


def test_an_option_without_a_default_must_be_set():
    cfg = _compose()
    cfg.env.id = "???"
    with pytest.raises(ConfigError, match=r"^env.id must be set \(it has no default\), got \?\?\?$"):
        check_config(cfg)


@pytest.mark.parametrize("algo,env", [("dqn", "cartpole"), ("dqn", "lunarlander"), ("td3", "pendulum"),
                                      ("ppo", "cartpole"), ("ppo", "lunarlander"), ("ppo", "pendulum"),
                                      ("random", "cartpole")])
def test_every_shipped_default_and_tuned_value_passes(algo, env):
    for topology in TOPOLOGIES:
        check_config(_compose(f"algo={algo}", f"env={env}", f"topology={topology}"))


@pytest.mark.parametrize("override,message", [
    ("algo.lr=abc", "algo.lr must be a number, got 'abc'"),
    ("algo.gamma=1.5", "algo.gamma must be in [0, 1], got 1.5"),
    ("algo.batch_size=0", "algo.batch_size must be >= 1, got 0"),
    ("algo.batch_size=64.5", "algo.batch_size must be an integer, got 64.5"),
    ("algo.tau=0", "algo.tau must be in (0, 1], got 0"),
    ("algo.hidden=[64,0]", "algo.hidden must be a non-empty list of integers >= 1, got [64, 0]"),
    ("algo.capture=yes", "algo.capture must be one of auto, fused, graph, compile, off, got 'yes'"),
    ("algo.double_q=maybe", "algo.double_q must be true or false, got 'maybe'"),
    ("env.sim_cost_ms=-1", "env.sim_cost_ms must be >= 0, got -1"),
    ("run.eval_every=null", "run.eval_every must be set (null is not allowed), got None"),
    ("run.idle_busy_share=2", "run.idle_busy_share must be in [0, 1], got 2"),
    ("run.max_train_seconds=-5", "run.max_train_seconds must be > 0, got -5"),
    ("topology.sync_unit=weeks", "topology.sync_unit must be one of steps, episodes, got 'weeks'"),
    ("seed=-1", "seed must be >= 0, got -1"),
    ("run.eval_every=100,0", "run.eval_every must be >= 1, got 0"),  # every value of a sweep
])
def test_a_bad_override_is_refused_before_anything_starts(override, message):
    with pytest.raises(ConfigError) as info:
        check_override(override, {"algo": "dqn", "topology": "star"})
    assert str(info.value) == message


@pytest.mark.parametrize("override,scopes,message", [
    ("topology.publish_every=0", {"topology": "star"},
     "topology.publish_every is not an option of topology=star (async, groups take it), got 0"),
    ("algo.updates_per_graph=8", {"algo": ("random", "dqn")},
     "algo.updates_per_graph is not an option of algo=random (dqn, td3 take it): "
     "++algo.updates_per_graph=... sets it for the jobs that take it, the others ignore it, got 8"),
    ("algo.clip_range=0.1,0.2", {"algo": ("dqn", "ppo")},
     "algo.clip_range is not an option of algo=dqn (ppo takes it): ++algo.clip_range=... sets it "
     "for the jobs that take it, the others ignore it, got [0.1, 0.2]"),
    ("run.max_env_step=5", {}, "run.max_env_step is not an option of run (did you mean "
                               "run.max_env_steps?), got 5"),
    ("algo.learning_start=10", {"algo": "dqn"}, "algo.learning_start is not an option of any algo "
                                                "(did you mean algo.learning_starts?), got 10"),
    ("algo.lr=-1", {"algo": ("dqn", "ppo")}, "algo.lr must be > 0, got -1"),  # each sweep's scope
    # an environment family's option: only its env files' nodes have it
    ("env.num_threads=2", {"env": ("pong", "halfcheetah")},
     "env.num_threads is an option of the atari family (env files: breakout, pong, tetris), not of "
     "env=halfcheetah (mujoco family), got 2"),
    ("env.num_threads=0", {"env": "breakout"}, "env.num_threads must be >= 1, got 0"),
    ("env.num_thread=2", {"env": None}, "env.num_thread is not an option of env (did you mean "
                                        "env.num_threads?), got 2"),
])
def test_a_plain_key_the_chosen_scope_lacks_is_refused_in_one_line(override, scopes, message):
    """Hydra refuses ``key=value`` for a key its config lacks in five lines; drlmpi does first,
    in one, naming who takes the key (in a sweep over several algorithms, ``++`` adds it)."""
    with pytest.raises(ConfigError) as info:
        check_override(override, {"algo": "dqn", "topology": "sequential", **scopes})
    assert str(info.value) == message


def test_overrides_the_schema_leaves_to_hydra_pass():
    scopes = {"algo": "dqn", "topology": "star"}
    for ok in ("algo.lr=1e-3", "algo.hidden=[32,32]", "run.max_env_steps=null", "+foo=bar",
               "hydra.run.dir=x", "algo.lr=${oc.env:LR}", "algo.lr=range(1,3)", "algo=ppo",
               "++topology.publish_every=0", "algo._target_=my.Algo", "world_size_by_topology.star=8"):
        check_override(ok, scopes)
    check_override("algo.clip_range=-1", {"algo": None, "topology": None})  # scope unknown yet
    for env in ("breakout", ("tetris", "pong"), None):  # an atari file, or not known yet (a preset)
        check_override("env.num_threads=4", {**scopes, "env": env})
    check_override("++env.num_threads=4", {**scopes, "env": "cartpole"})  # left to the run plan
    (lr, seven, yes, sweep, hidden) = parse(["a=1e-3", "b='7'", "c=True", "d=1,[2,3]", "e=[32,32]"])
    assert values(lr) == [1e-3] and values(seven) == ["7"] and values(yes) == [True]
    assert values(sweep) == [1, [2, 3]] and values(hidden) == [[32, 32]]
    assert values(parse(["a=range(1,3)"])[0]) is None and values(parse(["~tuned"])[0]) is None


def test_composed_values_are_checked_too():
    """A value from a tuned file or preset never went through the command line."""
    cfg = _compose("algo=ppo", "topology=async")
    cfg.algo.gae_lambda = 1.2
    with pytest.raises(ConfigError, match=r"^algo.gae_lambda must be in \[0, 1\], got 1.2$"):
        make_plan(cfg, world_size=3)
    cfg = _compose()
    cfg.run.max_env_steps = None
    with pytest.raises(ConfigError, match="set at least one budget"):
        check_config(cfg)


def test_unwritable_output_directory(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ConfigError, match=r"^hydra.run.dir is not a writable directory \(Not a directory\)"):
        check_writable("hydra.run.dir", str(afile / "run"))
    check_writable("hydra.run.dir", str(tmp_path / "a" / "b"))
    assert not (tmp_path / "a").exists()  # the check leaves nothing behind


def _help(capsys, flag: str) -> list[str]:
    main([flag])  # returns before Hydra or MPI start
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("drlmpi - ") and not any("powered by Hydra" in line for line in lines)
    assert max(len(line) for line in lines) <= WIDTH, max(lines, key=len)
    text = "\n".join(lines)
    for command in ("mpiexec -n N", " -m topology=", "resume=RUN_DIR", "drlmpi.report", "--cfg job"):
        assert command in text, command
    groups = " ".join(text.split("config groups", 1)[1].split("\n\n", 1)[0].split())
    for group in ("algo", "env", "topology", "experiment"):  # every choice of every group, from conf/
        names = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        key = "+experiment" if group == "experiment" else group
        assert f" {key} {', '.join(names)}" in groups, group
    folders = sorted(f"{p.name}/" for p in (CONF / "experiment").iterdir() if p.is_dir())
    assert f"their parts: {', '.join(folders)}" in groups  # the presets' parts, by folder
    assert " hydra/sweeper basic, drlmpi, optuna" in groups and " hydra/launcher basic, mpi," in groups
    return lines


def test_help_fits_a_screen_and_says_where_the_rest_is(capsys):
    lines = _help(capsys, "--help")
    assert len(lines) < 60
    assert any("--help-all" in line for line in lines)
    assert any("docs/configuration.md" in line for line in lines)
    for key, _ in MOST_USED:  # each with its schema default where every scope has the same one
        assert any(line.startswith(f"  {key}") for line in lines), key
    assert "  seed=0 " in "\n".join(lines) and "  run.max_env_steps=100000 " in "\n".join(lines)


def test_help_all_lists_every_option_with_its_default(capsys):
    lines = _help(capsys, "--help-all")
    for scope, options in SCHEMA.items():
        prefix = scope.split("/")[0] + "." if scope else ""
        for key, option in options.items():
            if key not in ("_target_", "name"):  # each option with its default and allowed values
                assert any(line.startswith(f"  {prefix}{key}={shown_default(option)}  (")
                           for line in lines), (scope, key)


def test_the_documented_reference_is_the_schema():
    text = (REPO / "docs" / "configuration.md").read_text()
    assert generated_block(text, "schema") == reference_table(), \
        "regenerate: python -m drlmpi.run.reference --write"


def test_the_documented_topologies_are_the_registrys():
    """docs/configuration.md's table of the built-in topologies and the README's list of them are
    the registry's (conf/topology/, in report order): a new topology's YAML file and class are all
    it takes. A broken copy fails it: a topology missing from the table, the README naming them in
    another order."""
    assert TOPOLOGIES[:3] == ["sequential", "p2p", "star"] and {"groups", "central"} <= set(TOPOLOGIES)
    table = generated_block((REPO / "docs" / "configuration.md").read_text(), "topologies")
    assert table == topology_table(), "regenerate: python -m drlmpi.run.reference --write"
    assert [line.split("`")[1] for line in table.splitlines()[2:]] == TOPOLOGIES
    readme = " ".join((REPO / "README.md").read_text().split())
    assert topology_names() in readme, f"the README names the topologies as {topology_names()}"


def test_numbers_at_the_bounds():
    gamma = SCHEMA["algo/dqn"]["gamma"]
    tau = SCHEMA["algo/dqn"]["tau"]
    for value, ok in ((0, True), (1, True), (-1e-9, False), (1.0000001, False)):
        assert (gamma.problem(value) is None) == ok, value
    assert tau.problem(1) is None and tau.problem(0) is not None and tau.problem(float("nan")) is not None
    assert SCHEMA["algo/dqn"]["batch_size"].problem(True) == "must be an integer"
