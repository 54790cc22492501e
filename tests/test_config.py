"""Config composition (Hydra's compose API, no MPI) and start-up validation."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from drlmpi.config.errors import ConfigError
from drlmpi.config.job import JobSettings
from drlmpi.config.schema import defaults, group_config
from drlmpi.run.command_line import _launch_time_resolver
from drlmpi.run.preflight import make_plan
from tests.conftest import CONF

OmegaConf.register_new_resolver("launch_time", _launch_time_resolver, replace=True)


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_default_is_dqn_cartpole_sequential_with_tuned_values():
    cfg = _compose()
    assert (cfg.algo.name, cfg.env.id, cfg.topology.name) == ("dqn", "CartPole-v1", "sequential")
    assert cfg.env.reward_threshold == 475
    assert cfg.run.eval_every == 2000  # from conf/tuned/dqn_cartpole.yaml


def test_tuned_file_follows_the_env_choice():
    cfg = _compose("env=lunarlander", "topology=star")
    assert cfg.env.id == "LunarLander-v3"
    assert cfg.algo.lr == pytest.approx(6.3e-4)
    assert cfg.run.max_env_steps == 500_000


def test_command_line_overrides_beat_tuned_files():
    cfg = _compose("algo.lr=0.01", "env.id=Acrobot-v1", "topology.sync_every=7", "seed=3")
    assert cfg.algo.lr == 0.01 and cfg.env.id == "Acrobot-v1"
    assert cfg.topology.sync_every == 7 and cfg.seed == 3


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@functools.cache
def _pairs() -> dict[tuple[str, str], str | None]:
    """Every algorithm x environment file composed together and checked for one rank: ``None``
    where it would start, else why not (once for both groups' tests below)."""
    verdicts = {}
    for algo in _options("algo"):
        for env in _options("env"):
            try:
                make_plan(_compose(f"algo={algo}", f"env={env}"), world_size=1)
                verdicts[(algo, env)] = None
            except ConfigError as exc:
                verdicts[(algo, env)] = str(exc)
    return verdicts


@pytest.mark.parametrize("group", ["algo", "env", "topology"])
def test_every_option_file_composes_and_validates(group):
    """Every YAML file of every group (found by glob, so a new one is covered) composes, names
    itself, and passes start-up validation with a fitting partner and world size."""
    options = _options(group)
    assert len(options) >= 3
    for option in options:
        cfg = _compose(f"{group}={option}")
        assert cfg[group].name == option
        if group == "topology":
            assert make_plan(cfg, world_size=cfg_ranks(cfg)).topology_cls.name == option
            continue
        # At least one algorithm x environment pair with it runs; the others are refused cleanly.
        mine = {pair: why for pair, why in _pairs().items() if pair[0 if group == "algo" else 1] == option}
        assert len(mine) == len(_options("env" if group == "algo" else "algo"))
        assert all("needs" in why for why in mine.values() if why is not None), mine
        assert any(why is None for why in mine.values()), f"{group}={option} runs with no partner"


def cfg_ranks(cfg) -> int:
    from drlmpi.run.preflight import resolve_classes

    _, topology_cls = resolve_classes(cfg)
    return topology_cls.fixed_world_size() or topology_cls.smallest_world(cfg.topology)


def _tuned_values(path):
    """A tuned file's values, with those of the shared files its defaults list includes
    (``atari/ppo``: ``conf/tuned/atari/ppo.yaml``) merged under its own."""
    node = OmegaConf.load(path)
    merged = OmegaConf.create()
    for included in node.get("defaults", []):
        merged = OmegaConf.merge(merged, _tuned_values(CONF / "tuned" / f"{included}.yaml"))
    return OmegaConf.merge(merged, {k: v for k, v in node.items() if k != "defaults"})


@pytest.mark.parametrize("pair", _options("tuned"))
def test_every_tuned_file_applies_to_its_pair(pair, monkeypatch):
    # The Atari DQN replay (5.6 GB) must not depend on this machine's free memory here; the
    # memory refusal has its own tests.
    monkeypatch.setattr("drlmpi.algos.configured.host_available_bytes", lambda: 64 * 2**30)
    algo, env = pair.split("_", 1)
    cfg = _compose(f"algo={algo}", f"env={env}")
    tuned = _tuned_values(CONF / "tuned" / f"{pair}.yaml")
    base = {"algo": group_config("algo", algo),
            "env": group_config("env", env),
            "run": OmegaConf.create(defaults("run")),
            "topology": group_config("topology", "sequential")}
    assert set(tuned) <= set(base), f"{pair}: unknown sections {set(tuned) - set(base)}"
    for section in tuned:
        for key, value in tuned[section].items():
            # A key the option's own file does not define would be silently ignored (a typo).
            assert key in base[section], f"{pair}: {section}.{key} is not an option of {section}"
            assert cfg[section][key] == value, f"{pair}: {section}.{key}"
    make_plan(cfg, world_size=1)


def test_validate_accepts_and_refuses():
    plan = make_plan(_compose(), world_size=1)
    assert plan.spec.n_actions == 2 and plan.topology_cls.name == "sequential"
    with pytest.raises(ConfigError, match="topology=p2p needs exactly 2 ranks, but the job has 4"):
        make_plan(_compose("topology=p2p"), world_size=4)
    with pytest.raises(ConfigError, match="algo=dqn needs a discrete action space"):
        make_plan(_compose("env=pendulum"), world_size=1)
    with pytest.raises(ConfigError, match="world_size=3 was asked for but this job has 1"):
        make_plan(_compose("world_size=3"), world_size=1)
    with pytest.raises(ConfigError, match="env.num_envs must be >= 1"):
        make_plan(_compose("env.num_envs=0"), world_size=1)
    with pytest.raises(ConfigError, match="device must be cpu, cuda, cuda:N or auto, got 'gpu'"):
        make_plan(_compose("device=gpu"), world_size=1)
    with pytest.raises(ConfigError, match="cannot be imported"):
        make_plan(_compose("topology._target_=drlmpi.topologies.nope.Nope"), world_size=1)


def test_a_key_no_option_of_its_group_knows_is_refused_in_one_line():
    """A typo added with ``+``/``++`` (which Hydra lets through) stops the job before any rank
    starts, naming the nearest option; a key of another topology, as a sweep's ``++`` puts on
    every topology of the sweep, is accepted."""
    with pytest.raises(ConfigError, match=r"^topology\.sync_evry is not an option of any topology "
                                          r"\(did you mean topology\.sync_every\?\), got 64$"):
        make_plan(_compose("++topology.sync_evry=64"), world_size=1)
    with pytest.raises(ConfigError, match=r"^run\.max_env_step is not an option of run \(did you mean "
                                          r"run\.max_env_steps\?\), got 100$"):
        make_plan(_compose("+run.max_env_step=100"), world_size=1)
    with pytest.raises(ConfigError, match=r"^env\.sim_cost is not an option of env \(did you mean "
                                          r"env\.sim_cost_ms"):
        make_plan(_compose("+env.sim_cost=1"), world_size=1)
    with pytest.raises(ConfigError, match=r"^algo\.zzz is not an option of any algo, got 1$"):
        make_plan(_compose("+algo.zzz=1"), world_size=1)
    plan = make_plan(_compose("++topology.utd_mode=free", "++algo.policy_delay=2"), world_size=1)
    assert plan.topology_cls.name == "sequential"  # async's and TD3's keys: ignored, and said so
    assert [w for w in plan.warnings if "ignored" in w] == [
        "algo.policy_delay is not an option of algo=dqn: ignored",
        "topology.utd_mode is not an option of topology=sequential: ignored"]
    assert not [w for w in make_plan(_compose(), world_size=1).warnings if "ignored" in w]


def test_the_plan_resolves_once_and_freezes_a_copy_of_the_config():
    """``device=auto`` is resolved in the plan, never written back; what flows down is the job's
    typed settings, frozen, so nothing below the plan can change what was checked."""
    import torch

    cfg = _compose("device=auto", "topology=groups", "topology.learners=2")
    plan = make_plan(cfg, world_size=4)
    assert plan.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert cfg.device == "auto" and plan.cfg.device == "auto"
    assert plan.with_world(2).world_size == 2 and plan.world_size == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.cfg.algo.lr = 1.0
    assert isinstance(plan.cfg, JobSettings) and isinstance(plan.cfg.algo.lr, float)
    cfg.algo.lr = 1.0  # the caller's own config stays its own
    assert plan.cfg.algo.lr != 1.0
