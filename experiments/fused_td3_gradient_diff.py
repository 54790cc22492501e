"""Where the fused TD3 gradient differs from the eager one, on a GPU: the relative error per
parameter tensor, the elements beyond 1e-3 of the largest, how near each hidden ReLU input of the
critics comes to 0 on the minibatch, and the same comparison with float32 matmuls at "highest"
precision (no TF32).

    python experiments/fused_td3_gradient_diff.py     # on a CUDA machine, from the repository root

A difference confined to one hidden unit's row whose input lies within rounding of 0 is that
unit's ReLU kink taken on opposite sides by the two programs, not a wrong gradient
(tests/test_capture.py::clear_of_kinks).
"""
import torch

from drlmpi.algos.td3 import TD3
from drlmpi.envs.make import probe_spec
from tests.test_capture import build, cfg_for
from tests.test_device_learner import random_rows

print("tf32 matmul", torch.backends.cuda.matmul.allow_tf32, "cudnn", torch.backends.cudnn.allow_tf32,
      "precision", torch.get_float32_matmul_precision())
spec = probe_spec("Pendulum-v1")
cfg = cfg_for("td3")
rows = random_rows(TD3(spec, cfg, learner=False), 2000)
algo = build(TD3, spec, cfg, "off", rows)
batch = {k: v.clone() for k, v in algo.next_batch().items()}
torch.manual_seed(0)
eps = torch.randn(batch["action"].shape, device="cuda")
critic = algo.groups["critic"]
inputs = (batch["obs"], batch["action"], batch["reward"], batch["next_obs"], batch["terminated"], eps)

def grads():
    algo._critic_gradient(*inputs)
    c = critic.flat.grads.clone()
    views = critic.flat.views(critic.flat.params.detach()) if algo._actor_gradient.fused else None
    algo._actor_gradient(batch["obs"], views)
    return c, algo.policy.flat.grads.clone()

eager_c, eager_a = grads()
algo.fuse()
fused_c, fused_a = grads()
def rel(x, r): return float((x - r).norm() / r.norm())
print("critic rel fused vs eager", rel(fused_c, eager_c), "actor", rel(fused_a, eager_a))
for name, f, e in (("critic", fused_c, eager_c), ("actor", fused_a, eager_a)):
    d = (f - e).abs()
    big = d > 1e-3 * e.abs().max()
    print(name, "n", e.numel(), "elements differing >1e-3*max:", int(big.sum()),
          "max abs diff", float(d.max()),
          "max |g|", float(e.abs().max()))
    group = critic if name == "critic" else algo.policy
    fv, ev = group.flat.views(f), group.flat.views(e)
    for key in fv:
        dd = (fv[key] - ev[key]).abs()
        mask = dd > 1e-3 * e.abs().max()
        idx = mask.nonzero().tolist()
        print(f"  {key} {tuple(fv[key].shape)} rel {rel(fv[key], ev[key]) if ev[key].norm() > 0 else 0:.2e} "
              f"differing {int(mask.sum())} at {idx[:12]}")
# pre-activations of the critic on this batch: how near the ReLU kink
with torch.no_grad():
    for qname in ("q1", "q2"):
        x = torch.cat([batch["obs"], batch["action"]], 1)
        for i, layer in enumerate(getattr(algo.critic, qname)):
            x = layer(x)
            if isinstance(layer, torch.nn.Linear):
                a = x.abs()
                print(f"  {qname} layer {i} min|pre| {float(a.min()):.3e} count<1e-5 {int((a < 1e-5).sum())} "
                      f"count==0 {int((x == 0).sum())}")
    t = algo.target_q(batch["reward"], batch["next_obs"], batch["terminated"], eps)
    print("target min/max", float(t.min()), float(t.max()))
# TF32 off for both
torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
algo2 = build(TD3, spec, cfg, "off", rows)
algo = algo2
eager_c2, eager_a2 = grads()
print("eager with tf32 off vs eager before", rel(eager_c2, eager_c), rel(eager_a2, eager_a))
algo.fuse()
fused_c2, fused_a2 = grads()
print("fp32-highest: critic fused vs eager", rel(fused_c2, eager_c2), "actor", rel(fused_a2, eager_a2))
print("fused(default) vs eager(fp32-highest):", rel(fused_c, eager_c2), rel(fused_a, eager_a2))
