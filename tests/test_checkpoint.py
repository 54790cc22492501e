"""A learner's training state (networks, targets, optimizers, counters, random states, replay or
rollouts) saved with torch.save and loaded with weights_only=True continues exactly."""

from __future__ import annotations

import pytest
import torch

from drlmpi.algos.dqn import DQN
from drlmpi.algos.ppo import PPO
from drlmpi.algos.td3 import TD3
from tests.test_device_learner import cfg_for, random_rows


def _setup(name, cartpole, pendulum):
    if name == "dqn":
        return DQN, cartpole, cfg_for("dqn", target_update_every=3)
    if name == "td3":
        return TD3, pendulum, cfg_for("td3", policy_delay=2, tau=0.1)
    return PPO, cartpole, cfg_for("ppo", rollout_steps=48, batch_size=16, epochs=2)


def _feed(algo, seed):
    rows = random_rows(algo, 40, seed=seed)
    if "log_prob" in algo.layout.slices:
        rows[:, algo.layout.slices["log_prob"]] = -0.69
    algo.observe(rows)
    return algo.updates_due(len(rows))


@pytest.mark.parametrize("name", ["dqn", "td3", "ppo"])
@pytest.mark.parametrize("with_storage", [True, False], ids=["with_storage", "networks_only"])
def test_training_state_round_trip_continues_exactly(name, with_storage, cartpole, pendulum, tmp_path):
    cls, spec, cfg = _setup(name, cartpole, pendulum)
    a = cls(spec, cfg, seed=1)
    for i in range(3):
        a.run_updates(_feed(a, seed=i))
    path = tmp_path / "state.pt"
    torch.save(a.training_state(with_storage=with_storage), path)
    saved_updates = a.updates

    def resumed(seed: int):  # another seed: everything must come from the file
        algo = cls(spec, cfg, seed=seed)
        algo.load_training_state(torch.load(path, weights_only=True))  # torch's RNG too
        return algo

    def go_on(algo):
        metrics = [dict(algo.run_updates(_feed(algo, seed=i))) for i in range(3, 6)]
        return algo.state_dict(), metrics

    # With storage, the original learner goes on (nothing touched the random states since the
    # save); without, a learner resumed from the same file (its store equally empty) does.
    sa, ma = go_on(a if with_storage else resumed(7))
    b = resumed(99)
    assert b.updates == saved_updates > 0
    sb, mb = go_on(b)
    assert len(ma) == len(mb)
    for metrics_a, metrics_b in zip(ma, mb):  # one dict of floats per update batch
        assert metrics_a == pytest.approx(metrics_b, nan_ok=True)
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def test_optimizer_state_is_part_of_it(cartpole, tmp_path):
    """Loading only the networks (a policy.pt) would not continue the same: Adam's moments."""
    cls, spec, cfg = _setup("dqn", cartpole, None)
    a = cls(spec, cfg, seed=1)
    a.run_updates(_feed(a, 0))
    state = a.training_state()
    assert state["optimizers"]["q"]["state"] and state["updates"] == a.updates > 0
    assert isinstance(state["rng"]["numpy"], dict) and state["storage"]["replay"]["size"] == 40


def test_publishing_a_generation_removes_every_older_one(tmp_path):
    from drlmpi.outputs.checkpoint import checkpoint_dir, file_generation, remove_older_generations

    directory = checkpoint_dir(tmp_path)
    directory.mkdir(parents=True)
    names = ["rank0.g3.pt", "rank1.g3.pt", "rank0.g4.pt", "rank0.g5.pt", "rank0.g6.pt", "meta.json",
             "rank0.g6.pt.tmp"]
    for name in names:
        (directory / name).write_bytes(b"x")
    remove_older_generations(tmp_path, 5)  # g3 survived a killed job's interrupted deletion
    assert sorted(p.name for p in directory.iterdir()) == ["meta.json", "rank0.g5.pt", "rank0.g6.pt",
                                                          "rank0.g6.pt.tmp"]
    assert file_generation(directory / "rank12.g40.pt") == 40
    assert file_generation(directory / "rank0.g6.pt.tmp") is None
