"""The cells of a plan.json predicted again by the current model from the plan's own probe and
calibration, next to the measured runs (each cell's runs averaged):

    python docs/results/h200host_plan_check_regimes_6/repredict.py PLAN.json RUN_DIR ... > OUT.md
"""

import json
import statistics
import sys
from pathlib import Path

from drlmpi.planner.cells import configs, topology_class
from drlmpi.planner.model import predict
from drlmpi.topologies.core.pace import Probe

plan = json.loads(Path(sys.argv[1]).read_text())
fields = dict(plan["probe"])
for key in ("act_s", "update_s", "slowdown", "allreduce_s"):
    fields[key] = {int(size): value for size, value in fields[key].items()}
probe = Probe(**fields)
names = sorted({cell["topology"] for cell in plan["cells"]})
cfgs, _ = configs(plan["overrides"], names)
measured: dict[tuple[str, int], list[float]] = {}
for folder in sys.argv[2:]:
    for path in sorted(Path(folder).glob("*/summary.json")):
        summary = json.loads(path.read_text())
        measured.setdefault((summary["topology"], summary["world_size"]), []).append(summary["env_steps_per_s"])
print("| topology | ranks | stored prediction | predicted again | measured | error again |")
print("|---|---|---|---|---|---|")
for cell in plan["cells"]:
    key = (cell["topology"], cell["ranks"])
    if key not in measured or not cell["env_steps_per_s"]:
        continue
    cls = topology_class(cfgs[cell["topology"]])
    again = predict(cls, cell["ranks"], probe, cfgs[cell["topology"]], plan["calibration"].get(cell["topology"]))
    rate = statistics.mean(measured[key])
    print(f"| {key[0]} | {key[1]} | {cell['env_steps_per_s']:,.0f} | {again.env_steps_per_s:,.0f} | {rate:,.0f} "
          f"| {again.env_steps_per_s / rate - 1:+.0%} |")
