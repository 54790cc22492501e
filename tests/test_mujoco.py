"""MuJoCo continuous control: TD3 on HalfCheetah-v5 and PPO on Hopper-v5 (their tuned configs
with small budgets and small networks), each under sequential and star, end cleanly with what
crossed the wire; a MuJoCo id without MuJoCo installed is refused in one line naming the extra.

The learning check (TD3 HalfCheetah, 1M steps, device learner) is in docs/results.md and
docs/results/h200host_td3_halfcheetah_1M/.
"""

from __future__ import annotations

import builtins

import pytest
from omegaconf import OmegaConf

from drlmpi.config.errors import ConfigError
from drlmpi.envs.families.mujoco import is_mujoco
from drlmpi.envs.make import make_env
from drlmpi.run.preflight import check_env_options
from tests.shared_runs import declare

SMALL = ["algo.hidden=[32,32]", "run.stop_on_solve=false", "run.eval_every=512", "run.eval_episodes=1",
         "run.progress_every_s=0"]
TD3 = ["algo=td3", "env=halfcheetah", "algo.batch_size=32", "algo.learning_starts=256",
       "algo.buffer_size=4096", "run.max_env_steps=768", *SMALL]
PPO = ["algo=ppo", "env=hopper", "algo.rollout_steps=256", "algo.epochs=2", "run.max_env_steps=512", *SMALL]
RUNS = {
    "td3-halfcheetah-sequential": declare("td3-halfcheetah-sequential", 1, ["topology=sequential", *TD3]),
    "td3-halfcheetah-star": declare("td3-halfcheetah-star", 3, ["topology=star", *TD3]),
    "ppo-hopper-sequential": declare("ppo-hopper-sequential", 1, ["topology=sequential", *PPO]),
    "ppo-hopper-star": declare("ppo-hopper-star", 3, ["topology=star", *PPO]),
}
ENV_IDS = {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5"}
OBS_ACT = {"HalfCheetah-v5": (17, 6), "Hopper-v5": (11, 3)}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_small_mujoco_run_ends_cleanly(runs, name):
    algo, env, topology = name.split("-")
    summary = runs.get(RUNS[name]).summary()
    budget = 768 if algo == "td3" else 512
    assert summary["env_id"] == ENV_IDS[env] and summary["algo"] == algo and summary["topology"] == topology
    assert summary["stop_reason"] == "max_env_steps" and budget <= summary["env_steps"] < 2 * budget
    assert summary["updates"] > 0 and summary["evaluations"] >= 1  # a 1000-step greedy episode
    obs, act = OBS_ACT[summary["env_id"]]
    assert summary["policy_param_bytes"] > 4 * (obs * 32 + 32 * act)  # the env's spaces sized the nets
    if topology == "star":  # both simulators sent experience rows of this env's width
        row = summary["experience_row_bytes"]
        simulators = [r for r in summary["per_rank"] if r["role"] == "simulator"]
        assert [r["rank"] for r in simulators] == [1, 2]
        for rank in simulators:
            calls, nbytes = rank["sent"]["experience"]
            assert calls > 0 and nbytes == rank["env_steps"] * row > 0


def test_mujoco_ids_are_recognised():
    assert all(is_mujoco(env_id) for env_id in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5"))
    assert not any(is_mujoco(env_id) for env_id in ("Pendulum-v1", "ALE/Pong-v5", "No-Such-v0"))


def test_a_mujoco_id_without_mujoco_is_refused_naming_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_mujoco(name, *args, **kwargs):
        if name == "mujoco" or name.startswith("mujoco."):
            raise ImportError("No module named 'mujoco'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mujoco)
    with pytest.raises(ConfigError) as info:
        check_env_options(OmegaConf.create({"id": "HalfCheetah-v5"}))
    message = str(info.value)
    assert "\n" not in message and "HalfCheetah-v5" in message and "pip install 'drlmpi[mujoco]'" in message
    check_env_options(OmegaConf.create({"id": "Pendulum-v1"}))  # other ids do not need it


def test_mujoco_warnings_leave_no_log_file_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="MuJoCo: compiler attribute"):
        make_env("HalfCheetah-v5").close()  # its model uses an attribute MuJoCo 4 deprecates
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
