import sys, time, collections, warnings
import torch
from drlmpi.bench.learner import drlmpi_step, timed
from drlmpi.bench.kernels import device_ops
dev = torch.device("cuda")
def probe(label, mode, batch, **ov):
    step = drlmpi_step("ppo", batch, "cuda", mode, obs="atari_impala", **ov)
    t0 = time.perf_counter()
    for _ in range(8):
        step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ops = device_ops(step, dev)
    total = sum(t for _, t in ops)
    rate = timed(step, 4.0, dev)
    print(f"== {label} mode={mode} batch={batch} {ov}: first8 {first:.1f}s ops {len(ops)} device {total/1000:.3f} ms/update  timed {rate:.1f} upd/s = {1000/rate:.3f} ms", flush=True)
    agg = collections.defaultdict(lambda: [0, 0.0])
    for n, t in ops:
        agg[n][0] += 1; agg[n][1] += t
    for n, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:14]:
        print(f"   {t/1000:7.3f} ms {c:4d}x {n[:110]}", flush=True)
bf = dict(autocast="bfloat16", channels_last=True)
probe("preset fp32", "graph", 256)
probe("bf16 CL", "graph", 256, **bf)
probe("bf16 CL", "compile", 256, **bf)
probe("bf16 noCL", "graph", 256, autocast="bfloat16")
probe("bf16 CL", "graph", 512, **bf)
