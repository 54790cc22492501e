"""Where a fused DQN update's device time goes, and what fewer kernels would buy: a probe.

``python experiments/fused_update_probe.py --device cuda --batch 64 --json OUT.json``

A double-DQN update of a 256x256 MLP (CartPole's shapes, as ``drlmpi.bench.learner``) written
three ways in plain PyTorch, each captured in ONE CUDA graph and replayed:

* ``pieces``: as drlmpi's ``algo.capture=fused`` runs it today - the minibatch gather, the loss's
  gradient (``torch.func.grad`` compiled), clipping with Adam, the target copy and the update
  counter as separately compiled programs;
* ``whole``: the same arithmetic as ONE compiled program (gather, gradient, clip, Adam, target
  copy, counter), so inductor can fuse across the pieces' borders;
* ``whole_bmm``: ``whole`` with the online and target networks evaluated together, each layer one
  batched matrix product over the two networks' stacked weights.

For each it prints updates/s over ``--seconds`` of graph replays, the kernels of one update and the
summed kernel time of one update (``torch.profiler`` over the compiled programs run eagerly), so
the gap between replay time and kernel time shows what the launches inside a graph cost. On the
CPU (no graph) it only checks that the three ways compute the same parameters after a few updates.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from drlmpi.algos.dqn import copy_when_due


def layout(obs_dim: int, hidden: list[int], actions: int) -> list[tuple[str, tuple[int, ...]]]:
    shapes, last = [], obs_dim
    for i, width in enumerate([*hidden, actions]):
        shapes += [(f"w{i}", (width, last)), (f"b{i}", (width,))]
        last = width
    return shapes


def views(flat: torch.Tensor, shapes: list[tuple[str, tuple[int, ...]]]) -> list[torch.Tensor]:
    out, offset = [], 0
    for _, shape in shapes:
        n = 1
        for s in shape:
            n *= s
        out.append(flat[offset:offset + n].view(shape))
        offset += n
    return out


def mlp(p: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    layers = len(p) // 2
    for i in range(layers):
        x = torch.addmm(p[2 * i + 1], x, p[2 * i].t())
        if i < layers - 1:
            x = torch.relu(x)
    return x


def mlp_pair(online: list[torch.Tensor], target: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Both networks on ``x`` at once: out[0] online, out[1] target; each layer one bmm."""
    layers = len(online) // 2
    h = x.unsqueeze(0).expand(2, *x.shape).contiguous()
    for i in range(layers):
        w = torch.stack((online[2 * i], target[2 * i]))
        b = torch.stack((online[2 * i + 1], target[2 * i + 1])).unsqueeze(1)
        h = torch.baddbmm(b, h, w.transpose(1, 2))
        if i < layers - 1:
            h = torch.relu(h)
    return h


class Problem:
    def __init__(self, device: torch.device, batch: int, hidden: list[int], obs_dim: int = 4,
                 actions: int = 2, rows: int = 100_000, seed: int = 0) -> None:
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.shapes = layout(obs_dim, hidden, actions)
        n = sum(int(torch.Size(s).numel()) for _, s in self.shapes)
        self.params = (torch.randn(n, generator=g) * 0.05).to(device)
        self.target = self.params.clone()
        self.exp_avg = torch.zeros_like(self.params)
        self.exp_avg_sq = torch.zeros_like(self.params)
        self.step = torch.zeros((), device=device)
        self.number = torch.zeros((), device=device, dtype=torch.int64)
        self.obs = torch.randn(rows, obs_dim, generator=g).to(device)
        self.next_obs = torch.randn(rows, obs_dim, generator=g).to(device)
        self.action = torch.randint(0, actions, (rows, 1), generator=g).to(device)
        self.reward = torch.randn(rows, generator=g).to(device)
        self.terminated = (torch.rand(rows, generator=g) < 0.05).float().to(device)
        self.index = torch.zeros(batch, dtype=torch.int64, device=device)
        self.batch, self.rows, self.device = batch, rows, device
        self.lr, self.betas, self.eps = 1e-3, (0.9, 0.999), 1e-8
        self.gamma, self.max_norm, self.every = 0.99, 10.0, 500

    def draw(self) -> None:
        self.index.random_(0, self.rows)

    def state(self) -> tuple[torch.Tensor, ...]:
        return (self.params, self.target, self.exp_avg, self.exp_avg_sq, self.step, self.number, self.index,
                self.obs, self.action, self.reward, self.next_obs, self.terminated)


def gather(index, obs, action, reward, next_obs, terminated):
    return obs[index], action[index], reward[index], next_obs[index], terminated[index]


def make_loss(shapes, gamma: float, pair: bool):
    def loss(flat, target_flat, obs, action, reward, next_obs, terminated):
        n = obs.shape[0]
        online, target = views(flat, shapes), views(target_flat, shapes)
        both = torch.cat((obs, next_obs))
        if pair:
            out = mlp_pair(online, target, both)
            q_now, q_next, target_next = out[0, :n], out[0, n:].detach(), out[1, n:].detach()
        else:
            q = mlp(online, both)
            q_now, q_next = q[:n], q[n:].detach()
            target_next = mlp(target, next_obs).detach()
        q_taken = q_now.gather(1, action).squeeze(1)
        next_q = target_next.gather(1, q_next.argmax(dim=1, keepdim=True)).squeeze(1)
        y = reward + gamma * (1.0 - terminated) * next_q
        value = F.smooth_l1_loss(q_taken, y)
        return value, (value.detach(), q_taken.detach().mean())
    return loss


