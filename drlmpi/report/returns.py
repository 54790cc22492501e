"""The report's "Final evaluations" table: each cell's last and best greedy evaluation over its
seeds, next to a published figure for that algorithm and task where one is known (the TD3 paper's
MuJoCo results), so a study such as ``+experiment=td3_mujoco`` reads as the paper's table.
"""

from __future__ import annotations

import numpy as np

from drlmpi.report.tables import Group

#: (algo, env id) -> (source, mean, std) of the final evaluation a paper reports
PUBLISHED: dict[tuple[str, str], tuple[str, float, float]] = {
    ("td3", "HalfCheetah-v5"): ("TD3 paper, 1M steps (v1 tasks)", 9636.95, 859.07),
    ("td3", "Hopper-v5"): ("TD3 paper, 1M steps (v1 tasks)", 3564.07, 114.74),
    ("td3", "Walker2d-v5"): ("TD3 paper, 1M steps (v1 tasks)", 4682.82, 539.64),
    ("td3", "Ant-v5"): ("TD3 paper, 1M steps (v1 tasks)", 4372.44, 1000.33),
}


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:,.0f}"
    return f"{np.mean(values):,.0f} +- {np.std(values):,.0f}"


def returns_section(groups: list[Group]) -> list[str]:
    """The table, for the cells whose runs evaluated at least once (empty: none did)."""
    rows = []
    for group in groups:
        last = [float(r.get("last_eval_return")) for r in group.runs if r.get("last_eval_return") is not None]
        if not last:
            continue
        best = [float(r.get("best_eval_return")) for r in group.runs if r.get("best_eval_return") is not None]
        steps = [int(r.get("env_steps", 0)) for r in group.runs]
        tasks = {(r.get("algo"), r.get("env_id")) for r in group.runs}
        published = PUBLISHED.get(tasks.pop()) if len(tasks) == 1 else None
        shown = "-" if published is None else f"{published[1]:,.0f} +- {published[2]:,.0f} ({published[0]})"
        rows.append(f"| {group.env} | {group.algo} | {group.name} | {len(last)} | "
                    f"{int(np.median(steps)):,} | {_mean_std(last)} | {_mean_std(best)} | {shown} |")
    if not rows:
        return []
    return ["## Final evaluations", "",
            "Per cell: runs with an evaluation, median env steps, the last greedy evaluation's mean "
            "return (mean +- std over runs) and the best one's, and a published final evaluation of "
            "the same algorithm and task where one is known.", "",
            "| env | algo | topology | runs | env steps | last evaluation | best evaluation | published |",
            "|---|---|---|---|---|---|---|---|", *rows, ""]
