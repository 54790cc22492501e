"""``algo.capture=fused``'s gradient on the CPU: the functional gradient over the flat parameter
buffer (:class:`~drlmpi.algos.gradients.LossGradient`) run uncompiled - the same function inductor
compiles on a GPU - against the eager backward, for DQN, TD3 and PPO from the same state and batch.

tests/test_capture.py checks the compiled and captured updates on a GPU.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from drlmpi.algos.dqn import DQN
from drlmpi.algos.gradients import LossGradient
from drlmpi.algos.ppo import PPO
from drlmpi.algos.td3 import TD3
from drlmpi.device.capture import resolve_capture
from drlmpi.device.compiled import Compiled
from tests.test_device_learner import cfg_for, random_rows


def uncompiled(fn, **_):
    return fn


def batch_of(algo):
    algo.prepare_capture()
    return {k: v.clone() for k, v in algo.replay.sample(algo.batch_size).items()}


def gradient_pair(group, loss_fn, inputs_eager, inputs_fused, pair_with=None):
    """The flat gradient and metrics of ``loss_fn`` taken eagerly, then functionally (over
    ``group``'s buffer stacked with ``pair_with``, when given)."""
    gradient = LossGradient(group, loss_fn, "test", pair_with=pair_with)
    metrics_eager = gradient(*inputs_eager)
    grads_eager = group.flat.grads.clone()
    gradient.fuse(compiler=uncompiled)
    group.flat.grads.fill_(123.0)  # the functional gradient must overwrite, not accumulate
    metrics_fused = gradient(*inputs_fused)
    assert gradient.fused and gradient.program.failure is None
    return grads_eager, group.flat.grads.clone(), metrics_eager, metrics_fused


@pytest.mark.parametrize("double_q,target_forward", [(True, "paired"), (False, "paired"),
                                                     (True, "separate"), (False, "separate")])
def test_dqn_functional_gradient_equals_eager_backward(cartpole, double_q, target_forward):
    algo = DQN(cartpole, cfg_for("dqn", double_q=double_q, target_forward=target_forward), seed=3)
    assert algo.paired == (target_forward == "paired")  # the MLP Q-network pairs with its target
    algo.observe(random_rows(algo, 300))
    with torch.no_grad():  # a target network apart from the online one
        algo._target_flat.mul_(0.5)
    b = batch_of(algo)
    inputs = (b["obs"], b["action"], b["reward"], b["next_obs"], b["terminated"])
    pair_with = algo._target_flat if algo.paired else None  # as the algorithm's own gradient
    g_eager, g_fused, m_eager, m_fused = gradient_pair(algo.policy, algo.q_loss, inputs, inputs, pair_with)
    assert g_eager.abs().max() > 0
    assert torch.allclose(g_eager, g_fused, atol=1e-6, rtol=1e-5)
    for a, b_ in zip(m_eager, m_fused):
        assert torch.allclose(a, b_, atol=1e-6)


@pytest.mark.parametrize("layout,target_forward", [("separate", "separate"), ("separate", "paired"),
                                                   ("stacked", "separate"), ("stacked", "paired")])
def test_td3_functional_gradients_equal_eager_backward(pendulum, layout, target_forward):
    algo = TD3(pendulum, cfg_for("td3", twin_critics=layout, target_forward=target_forward), seed=4)
    assert algo.paired == (target_forward == "paired")
    algo.observe(random_rows(algo, 300))
    with torch.no_grad():  # target networks apart from the online ones (a swapped pair shows)
        algo._critic_target_flat.mul_(0.5)
        algo._actor_target_flat.mul_(0.5)
    b = batch_of(algo)
    eps = torch.randn(b["action"].shape)
    critic = algo.groups["critic"]
    inputs = (b["obs"], b["action"], b["reward"], b["next_obs"], b["terminated"], eps)
    g_eager, g_fused, _, _ = gradient_pair(critic, algo.critic_loss, inputs, inputs)
    assert g_eager.abs().max() > 0 and torch.allclose(g_eager, g_fused, atol=1e-6, rtol=1e-5)
    critic.flat.grads.fill_(7.0)
    views = critic.flat.views(critic.flat.params.detach())
    g_eager, g_fused, m_eager, m_fused = gradient_pair(algo.policy, algo.actor_loss, (b["obs"], None),
                                                       (b["obs"], views))
    assert g_eager.abs().max() > 0 and torch.allclose(g_eager, g_fused, atol=1e-6, rtol=1e-5)
    assert torch.allclose(m_eager[0], m_fused[0])
    assert torch.all(critic.flat.grads == 7.0)  # the actor's loss leaves the critic's gradients alone


def test_a_failed_compile_warns_once_and_runs_the_function_uncompiled(cartpole):
    algo = DQN(cartpole, cfg_for("dqn"), seed=3)
    algo.observe(random_rows(algo, 300))
    b = batch_of(algo)
    inputs = (b["obs"], b["action"], b["reward"], b["next_obs"], b["terminated"])

    def broken(fn, **_):
        def run(*args):
            raise RuntimeError("no compiler here\nsecond line")
        return run

    gradient = LossGradient(algo.policy, algo.q_loss, "dqn q")
    gradient.fuse(compiler=broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gradient(*inputs)
        first = algo.policy.flat.grads.clone()
        gradient(*inputs)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "\n" not in messages[0] and "no compiler here" in messages[0]
    assert "dqn q gradient" in messages[0] and not gradient.program.compiled
    assert torch.equal(first, algo.policy.flat.grads)
    LossGradient(algo.policy, algo.q_loss, "eager")(*inputs)
    assert torch.allclose(first, algo.policy.flat.grads, atol=1e-6, rtol=1e-5)


def test_every_compiled_function_has_a_compile_limit_of_its_own():
    """Torch stops compiling a code object after 8 versions, and every ``torch.func.grad`` shares
    one (functorch's wrapper): twelve gradients compiled in one process (a benchmark's rows, an
    in-process sweep) must all run compiled, not the ninth on fall back to running uncompiled.
    Dynamo's tracing with the eager backend counts versions as inductor's would, without its
    minutes of C++ on a CPU (2.5 s here)."""

    def gradient_of(n):
        def loss(*ws):
            return sum((w * w).sum() for w in ws)
        return torch.func.grad(loss)  # its guards differ per n: len(args) == n

    programs = [Compiled(gradient_of(n), f"gradient of {n}",
                         compiler=lambda fn, **kw: torch.compile(fn, backend="eager", **kw))
                for n in range(1, 13)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fall-back warns: fail on it
        grads = [p(*(torch.full((3,), float(n)) for n in range(1, i + 2))) for i, p in enumerate(programs)]
    assert all(p.compiled and p.failure is None for p in programs)
    assert torch.equal(grads[-1], torch.full((3,), 2.0))  # d/dw1 of sum w^2 at w1 = 1


def twins(cls, spec, cfg):
    eager, fused = cls(spec, cfg, seed=2), cls(spec, cfg, seed=2)
    rows = random_rows(eager, 300)
    for algo in (eager, fused):
        algo.observe(rows)
    fused.fuse(compiler=uncompiled)
    return eager, fused


@pytest.mark.parametrize("name", ["dqn_copy_clip", "dqn_polyak", "td3", "td3_stacked", "td3_stacked_paired"])
def test_a_fused_update_learns_what_an_eager_update_learns(name, cartpole, pendulum):
    """Every fused piece at once, uncompiled (the functional gradients, clipping with the Adam
    step on the optimizer's state, the replay's gather, DQN's target copy): the same parameters,
    optimizer state and targets as eager updates, update for update."""
    if name.startswith("td3"):
        layout = "stacked" if name.startswith("td3_stacked") else "separate"
        target_forward = "paired" if name.endswith("paired") else "separate"
        eager, fused = twins(TD3, pendulum, cfg_for("td3", policy_delay=2, tau=0.1, max_grad_norm=1.0,
                                                    twin_critics=layout, target_forward=target_forward))
    elif name == "dqn_polyak":
        eager, fused = twins(DQN, cartpole, cfg_for("dqn", tau=0.2, max_grad_norm=None))
    else:
        eager, fused = twins(DQN, cartpole, cfg_for("dqn", target_update_every=3, max_grad_norm=0.5))
    for step in range(7):
        torch.manual_seed(step)  # TD3's smoothing noise
        m_eager = dict(eager.update())
        torch.manual_seed(step)
        m_fused = dict(fused.update())
        assert m_eager == pytest.approx(m_fused, rel=1e-4, abs=1e-6, nan_ok=True)
    assert all(g.fused for g in fused.gradients) and fused.replay._gather is not None
    assert all(group._fused_step is not None for group in fused.groups.values())
    a, b = eager.state_dict(), fused.state_dict()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-5, rtol=1e-4), key
    for name_, group in eager.groups.items():
        sa = group.optimizer.state_dict()["state"][0]
        sb = fused.groups[name_].optimizer.state_dict()["state"][0]
        assert float(sa["step"]) == float(sb["step"]) == (7 if name_ != "actor" else 3)
        assert torch.allclose(sa["exp_avg_sq"], sb["exp_avg_sq"], atol=1e-8, rtol=1e-4)


@pytest.mark.filterwarnings("ignore:drlmpi. capture=graph failed")  # capturing needs CUDA
@pytest.mark.parametrize("algo_name", ["dqn", "td3"])
def test_warming_up_changes_no_state(algo_name, cartpole, pendulum):
    """A learner compiles its fused update before the training clock starts (Learner's
    constructor): on scratch copies, without a draw from any generator, so the updates that follow
    are those an eager twin makes."""
    cls, spec = (DQN, cartpole) if algo_name == "dqn" else (TD3, pendulum)
    eager, fused = twins(cls, spec, cfg_for(algo_name, max_grad_norm=1.0))
    fused._fused, fused.capture = False, "fused"  # as built on a GPU, before the warm-up
    before = {k: v.clone() for k, v in fused.state_dict().items()}
    sampler, rng = fused.replay.generator.get_state(), fused.rng.bit_generator.state
    torch.manual_seed(11)
    default = torch.get_rng_state()
    fused.warm_up(compiler=uncompiled)
    assert torch.equal(default, torch.get_rng_state())  # TD3's smoothing noise: no draw
    for key, value in fused.state_dict().items():
        assert torch.equal(before[key], value), key
    assert torch.equal(sampler, fused.replay.generator.get_state()) and rng == fused.rng.bit_generator.state
    assert all(not group.optimizer.state for group in fused.groups.values())
    assert fused._fused and fused.replay._gather is not None
    for step in range(4):
        torch.manual_seed(step)
        m_eager = dict(eager.update())
        torch.manual_seed(step)
        assert m_eager == pytest.approx(dict(fused.update()), rel=1e-4, abs=1e-6, nan_ok=True)


def test_fused_is_the_off_policy_default_on_cuda_only():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_capture("auto", cuda, fusable=True) == "fused"
    assert resolve_capture("auto", cuda, fusable=False) == "graph"
    assert resolve_capture("auto", cpu, fusable=True) == "off"
    with pytest.raises(ValueError, match="'fused'"):
        resolve_capture("fused", cuda, fusable=False)  # an update that cannot fuse


def test_the_benchmark_measures_each_target_pass_other_than_the_default():
    """``bench.learner --target-forward``: DQN pairs by default and TD3 does not, so each asks
    for the other rows; PPO has no target network."""
    import argparse

    from drlmpi.bench.learner import target_forwards

    both = argparse.Namespace(target_forward=["paired", "separate"], separate_target=False)
    assert target_forwards(both, "dqn") == ["separate"]
    assert target_forwards(both, "td3") == ["paired"]
    assert target_forwards(both, "ppo") == []
    legacy = argparse.Namespace(target_forward=[], separate_target=True)
    assert target_forwards(legacy, "dqn") == ["separate"] and target_forwards(legacy, "td3") == []


def test_the_benchmark_measures_each_lowered_precision_once():
    """``bench.learner --precision medium high --tf32``: each value once, ``--tf32`` first as
    ``high``; a value the run's schema does not take is refused before any row is measured."""
    from drlmpi.bench.learner import build_parser, main, precisions_of

    def precisions(*argv):
        return precisions_of(build_parser().parse_args(list(argv)))

    assert precisions("--precision", "medium", "high", "--tf32") == ["high", "medium"]
    assert precisions("--precision", "medium") == ["medium"] and precisions() == []
    with pytest.raises(SystemExit):
        main(["--precision", "low", "--device", "cpu"])


def test_the_benchmark_measures_blocks_of_updates_in_each_captured_mode_asked_for():
    """``bench.learner --updates-per-graph K``: rows ``graph xK`` and, for DQN and TD3, ``fused
    xK`` (their lowered-precision rows follow the fused ones); ``--modes`` narrows them."""
    from drlmpi.bench.learner import blocked_modes, build_parser

    def blocked(algo, *argv):
        return blocked_modes(build_parser().parse_args(["--updates-per-graph", "8", *argv]), algo)

    assert blocked("dqn") == ["graph", "fused"] and blocked("td3") == ["graph", "fused"]
    assert blocked("ppo") == ["graph"]
    assert blocked("dqn", "--modes", "fused") == ["fused"]
    assert blocked("dqn", "--modes", "eager") == []


def test_the_kernel_list_refuses_a_machine_without_a_gpu(capsys):
    """``python -m drlmpi.bench.kernel_list`` lists a GPU's kernels: without CUDA it stops in one line."""
    from drlmpi.bench.kernel_list import main
    from drlmpi.bench.kernels import device_ops

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU (tests/test_capture.py lists its kernels)")
    with pytest.raises(SystemExit):
        main(["--algo", "dqn"])
    assert "needs a CUDA device" in capsys.readouterr().err
    assert device_ops(lambda: None, torch.device("cpu")) == []


def test_auto_stacks_the_critics_on_cuda_only_and_a_checkpoint_keeps_its_layout(pendulum):
    """``algo.twin_critics=auto`` (the default) stacks the critics where kernels are the cost; a
    checkpoint of one layout refuses, in one line, to load into the other."""
    from drlmpi.algos.critics import critic_layout
    from drlmpi.config.errors import ConfigError

    assert critic_layout("auto", torch.device("cuda")) == "stacked"
    assert critic_layout("auto", torch.device("cpu")) == "separate"
    assert critic_layout("separate", torch.device("cuda")) == "separate"
    assert TD3(pendulum, cfg_for("td3"), seed=0).twin_critics == "separate"  # auto on this CPU
    stacked = TD3(pendulum, cfg_for("td3", twin_critics="stacked"), seed=0)
    with pytest.raises(ConfigError, match="resume on a CUDA learner.*algo.twin_critics=stacked") as refused:
        TD3(pendulum, cfg_for("td3"), seed=0).load_state_dict(stacked.state_dict())
    assert "\n" not in str(refused.value)
    twin = TD3(pendulum, cfg_for("td3", twin_critics="stacked"), seed=5)
    twin.load_state_dict(stacked.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(twin.state_dict().values(), stacked.state_dict().values()))
    TD3(pendulum, cfg_for("td3"), learner=False).load_state_dict(stacked.state_dict())  # an actor alone


# -- PPO ------------------------------------------------------------------------------------------
def ppo_rows(algo, n: int, seed: int = 0) -> np.ndarray:
    """Random rows for ``algo`` with behaviour log-probabilities spread around -0.7 (ratios
    on both sides of the clip once the policy moves)."""
    rows = random_rows(algo, n, seed)
    rng = np.random.default_rng(seed + 1)
    rows[:, algo.layout.slices["log_prob"]] = -0.7 + 0.3 * rng.normal(size=(n, 1))
    return rows


def ppo_batch(algo, rows):
    """A full minibatch of ``rows``' first rollout, as an update reads it (a copy)."""
    algo.observe(rows)
    algo.updates_due(len(rows))
    algo.stage_block(1)
    return {k: v.clone() for k, v in algo.next_batch().items()}


def ppo_spec(name, cartpole, pendulum):
    from drlmpi.bench.learner import ATARI_SPEC

    return {"discrete": cartpole, "box": pendulum, "impala": ATARI_SPEC}[name]


def ppo_cfg(name, **overrides):
    images = {"encoder": "impala", "hidden": [16], "activation": "relu"} if name == "impala" else {}
    return cfg_for("ppo", rollout_steps=64 if name != "impala" else 16,
                   batch_size=16 if name != "impala" else 8, epochs=2, **images, **overrides)


@pytest.mark.parametrize("name,vtrace", [("discrete", True), ("discrete", False), ("box", True),
                                         ("box", False), ("impala", True)])
def test_ppo_functional_gradient_equals_eager_backward(name, vtrace, cartpole, pendulum):
    """PPO's loss over the flat buffer (``torch.func.functional_call`` of the actor-critic, the
    Gaussian's ``log_std`` among the views) gives the eager backward's gradient and metrics."""
    algo = PPO(ppo_spec(name, cartpole, pendulum), ppo_cfg(name, vtrace=vtrace, max_grad_norm=None), seed=5)
    batch = ppo_batch(algo, ppo_rows(algo, algo.rollout_steps))
    with torch.no_grad():  # a policy apart from the one that computed the rollout's targets
        algo.policy.flat.params.mul_(1.3)
    inputs = algo._loss_inputs(batch)
    assert (inputs[6] is not None) == vtrace
    g_eager, g_fused, m_eager, m_fused = gradient_pair(algo.policy, algo.loss, inputs, inputs)
    assert g_eager.abs().max() > 0 and torch.allclose(g_eager, g_fused, atol=1e-6, rtol=1e-5)
    if name == "box":  # the Gaussian's log_std has a gradient, and it came through the views
        log_std = algo.policy.flat.views(g_fused)["log_std"]
        assert log_std.abs().max() > 0
    assert len(m_fused) == 6 + vtrace  # the loss, then the metrics update() reports
    for a, b in zip(m_eager, m_fused):
        assert torch.allclose(a, b, atol=1e-6)


def test_the_actor_critics_training_pass_equals_its_distributions(cartpole, pendulum):
    """``ActorCritic.forward`` (plain arithmetic the compiled gradient traces) gives what the
    acting path's ``torch.distributions`` give: log-probabilities, entropies, values."""
    for spec in (cartpole, pendulum):
        algo = PPO(spec, ppo_cfg("discrete", log_std_init=-0.4), seed=2)
        obs = torch.randn(9, spec.obs_dim)
        actions = (torch.randint(0, 2, (9, 1)).float() if spec.discrete else torch.randn(9, 1))
        log_prob, entropy, value = algo.net(obs, actions)
        dist, value_ref = algo.net.distribution_value(obs)
        log_prob_ref, entropy_ref = algo.net.log_prob_entropy(dist, actions)
        assert torch.allclose(log_prob, log_prob_ref, atol=1e-6)
        assert torch.allclose(entropy, entropy_ref, atol=1e-6)
        assert torch.equal(value, value_ref)


def ppo_twins(spec, cfg, rows):
    eager, fused = PPO(spec, cfg, seed=2), PPO(spec, cfg, seed=2)
    fused.fuse(compiler=uncompiled)
    return eager, fused


@pytest.mark.parametrize("name", ["discrete", "box"])
def test_a_fused_ppo_update_learns_what_an_eager_update_learns(name, cartpole, pendulum):
    """The functional gradient and the clipping with the Adam step, uncompiled, over two
    rollouts with the learning rate and clip annealed: the same parameters, optimizer state and
    metrics as eager updates, update for update."""
    spec = ppo_spec(name, cartpole, pendulum)
    cfg = ppo_cfg(name, max_grad_norm=0.5, lr_schedule="linear", clip_schedule="linear")
    eager, fused = ppo_twins(spec, cfg, None)
    updates = 0
    for rollout in range(2):
        rows = ppo_rows(eager, cfg.rollout_steps, seed=rollout)
        for algo in (eager, fused):
            algo.observe(rows)
            due = algo.updates_due(len(rows))
        for _ in range(due):
            for algo in (eager, fused):
                algo.set_progress(updates / 16)
            m_eager, m_fused = dict(eager.update()), dict(fused.update())
            assert m_eager == pytest.approx(m_fused, rel=1e-4, abs=1e-6)
            updates += 1
    assert updates == 16 and fused._gradient.fused and fused.policy._fused_step is not None
    assert float(fused.clip) < cfg.clip_range  # the clip a schedule refilled reached the loss
    a, b = eager.state_dict(), fused.state_dict()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-5, rtol=1e-4), key
    sa = eager.policy.optimizer.state_dict()["state"][0]
    sb = fused.policy.optimizer.state_dict()["state"][0]
    assert float(sa["step"]) == float(sb["step"]) == 16
    assert torch.allclose(sa["exp_avg_sq"], sb["exp_avg_sq"], atol=1e-8, rtol=1e-4)


@pytest.mark.filterwarnings("ignore:drlmpi. capture=graph failed")  # capturing needs CUDA
def test_warming_up_ppo_changes_no_state_and_stages_into_the_update_buffer(cartpole):
    """PPO compiles its fused update before any rollout exists: on a zero-filled buffer shaped
    as every full minibatch's (the one :meth:`stage_block` then gathers into, so the compiled
    program's guards hold), without a draw from any generator or a change of state."""
    cfg = ppo_cfg("discrete", max_grad_norm=0.5)
    eager, fused = PPO(cartpole, cfg, seed=2), PPO(cartpole, cfg, seed=2)
    fused.capture = "fused"  # as built on a GPU with algo.capture=fused, before the warm-up
    before = {k: v.clone() for k, v in fused.state_dict().items()}
    generator, rng = fused._generator.get_state(), fused.rng.bit_generator.state
    torch.manual_seed(11)
    default = torch.get_rng_state()
    fused.warm_up(compiler=uncompiled)
    assert torch.equal(default, torch.get_rng_state())
    for key, value in fused.state_dict().items():
        assert torch.equal(before[key], value), key
    assert torch.equal(generator, fused._generator.get_state()) and rng == fused.rng.bit_generator.state
    assert not fused.policy.optimizer.state and fused._gradient.fused
    staged = fused._staged
    assert staged.shape == (cfg.batch_size, sum(fused.table_widths().values()))
    rows = ppo_rows(eager, cfg.rollout_steps)
    for algo in (eager, fused):
        algo.observe(rows)
        algo.updates_due(len(rows))
    for _ in range(4):
        assert dict(eager.update()) == pytest.approx(dict(fused.update()), rel=1e-4, abs=1e-6)
    assert fused._staged is staged  # the warm-up's buffer is the one the updates read
    assert list(fused.store.current.views) == list(fused.table_widths())  # its columns, in order


def test_the_fused_ppo_gradient_traces_as_one_graph_on_images():
    """The IMPALA stack under bfloat16 autocast with channels-last activations (the Breakout
    setting ``algo.capture=fused`` is for) traces as ONE graph - no graph break, which inductor
    with ``fullgraph`` would refuse on a GPU - through torch.func.grad of the whole loss. Dynamo's
    tracing with the eager backend, as inductor's front end does, without its C++ on a CPU
    (about 2 s: the residual stack's forward and backward traced once)."""
    from drlmpi.bench.learner import ATARI_SPEC

    cfg = ppo_cfg("impala", autocast="bfloat16", channels_last=True, max_grad_norm=0.5)
    algo = PPO(ATARI_SPEC, cfg, seed=1)
    batch = ppo_batch(algo, ppo_rows(algo, algo.rollout_steps))
    algo._gradient.fuse(compiler=lambda fn, **kw: torch.compile(fn, backend="eager", **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fall-back to the uncompiled function warns: fail on it
        metrics = algo._gradient(*algo._loss_inputs(batch))
    assert algo._gradient.program.compiled and algo._gradient.program.failure is None
    assert all(torch.isfinite(m) for m in metrics) and algo.policy.flat.grads.abs().max() > 0
