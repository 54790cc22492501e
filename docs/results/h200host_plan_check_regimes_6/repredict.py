"""The cells of a plan.json predicted again by the current model from the plan's own probe and
calibration, next to the measured runs (each cell's runs averaged):

    python repredict.py PLAN.json RUN_DIR ... [KEY=VALUE ...] > OUT.md   (in this folder)

(KEY=VALUE: overrides after the plan's own, e.g. another run.max_env_steps)
"""

import json
import statistics
import sys
from pathlib import Path

from drlmpi.planner.cells import configs, topology_class
from drlmpi.planner.model import predict, recommended
from drlmpi.topologies.core.pace import Probe

plan = json.loads(Path(sys.argv[1]).read_text())
fields = dict(plan["probe"])
for key in ("act_s", "update_s", "slowdown", "allreduce_s"):
    fields[key] = {int(size): value for size, value in fields[key].items()}
probe = Probe(**fields)
names = sorted({cell["topology"] for cell in plan["cells"]})
folders = [arg for arg in sys.argv[2:] if "=" not in arg]
cfgs, _ = configs([*plan["overrides"], *(arg for arg in sys.argv[2:] if "=" in arg)], names)
measured: dict[tuple[str, int], list[float]] = {}
for folder in folders:
    for path in sorted(Path(folder).glob("*/summary.json")):
        summary = json.loads(path.read_text())
        key = (summary["topology"], summary["world_size"])
        measured.setdefault(key, []).append(summary["env_steps_per_s"])
again = {}
for cell in plan["cells"]:
    if cell["env_steps_per_s"]:
        cls = topology_class(cfgs[cell["topology"]])
        again[(cell["topology"], cell["ranks"])] = predict(cls, cell["ranks"], probe, cfgs[cell["topology"]],
                                                           plan["calibration"].get(cell["topology"]))
print("| topology | ranks | stored prediction | predicted again | measured | error again |")
print("|---|---|---|---|---|---|")
for cell in plan["cells"]:
    key = (cell["topology"], cell["ranks"])
    if key not in measured or key not in again:
        continue
    rate, predicted = statistics.mean(measured[key]), again[key].env_steps_per_s
    print(f"| {key[0]} | {key[1]} | {cell['env_steps_per_s']:,.0f} | {predicted:,.0f} | {rate:,.0f} "
          f"| {predicted / rate - 1:+.0%} |")
pick = recommended(list(again.values()))
print(f"\nRecommended again: {pick.topology} on {pick.ranks} ranks ({pick.env_steps_per_s:,.0f} env steps/s)")
rates = {key: statistics.mean(values) for key, values in measured.items() if key in again}
best = max(rates, key=rates.get)
if (pick.topology, pick.ranks) in rates:
    print(f"measured {rates[(pick.topology, pick.ranks)]:,.0f}: "
          f"{rates[(pick.topology, pick.ranks)] / rates[best]:.0%} of the best measured cell "
          f"({best[0]} on {best[1]} ranks, {rates[best]:,.0f})")