def clip_adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, max_norm):
    norm = torch.linalg.vector_norm(grad)
    grad = grad * (max_norm / (norm + 1e-6)).clamp(max=1.0)
    beta1, beta2 = betas
    step.add_(1)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = exp_avg_sq.sqrt() / (1 - beta2**step).sqrt() + eps
    param.sub_(lr / (1 - beta1**step) * exp_avg / denom)
    return norm


def build(problem: Problem, way: str, compiler):
    """The update of ``way`` as a callable of no arguments (it reads and writes the problem)."""
    p = problem
    grad_fn = torch.func.grad(make_loss(p.shapes, p.gamma, way == "whole_bmm"), has_aux=True)
    if way == "pieces":
        c_gather, c_grad = compiler(gather), compiler(grad_fn)
        c_adam, c_copy = compiler(clip_adam), compiler(copy_when_due)
        grads = torch.zeros_like(p.params)

        def update():
            p.draw()
            batch = c_gather(p.index, p.obs, p.action, p.reward, p.next_obs, p.terminated)
            g, (loss, q_mean) = c_grad(p.params, p.target, *batch)
            grads.copy_(g)
            norm = c_adam(p.params, grads, p.exp_avg, p.exp_avg_sq, p.step, p.lr, p.betas, p.eps, p.max_norm)
            p.number.add_(1)
            c_copy(p.target, p.params, p.number, p.every)
            return torch.stack((loss, q_mean, norm))
        return update

    def whole(params, target, exp_avg, exp_avg_sq, step, number, index, obs, action, reward, next_obs,
              terminated):
        batch = gather(index, obs, action, reward, next_obs, terminated)
        g, (loss, q_mean) = grad_fn(params, target, *batch)
        norm = clip_adam(params, g, exp_avg, exp_avg_sq, step, p.lr, p.betas, p.eps, p.max_norm)
        number.add_(1)
        copy_when_due(target, params, number, p.every)
        return torch.stack((loss, q_mean, norm))

    c_whole = compiler(whole)

    def update():
        p.draw()
        return c_whole(*p.state())
    return update


def kernel_time(update, device) -> tuple[int, float, list[tuple[str, float]]]:
    """Kernels of one update, their summed device time (us) and the slowest ones."""
    for _ in range(3):
        update()
    torch.cuda.synchronize(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            update()
        torch.cuda.synchronize(device)
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name: dict[str, float] = {}
    for e in events:
        by_name[e.name] = by_name.get(e.name, 0.0) + e.device_time / 10
    top = sorted(by_name.items(), key=lambda kv: -kv[1])
    return round(len(events) / 10), sum(by_name.values()), [(k[:90], round(v, 2)) for k, v in top]


def replay_rate(update, device, seconds: float, per_graph: int) -> float:
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            update()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            update()
    graph.replay()
    torch.cuda.synchronize(device)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(50):
            graph.replay()
        done += 50 * per_graph
        torch.cuda.synchronize(device)
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", nargs="+", type=int, default=[64])
    parser.add_argument("--hidden", nargs="+", type=int, default=[256, 256])
    parser.add_argument("--ways", nargs="+", default=["pieces", "whole", "whole_bmm"])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--per-graph", nargs="+", type=int, default=[1])
    parser.add_argument("--max-autotune", action="store_true", help="inductor's max_autotune (Triton GEMMs)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    options = {"max_autotune": True} if args.max_autotune else None

    def compiler(fn):
        return torch.compile(fn, fullgraph=True, dynamic=False, options=options)

    rows = []
    for batch in args.batch:
        finals = {}
        for way in args.ways:
            problem = Problem(device, batch, args.hidden)
            update = build(problem, way, compiler)
            torch.manual_seed(1)  # the same draws for every way: the check below
            start = time.perf_counter()
            update()
            compile_s = time.perf_counter() - start
            for _ in range(4):
                update()
            finals[way] = problem.params.clone()
            row = {"way": way, "batch": batch, "hidden": args.hidden, "max_autotune": args.max_autotune,
                   "compile_s": round(compile_s, 1)}
            if device.type == "cuda":
                kernels, kernel_us, top = kernel_time(update, device)
                row.update(kernels=kernels, kernel_us=round(kernel_us, 1), top=top[:12])
                for k in args.per_graph:
                    row[f"updates_per_s_x{k}"] = round(replay_rate(update, device, args.seconds, k))
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "top"}), flush=True)
            for name, us in row.get("top", []):
                print(f"    {us:8.2f} us  {name}", flush=True)
        base = finals[args.ways[0]]
        for way, final in finals.items():
            diff = float((final - base).abs().max())
            print(f"batch {batch}: {way} params after 5 updates differ from {args.ways[0]} by {diff:.2e}")
            for row in rows:
                if row["way"] == way and row["batch"] == batch:
                    row["max_abs_diff_vs_first"] = diff
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
