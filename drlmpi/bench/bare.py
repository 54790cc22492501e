"""The bare reference updates of the learner benchmark (:mod:`drlmpi.bench.learner`'s ``bare``
rows): plain PyTorch, no drlmpi class. For DQN, TD3 and PPO, the same networks, Adam, loss,
gradient clipping and target updates as drlmpi's algorithms, each minibatch drawn from one
packed tensor of random transitions with ``torch.randint`` (PPO: a fixed random rollout cut by
permutations); ``BARE[algo](cfg, spec, batch)`` returns one update as a closure.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from drlmpi.config.scopes import DQNSettings, PPOSettings, TD3Settings
from drlmpi.envs.spec import EnvSpec


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


def bare_dqn(cfg: DQNSettings, spec: EnvSpec, batch: int) -> Callable[[], object]:
    hidden = list(cfg.hidden)
    q = _mlp([spec.obs_dim, *hidden, spec.n_actions])
    q_target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), lr=cfg.lr)
    n, od = 100_000, spec.obs_dim
    # One packed float32 table [obs | action | reward | next_obs | terminated], one gather.
    data = torch.cat([torch.randn(n, od), torch.randint(0, spec.n_actions, (n, 1)).float(),
                      torch.randn(n, 1), torch.randn(n, od), (torch.rand(n, 1) < 0.1).float()], 1)
    gamma, max_norm, every = cfg.gamma, cfg.max_grad_norm, cfg.target_update_every
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


def bare_td3(cfg: TD3Settings, spec: EnvSpec, batch: int) -> Callable[[], object]:
    hidden = list(cfg.hidden)
    od, ad = spec.obs_dim, spec.action_dim
    actor = _mlp([od, *hidden, ad], nn.Tanh)
    q1, q2 = _mlp([od + ad, *hidden, 1]), _mlp([od + ad, *hidden, 1])
    actor_t, q1_t, q2_t = (copy.deepcopy(m) for m in (actor, q1, q2))
    a_opt = torch.optim.Adam(actor.parameters(), lr=cfg.actor_lr)
    c_opt = torch.optim.Adam([*q1.parameters(), *q2.parameters()], lr=cfg.critic_lr)
    n = 100_000
    data = torch.cat([torch.randn(n, od), torch.rand(n, ad) * 4 - 2, torch.randn(n, 1),
                      torch.randn(n, od), (torch.rand(n, 1) < 0.1).float()], 1)
    half = 2.0
    gamma, tau, delay = cfg.gamma, cfg.tau, cfg.policy_delay
    noise_std, noise_clip = cfg.policy_noise * half, cfg.noise_clip * half
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


def bare_ppo(cfg: PPOSettings, spec: EnvSpec, batch: int) -> Callable[[], object]:
    hidden = list(cfg.hidden)
    def trunk(out: int) -> nn.Sequential:
        sizes = [spec.obs_dim, *hidden]
        layers = [m for i in range(len(hidden)) for m in (nn.Linear(sizes[i], sizes[i + 1]), nn.Tanh())]
        return nn.Sequential(*layers, nn.Linear(hidden[-1], out))

    pi, v = trunk(spec.n_actions), trunk(1)
    params = [*pi.parameters(), *v.parameters()]
    opt = torch.optim.Adam(params, lr=cfg.lr, eps=cfg.adam_eps)
    n = cfg.rollout_steps
    obs = torch.randn(n, spec.obs_dim)
    actions = torch.randint(0, spec.n_actions, (n,))
    old_logp = torch.full((n,), float(np.log(0.5)))
    adv, ret = torch.randn(n), torch.randn(n)
    clip, vf, ent, max_norm = cfg.clip_range, cfg.vf_coef, cfg.ent_coef, cfg.max_grad_norm
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
