"""Learner updates per second: a bare PyTorch loop against drlmpi's learner, on CPU and device.

``python -m drlmpi.bench.learner --algo dqn --batch 64 256 --device cpu cuda --seconds 5``

In ONE invocation, for every algorithm and batch size, it measures updates/s of

* ``bare``: plain PyTorch, no drlmpi class: the same networks, Adam, loss, gradient clipping and
  target updates, the minibatch drawn from a tensor with ``torch.randint``;
* ``drlmpi``: :meth:`Algorithm.update` on the CPU, its storage filled with random transitions
  (PPO: one rollout, already on the learner's device, frozen again whenever it is used up, so
  its updates include the values and advantages of every rollout but not the copy of its rows);
* on each accelerator in ``--device``: ``eager`` (device storage, no capture), ``graph`` (the
  whole update captured in CUDA graphs) and ``compile`` (``torch.compile(mode="reduce-overhead")``),
  each when it is available, and for DQN and TD3 ``fused`` (the loss and its gradient compiled by
  inductor, replayed in CUDA graphs); ``--kernels`` adds each row's device operations per update;

and prints a table whose last columns are the ratios to the bare CPU loop and to drlmpi's CPU
path. Timings use ``--threads`` CPU threads (default 1, as a rank with one core) and end with a
device synchronisation, so queued GPU work is counted.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn

from drlmpi.bench.kernels import device_ops_per_call
from drlmpi.config.schema import SCHEMA, group_config
from drlmpi.device.determinism import CUBLAS_WORKSPACE, set_deterministic
from drlmpi.envs.spec import EnvSpec

SPECS = {
    "dqn": EnvSpec("CartPole-v1", 4, True, 2, 1, (), ()),
    "td3": EnvSpec("Pendulum-v1", 3, False, 0, 1, (-2.0,), (2.0,)),
    "ppo": EnvSpec("CartPole-v1", 4, True, 2, 1, (), ()),
}
#: ``--obs atari``: 4 stacked 84x84 grayscale frames (uint8) and Breakout's 4 actions, with the
#: Atari configs' networks (the Nature CNN, 512 hidden units) and PPO's Atari rollout.
ATARI_SPEC = EnvSpec("ALE/Breakout-v5", 4 * 84 * 84, True, 4, 1, (), (), obs_shape=(4, 84, 84),
                     obs_dtype="uint8")
ATARI_CFG = {"dqn": {"hidden": [512], "buffer_size": 5_000},
             "ppo": {"hidden": [512], "activation": "relu", "rollout_steps": 1024, "epochs": 4}}


def algo_cfg(name: str, batch: int, **overrides) -> dict:
    """The algorithm's defaults (:func:`~drlmpi.config.schema.group_config`) with the batch size (and
    overrides) set; the replay is always ready (``learning_starts`` 0)."""
    cfg = OmegaConf.to_container(group_config("algo", name)) if f"algo/{name}" in SCHEMA else {}
    cfg["batch_size"] = batch
    if name in ("dqn", "td3"):
        cfg["learning_starts"] = 0
        cfg["buffer_size"] = 100_000
    cfg.update(overrides)
    return cfg


def random_rows(layout, spec: EnvSpec, n: int, seed: int = 0, terminal_prob: float = 0.1,
                streams: int = 8, log_probs: bool = True) -> np.ndarray:
    """``n`` packed rows of random transitions: valid actions, ``terminal_prob`` of them
    terminal, ``streams`` environments in time order, and (``log_probs``, where the layout has
    the column) behaviour log-probabilities near log(1/2)."""
    rng = np.random.default_rng(seed)
    rows = layout.empty(n)
    for name in ("obs", "next_obs"):
        if spec.image:  # random pixels, packed as the layout stores them
            layout.put_obs(rows, name, rng.integers(0, 256, (n, *spec.obs_shape), dtype=np.uint8))
        else:
            layout.column(rows, name)[:] = rng.normal(size=(n, spec.obs_dim))
    if spec.discrete:
        layout.column(rows, "action")[:, 0] = rng.integers(0, spec.n_actions, n)
    else:
        layout.column(rows, "action")[:] = rng.uniform(spec.action_low, spec.action_high,
                                                       (n, spec.action_dim))
    layout.column(rows, "reward")[:, 0] = rng.normal(size=n)
    layout.column(rows, "terminated")[:, 0] = rng.random(n) < terminal_prob
    layout.column(rows, "stream")[:, 0] = np.arange(n) % streams
    if log_probs and "log_prob" in layout.slices:
        layout.column(rows, "log_prob")[:, 0] = np.log(0.5) + 0.01 * rng.normal(size=n)
    return rows


def timed(step: Callable[[], object], seconds: float, device: torch.device,
          min_updates: int = 20, clock: str = "wall") -> float:
    """Updates/s of ``step`` over about ``seconds`` (after a short warm-up). ``clock="cpu"``
    divides by this process's CPU time instead of wall time (CPU devices only: on a shared
    machine it is the rate one dedicated core would give)."""
    now = time.process_time if clock == "cpu" and device.type == "cpu" else time.perf_counter

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(10):
        step()
    sync()
    n, t0 = 0, now()
    batch_n = 10
    while True:
        for _ in range(batch_n):
            step()
        n += batch_n
        if n >= min_updates and now() - t0 >= seconds:
            break
    sync()
    return n / (now() - t0)


# -- (a) bare loops: plain torch, no drlmpi classes ---------------------------------------------
def _mlp(sizes: list[int], out_act: type[nn.Module] | None = None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    if out_act is not None:
        layers.append(out_act())
    return nn.Sequential(*layers)


def bare_dqn(cfg: dict, spec: EnvSpec, batch: int) -> Callable[[], object]:
    hidden = list(cfg["hidden"])
    q = _mlp([spec.obs_dim, *hidden, spec.n_actions])
    q_target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), lr=cfg["lr"])
    n, od = 100_000, spec.obs_dim
    # One packed float32 table [obs | action | reward | next_obs | terminated], one gather.
    data = torch.cat([torch.randn(n, od), torch.randint(0, spec.n_actions, (n, 1)).float(),
                      torch.randn(n, 1), torch.randn(n, od), (torch.rand(n, 1) < 0.1).float()], 1)
    gamma, max_norm, every = cfg["gamma"], cfg.get("max_grad_norm"), cfg["target_update_every"]
    count = [0]

    def step() -> object:
        rows = data[torch.randint(0, n, (batch,))]
        o, a, r = rows[:, :od], rows[:, od : od + 1].long(), rows[:, od + 1]
        o2, d = rows[:, od + 2 : 2 * od + 2], rows[:, 2 * od + 2]
        q_taken = q(o).gather(1, a).squeeze(1)
        with torch.no_grad():
            best = q(o2).argmax(1, keepdim=True)
            y = r + gamma * (1 - d) * q_target(o2).gather(1, best).squeeze(1)
        loss = F.smooth_l1_loss(q_taken, y)
        opt.zero_grad()
        loss.backward()
        if max_norm is not None:
            nn.utils.clip_grad_norm_(q.parameters(), max_norm)
        opt.step()
        count[0] += 1
        if count[0] % every == 0:
            q_target.load_state_dict(q.state_dict())
        return loss

    return step


def bare_td3(cfg: dict, spec: EnvSpec, batch: int) -> Callable[[], object]:
    hidden = list(cfg["hidden"])
    od, ad = spec.obs_dim, spec.action_dim
    actor = _mlp([od, *hidden, ad], nn.Tanh)
    q1, q2 = _mlp([od + ad, *hidden, 1]), _mlp([od + ad, *hidden, 1])
    actor_t, q1_t, q2_t = (copy.deepcopy(m) for m in (actor, q1, q2))
    a_opt = torch.optim.Adam(actor.parameters(), lr=cfg["actor_lr"])
    c_opt = torch.optim.Adam([*q1.parameters(), *q2.parameters()], lr=cfg["critic_lr"])
    n = 100_000
    data = torch.cat([torch.randn(n, od), torch.rand(n, ad) * 4 - 2, torch.randn(n, 1),
                      torch.randn(n, od), (torch.rand(n, 1) < 0.1).float()], 1)
    half = 2.0
    gamma, tau, delay = cfg["gamma"], cfg["tau"], cfg["policy_delay"]
    noise_std, noise_clip = cfg["policy_noise"] * half, cfg["noise_clip"] * half
    count = [0]

    def step() -> object:
        rows = data[torch.randint(0, n, (batch,))]
        o, a, r = rows[:, :od], rows[:, od : od + ad], rows[:, od + ad]
        o2, d = rows[:, od + ad + 1 : 2 * od + ad + 1], rows[:, 2 * od + ad + 1]
        with torch.no_grad():
            noise = (torch.randn(batch, ad) * noise_std).clamp(-noise_clip, noise_clip)
            a2 = (half * actor_t(o2) + noise).clamp(-half, half)
            x2 = torch.cat([o2, a2], 1)
            y = r + gamma * (1 - d) * torch.minimum(q1_t(x2), q2_t(x2)).squeeze(1)
        x = torch.cat([o, a], 1)
        c_loss = F.mse_loss(q1(x).squeeze(1), y) + F.mse_loss(q2(x).squeeze(1), y)
        c_opt.zero_grad()
        c_loss.backward()
        c_opt.step()
        count[0] += 1
        if count[0] % delay == 0:
            a_loss = -q1(torch.cat([o, half * actor(o)], 1)).mean()
            a_opt.zero_grad()
            a_loss.backward()
            a_opt.step()
            with torch.no_grad():
                for net, tgt in ((actor, actor_t), (q1, q1_t), (q2, q2_t)):
                    for p, t in zip(net.parameters(), tgt.parameters()):
                        t.lerp_(p, tau)
        return c_loss

    return step


def bare_ppo(cfg: dict, spec: EnvSpec, batch: int) -> Callable[[], object]:
    hidden = list(cfg["hidden"])
    def trunk(out: int) -> nn.Sequential:
        sizes = [spec.obs_dim, *hidden]
        layers = [m for i in range(len(hidden)) for m in (nn.Linear(sizes[i], sizes[i + 1]), nn.Tanh())]
        return nn.Sequential(*layers, nn.Linear(hidden[-1], out))

    pi, v = trunk(spec.n_actions), trunk(1)
    params = [*pi.parameters(), *v.parameters()]
    opt = torch.optim.Adam(params, lr=cfg["lr"], eps=cfg["adam_eps"])
    n = int(cfg["rollout_steps"])
    obs = torch.randn(n, spec.obs_dim)
    actions = torch.randint(0, spec.n_actions, (n,))
    old_logp = torch.full((n,), float(np.log(0.5)))
    adv, ret = torch.randn(n), torch.randn(n)
    clip, vf, ent, max_norm = cfg["clip_range"], cfg["vf_coef"], cfg["ent_coef"], cfg.get("max_grad_norm")
    state = {"perm": torch.randperm(n), "pos": 0}

    def step() -> object:
        if state["pos"] + batch > n:
            state["perm"], state["pos"] = torch.randperm(n), 0
        idx = state["perm"][state["pos"] : state["pos"] + batch]
        state["pos"] += batch
        o, a, lp_old, A, R = obs[idx], actions[idx], old_logp[idx], adv[idx], ret[idx]
        logits = pi(o)
        logp_all = torch.log_softmax(logits, 1)
        logp = logp_all.gather(1, a[:, None]).squeeze(1)
        entropy = -(logp_all.exp() * logp_all).sum(1).mean()
        A = (A - A.mean()) / (A.std() + 1e-8)
        ratio = (logp - lp_old).exp()
        p_loss = -torch.minimum(ratio * A, ratio.clamp(1 - clip, 1 + clip) * A).mean()
        v_loss = F.mse_loss(v(o).squeeze(1), R)
        loss = p_loss + vf * v_loss - ent * entropy
        opt.zero_grad()
        loss.backward()
        if max_norm is not None:
            nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()
        return loss

    return step


BARE = {"dqn": bare_dqn, "td3": bare_td3, "ppo": bare_ppo}


# -- (b)-(e) drlmpi -----------------------------------------------------------------------------
def drlmpi_step(name: str, batch: int, device: str, capture: str | None,
                per_graph: int = 1, obs: str = "vector") -> Callable[[], object]:
    """An update closure over a drlmpi algorithm whose storage holds random transitions; with
    ``per_graph`` K > 1 (off-policy, captured) one call is ``run_updates(K)``: K updates in one
    graph replay."""
    from hydra.utils import get_class

    atari = obs == "atari"
    cfg = OmegaConf.create(algo_cfg(name, batch, capture=capture, **(ATARI_CFG[name] if atari else {})))
    if per_graph > 1:
        cfg["updates_per_graph"] = per_graph
    spec = ATARI_SPEC if atari else SPECS[name]
    algo = get_class(cfg["_target_"])(spec, cfg, device=device, seed=0, learner=True)
    if name == "ppo":
        rows = random_rows(algo.layout, spec, int(cfg["rollout_steps"]))
        on_device = algo.store.staging.to_device(rows)  # data arrival is not part of an update

        def step() -> object:
            if not algo.ready_to_update():  # a new rollout: its values and advantages are computed
                algo.store.add_tensor(on_device)
                algo.updates_due(len(rows))
            return algo.update()

        return step
    algo.observe(random_rows(algo.layout, spec, int(cfg["buffer_size"]) if atari else 50_000))
    if per_graph > 1:
        return lambda: algo.run_updates(per_graph)
    return algo.update


def modes_for(device: str, algo: str = "ppo") -> list[str]:
    if device == "cpu":
        return ["drlmpi"]
    return ["eager", "graph", "compile"] + (["fused"] if algo in ("dqn", "td3") else [])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", nargs="+", default=["dqn"], choices=sorted(BARE))
    parser.add_argument("--batch", nargs="+", type=int, default=[64, 256])
    parser.add_argument("--device", nargs="+", default=["cpu"])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: CPU rows divide by process CPU time (a loaded machine); "
                             "device rows always use wall time")
    parser.add_argument("--repeats", type=int, default=1,
                        help="measure every row this many times, interleaved, and keep the best "
                             "(a shared machine's noise)")
    parser.add_argument("--modes", nargs="+", default=None,
                        help="device modes to run (default: eager graph compile, and fused for "
                             "dqn and td3)")
    parser.add_argument("--kernels", action="store_true",
                        help="also count each device row's kernels per update (drlmpi/bench/kernels.py)")
    parser.add_argument("--updates-per-graph", nargs="+", type=int, default=[],
                        help="also measure graph mode with algo.updates_per_graph=K for each K "
                             "(DQN, TD3; rows 'graph xK')")
    parser.add_argument("--obs", choices=("vector", "atari"), default="vector",
                        help="atari: 4x84x84 uint8 image observations and the Nature CNN (dqn, ppo; "
                             "no bare rows)")
    parser.add_argument("--deterministic", action="store_true",
                        help="also measure each device mode with run.deterministic's settings "
                             "(rows '<mode> det'; the cuBLAS workspace setting applies to all rows)")
    args = parser.parse_args(argv)
    if args.deterministic:  # cuBLAS reads it once: set before the first device row, for every row
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    if args.obs == "atari" and "td3" in args.algo:
        parser.error("--obs atari takes --algo dqn and/or ppo (TD3 has no image encoder)")
    torch.set_num_threads(args.threads)
    best: dict[tuple[str, int, str, str], tuple[float | None, str]] = {}

    def record(algo: str, batch: int, device: str, mode: str,
               make: Callable[[], Callable[[], object]], per_call: int = 1) -> None:
        torch.manual_seed(0)
        dev = torch.device(device)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                rate = timed(make(), args.seconds, dev, clock=args.clock) * per_call
            note = "; ".join(str(w.message).splitlines()[0] for w in caught)[:90]
            if args.kernels and dev.type == "cuda" and per_call == 1:
                ops = device_ops_per_call(make(), dev, 2 if algo == "td3" else 1)
                note = f"{ops:.0f} kernels/update {note}"
        except Exception as exc:  # noqa: BLE001 (a benchmark reports, never stops)
            rate, note = None, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
        key = (algo, batch, device, mode)
        old = best.get(key)
        if old is None or (rate is not None and (old[0] is None or rate > old[0])):
            best[key] = (rate, note)
        shown = "-" if rate is None else f"{rate:,.0f}/s"
        print(f"  {algo} batch {batch} {device} {mode}: {shown} {note}", flush=True)

    for _ in range(args.repeats):
        for algo in args.algo:
            for batch in args.batch:
                if args.obs == "vector":
                    record(algo, batch, "cpu", "bare",
                           lambda a=algo, b=batch: BARE[a](algo_cfg(a, b), SPECS[a], b))
                for device in args.device:
                    modes = modes_for(device, algo)
                    for mode in modes if device == "cpu" else [m for m in args.modes or modes if m in modes]:
                        capture = {"drlmpi": "off", "eager": "off"}.get(mode, mode)
                        record(algo, batch, device, mode,
                               lambda a=algo, b=batch, d=device, c=capture: drlmpi_step(a, b, d, c,
                                                                                       obs=args.obs))
                        if args.deterministic and device != "cpu":
                            set_deterministic(True)
                            record(algo, batch, device, f"{mode} det",
                                   lambda a=algo, b=batch, d=device, c=capture: drlmpi_step(
                                       a, b, d, c, obs=args.obs))
                            set_deterministic(False)
                    if device == "cpu" or algo == "ppo":
                        continue
                    for k in args.updates_per_graph:
                        record(algo, batch, device, f"graph x{k}",
                               lambda a=algo, b=batch, d=device, k=k: drlmpi_step(a, b, d, "graph", k,
                                                                                  obs=args.obs),
                               per_call=k)
    print_table([(*key, rate, note) for key, (rate, note) in best.items()])


def print_table(results: list[tuple[str, int, str, str, float | None, str]]) -> None:
    """The summary: updates/s and the ratios to the bare CPU loop and to drlmpi's CPU path."""
    base: dict[tuple[str, int, str], float | None] = {}
    for algo, batch, device, mode, rate, _ in results:
        if device == "cpu":
            base[(algo, batch, mode)] = rate

    def ratio(rate: float | None, ref: float | None) -> str:
        return "-" if not rate or not ref else f"{rate / ref:.2f}x"

    print()
    print(f"{'algo':5} {'batch':>5} {'device':8} {'mode':8} {'updates/s':>10} {'vs bare cpu':>12} "
          f"{'vs drlmpi cpu':>14}  note")
    for algo, batch, device, mode, rate, note in results:
        shown = "-" if rate is None else f"{rate:,.0f}"
        print(f"{algo:5} {batch:5d} {device:8} {mode:8} {shown:>10} "
              f"{ratio(rate, base.get((algo, batch, 'bare'))):>12} "
              f"{ratio(rate, base.get((algo, batch, 'drlmpi'))):>14}  {note}")


if __name__ == "__main__":
    main()
