"""``python -m drlmpi.bench.headline PART OUT [overrides]``: one study of docs/results/, as the list
of commands that measures it - presets run by the sweep launcher (``python -m drlmpi -m
+experiment=...``, each sweep into a folder of OUT with its own provenance.json), and benchmarks
that are not drlmpi runs (``python -m drlmpi.bench.learner``, the planner) - then the report.

OUT gets the artifact layout of docs/results/: ``provenance.json`` for the whole part, every
run's summary.json, metrics.csv, job.log, rank 0's log and composed config (checkpoints, policies,
event files and other ranks' logs removed; ``--keep-all`` keeps them), each command's output in
a ``.txt`` beside its JSON, and the report's tables (``report*/``, no plots). Overrides go to every
sweep of the part and replace its own value of a key (``seed=0``, ``world_size=2``, ``device=cpu``
for a smaller check), except that a raw-stepping ceiling keeps its algorithm and topology: it
takes no ``algo``/``topology`` key (``algo.autocast=bfloat16`` goes to the learners only).
Run again into the same OUT - a time limit cut the first run - a part continues: a sweep reuses
the jobs that finished there and runs the rest, and a step run once (the planner's plan) is kept
when the same command succeeded there before (``steps_done.json``).
``--dry-run`` prints the commands and lets every sweep list its jobs
(``hydra.launcher.dry_run=true``) without running them. MPI jobs start with the one launch
command (``DRLMPI_MPIEXEC``; the GPU hosts' runs used ``mpirun --oversubscribe --bind-to none``).
The parts, their time on the hosts measured and what they reproduce: docs/experiments.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from drlmpi.config.errors import ConfigError
from drlmpi.config.inputs import ArgumentParser, check_output_folder

#: the placeholder for OUT in a step's arguments
OUT = "{out}"
#: the file in OUT listing the commands of ``once`` steps that succeeded there
DONE = "steps_done.json"


@dataclass
class Step:
    """One command: ``python -m`` ``args``; a sweep (``into``: its folder in OUT) takes the
    part's overrides but those of the config groups in ``keeps``; ``log``: a file in OUT that gets
    a copy of its output."""

    args: list[str]
    into: str | None = None
    log: str | None = None
    keeps: tuple[str, ...] = ()
    #: run once into an OUT: when the part runs again into it (a time limit cut the first run),
    #: the step is kept if the same command already succeeded there (:data:`DONE`)
    once: bool = False

    def takes(self, override: str) -> bool:
        """Whether this sweep takes ``override`` (``algo.lr=...`` belongs to the group ``algo``)."""
        key = override.partition("=")[0].lstrip("+~")
        return key.split(".")[0].split("/")[0] not in self.keeps


def _words(texts: tuple[str, ...]) -> list[str]:
    return [word for text in texts for word in text.split()]


def sweep(into: str, *texts: str) -> Step:
    """``python -m drlmpi -m WORDS`` into OUT/``into`` (``texts``: space-separated overrides)."""
    return Step(["drlmpi", "-m", *_words(texts)], into=into)


def ceiling(into: str, *texts: str) -> Step:
    """:func:`sweep` of a raw-stepping ceiling (random actions, no learner): the part's overrides
    of the algorithm and the topology are not its to take."""
    return Step(sweep(into, *texts).args, into=into, keeps=("algo", "topology"))


def learner(log: str, *texts: str) -> Step:
    """``python -m drlmpi.bench.learner WORDS --json OUT/<log's stem>.json``, output into ``log``."""
    return Step(["drlmpi.bench.learner", *_words(texts), "--json", f"{OUT}/{Path(log).stem}.json"], log=log)


def report(into: str, *runs: str) -> Step:
    return Step(["drlmpi.report", *(f"{OUT}/{r}" for r in runs), "--out", f"{OUT}/{into}"])


THROUGHPUT = "+experiment=topology_throughput env.sim_cost_ms=1"
CEILING = "algo=random topology=allgather"
DQN_GPU = "device=cuda algo=dqn"
STAR_X8 = "topology=star topology.sync_every=64 algo.updates_per_graph=8 run.matmul_precision=high"
BREAKOUT = "+experiment=ppo_breakout_topologies"
LAYOUTS = ("16x8x1", "6x24x3", "4x40x5")  # ranks x games a rank x AtariVectorEnv threads
ONE_PRESET = {  # parts that are one sweep and its report
    "dqn_ttt": "+experiment=dqn_lunarlander_ttt",
    "td3_ttt": "+experiment=td3_halfcheetah_ttt",
    "td3": "+experiment=td3_mujoco env=halfcheetah seed=0 device=cuda run.eval_on=simulators "
           "run.progress_every_s=30",
    "breakout": "+experiment=ppo_breakout_16 seed=0,1,2",
    "breakout_topologies": BREAKOUT,
    "seed_spread": "+experiment=dqn_lunarlander_seed_spread",
    "vtrace": "+experiment=ppo_async_vtrace",
    "act_cost": "+experiment=dqn_act_cost",
}
STEADY = f"{THROUGHPUT} run.max_env_steps=100000 world_size=16"
BIND = f"{THROUGHPUT} run.max_env_steps=25000 world_size=16"
STEPS: dict[str, list[Step]] = {
    **{part: [sweep("runs", preset), report("report", "runs")] for part, preset in ONE_PRESET.items()},
    "learner": [
        learner("bench.txt", "--algo dqn td3 ppo --batch 64 --device cpu cuda --seconds 2"),
        learner("bench_atari.txt", "--algo dqn ppo --batch 256 --device cpu cuda --obs atari --seconds 2")],
    "learner_modes": [
        learner("bench_fused.txt", "--algo dqn td3 --batch 64 128 256 --device cuda --modes graph fused",
                "--kernels --stacked-critics --separate-target --seconds 2"),
        learner("bench_det.txt", "--algo dqn td3 ppo --batch 256 --device cuda --modes eager graph",
                "--deterministic --seconds 2"),
        learner("bench_det_atari.txt", "--obs atari --algo ppo dqn --batch 256 --device cuda",
                "--modes eager graph --deterministic --seconds 2")],
    "td3_variants": [
        learner("bench_td3.txt", "--algo td3 --batch 256 --device cuda --modes fused --stacked-critics",
                "--target-forward paired --precision high medium --kernels --seconds 2"),
        learner("bench_dqn.txt", "--algo dqn --batch 64 128 --device cuda --modes fused",
                "--precision high medium --updates-per-graph 8 --kernels --seconds 2")],
    "fused_scaling": [
        *(sweep(mode, THROUGHPUT, "run.max_env_steps=25000", DQN_GPU, f"algo.capture={mode}",
                "topology=sequential,star,async world_size=1,8,16") for mode in ("fused", "graph")),
        ceiling("ceiling", THROUGHPUT, "run.max_env_steps=25000", CEILING, "world_size=8,16"),
        report("report_fused", "fused", "ceiling"),
        report("report_graph", "graph", "ceiling")],
    "steady": [
        ceiling("ceiling", STEADY, CEILING),
        sweep("paired", STEADY, DQN_GPU, "topology=star,async"),
        sweep("paired_rows960", STEADY, DQN_GPU, "topology=star topology.round_rows=960"),
        sweep("separate", STEADY, DQN_GPU, "topology=star algo.target_forward=separate"),
        report("report_paired", "ceiling", "paired", "paired_rows960"),
        report("report_separate", "ceiling", "separate")],
    "bind": [  # unpinned against pinned, alternating, three times
        *(ceiling(f"{b}/ceiling", BIND, CEILING, f"bind_ranks={b}") for b in ("none", "core")),
        *(sweep(f"{b}/star_{r}", BIND, DQN_GPU, STAR_X8, f"bind_ranks={b}")
          for r in (1, 2, 3) for b in ("none", "core")),
        report("report_none", "none"),
        report("report_core", "core")],
    "device_scaling": [
        sweep("device_k4", THROUGHPUT, "run.max_env_steps=20000", DQN_GPU, "algo.updates_per_graph=4",
              "topology=sequential,star,async,allgather,parameter_server world_size=1,8,16"),
        sweep("device_k1", THROUGHPUT, "run.max_env_steps=20000", DQN_GPU, "algo.updates_per_graph=1",
              "topology=star world_size=16"),
        ceiling("ceiling", THROUGHPUT, "run.max_env_steps=20000", CEILING, "world_size=1,8,16"),
        report("report", "device_k4", "device_k1", "ceiling")],
    "breakout_share": [
        ceiling("ceiling", BREAKOUT, "+experiment/breakout=ceiling run.max_train_seconds=120"),
        sweep("central", "+experiment=ppo_breakout_16 run.max_train_seconds=120 topology.overlap=off,on"),
        report("report", "ceiling", "central")],
    "breakout_levers": [
        ceiling("ceiling", BREAKOUT, "+experiment/breakout=ceiling run.max_train_seconds=120"),
        sweep("central", "+experiment=ppo_breakout_16 run.max_train_seconds=120 topology.overlap=on"),
        sweep("central_levers", "+experiment=ppo_breakout_16 run.max_train_seconds=120 topology.overlap=on",
              "algo.autocast=bfloat16 algo.channels_last=true"),
        report("report", "ceiling", "central", "central_levers")],
    "breakout_minibatches": [  # 3,840-row rollouts: 15, 8 and 4 minibatches of 256, 480 and 960 rows
        ceiling("ceiling", BREAKOUT, "+experiment/breakout=ceiling run.max_train_seconds=90"),
        sweep("central", "+experiment=ppo_breakout_16 run.max_train_seconds=90 topology.overlap=on",
              "algo.autocast=bfloat16 algo.channels_last=true algo.num_minibatches=15,8,4"),
        report("report", "ceiling", "central")],
    "breakout_pipeline": [  # 2 or 4 environment groups a simulator (hiding the round trip), 4 or 3 epochs
        ceiling("ceiling", BREAKOUT, "+experiment/breakout=ceiling run.max_train_seconds=80"),
        sweep("central", "+experiment=ppo_breakout_16 run.max_train_seconds=80 topology.overlap=on",
              "algo.autocast=bfloat16 algo.channels_last=true topology.env_groups=2,4 algo.epochs=4,3"),
        report("report", "ceiling", "central")],
    "breakout_compile": [  # the update captured (CUDA graphs) or compiled (torch.compile, at the first
        # update, inside the training clock: compare the runs' later seconds), 4 or 3 epochs
        ceiling("ceiling", BREAKOUT, "+experiment/breakout=ceiling run.max_train_seconds=80"),
        sweep("central", "+experiment=ppo_breakout_16 run.max_train_seconds=100 topology.overlap=on",
              "algo.autocast=bfloat16 algo.channels_last=true algo.capture=graph,compile algo.epochs=4,3"),
        report("report", "ceiling", "central")],
    "breakout_fused": [  # the update's loss gradient compiled inside its CUDA graph (compiled before
        # the training clock), 4 or 3 epochs, bf16 + channels-last
        ceiling("ceiling", BREAKOUT, "+experiment/breakout=ceiling run.max_train_seconds=80"),
        sweep("central", "+experiment=ppo_breakout_16 run.max_train_seconds=100 topology.overlap=on",
              "algo.autocast=bfloat16 algo.channels_last=true algo.capture=fused algo.epochs=4,3"),
        report("report", "ceiling", "central")],
    "breakout_fused_groups": [  # the fused update with every serve size captured before the clock,
        # 4 game groups a simulator (a shorter round trip to hide), 4 or 3 epochs
        ceiling("ceiling", BREAKOUT, "+experiment/breakout=ceiling run.max_train_seconds=80"),
        sweep("central", "+experiment=ppo_breakout_16 run.max_train_seconds=100 topology.overlap=on",
              "algo.autocast=bfloat16 algo.channels_last=true algo.capture=fused topology.env_groups=4",
              "algo.epochs=4,3"),
        report("report", "ceiling", "central")],
    "breakout_serve": [  # the preset's share of the ceiling after the serve pipeline (rows built per
        # serve, the next arrivals taken in while a serve's pass runs), as-is and with bf16 + channels-last
        ceiling("ceiling", BREAKOUT, "+experiment/breakout=ceiling run.max_train_seconds=80"),
        sweep("central", "+experiment=ppo_breakout_16 run.max_train_seconds=90"),
        sweep("central_levers", "+experiment=ppo_breakout_16 run.max_train_seconds=90",
              "algo.autocast=bfloat16 algo.channels_last=true"),
        report("report", "ceiling", "central", "central_levers")],
    "breakout_groups4": [  # a 4-GPU host: the ceiling on 64 ranks, one group alone, the four groups
        ceiling("ceiling", BREAKOUT, "+experiment/breakout=ceiling world_size=64 run.max_train_seconds=90"),
        sweep("one_group", "+experiment=ppo_breakout_groups4 topology.learners=1 world_size=16",
              "run.max_train_seconds=90"),
        sweep("four_groups", "+experiment=ppo_breakout_groups4 run.max_train_seconds=90"),
        report("report", "ceiling", "one_group", "four_groups")],
    "breakout_layouts": [
        *(sweep(layout, BREAKOUT, "+experiment/breakout=ceiling,central run.max_train_seconds=40",
                "world_size={} env.num_envs={} env.num_threads={}".format(*layout.split("x")))
          for layout in LAYOUTS),
        sweep("star_16x8x1", BREAKOUT, "+experiment/breakout=star run.max_train_seconds=40"),
        report("report", *LAYOUTS, "star_16x8x1")],
}


def plan_check(overrides: list[str], breakout: bool = False) -> list[Step]:
    """The planner against measurement: the plan (probe and calibration on the idle machine), every
    cell it covers measured by a sweep, one job at a time, then the plan's cells beside the
    measured ones. ``world_size=`` and ``topology=`` among the overrides choose the cells. DQN
    LunarLander (``plan_check``: the topology_throughput preset's jobs, default 1,2 ranks and every
    built-in topology, ``env.sim_cost_ms`` 1), or ``breakout``: the ppo_breakout_16 preset's
    central and star at 4, 8 and 16 ranks and ``env.num_envs=`` games a simulator (default 8: the
    plan's ``--games``), 40 s of training a measured job. ``seed=0,1,...`` measures every cell once
    a seed, the seeds in the outer loop (each cell's runs spread over the check's time, their
    mean compared; the plan takes the first seed): two runs of one config differ by 10-20% on
    the hosts measured, as much as a cell's tolerance."""
    if breakout:
        chosen = {"world_size": "4,8,16", "topology": "central,star", "env.num_envs": "8"}
    else:
        from drlmpi.topologies.core.registry import built_in  # here: it imports torch

        chosen = {"world_size": "1,2", "topology": ",".join(built_in()), "env.sim_cost_ms": "1"}
    chosen["seed"] = "0"
    rest = [o for o in overrides if o.partition("=")[0] not in chosen]
    chosen.update(o.split("=", 1) for o in overrides if o.partition("=")[0] in chosen)
    # what the plan and the measured sweep share, what only the plan takes, what only the sweep
    if breakout:
        config = ["+experiment=ppo_breakout_16", "run.max_train_seconds=40", *rest]
        planned, measured = ["--games", chosen["env.num_envs"]], [f"env.num_envs={chosen['env.num_envs']}"]
    else:
        config = ["algo=dqn", "env=lunarlander", "run.max_env_steps=3000",
                  f"env.sim_cost_ms={chosen['env.sim_cost_ms']}", *rest]
        planned, measured = [], ["+experiment=topology_throughput"]
    cells = ["--ranks", chosen["world_size"], "--topologies", chosen["topology"]]
    plan = f"{OUT}/plan.json"
    first_seed = f"seed={chosen['seed'].split(',')[0]}"
    return [Step(["drlmpi.plan", *config, first_seed, *cells, *planned, "--seconds", "1", "--out", plan],
                 log="plan.md", once=True),
            sweep("measured", *measured, f"seed={chosen['seed']}", *config, f"topology={chosen['topology']}",
                  f"world_size={chosen['world_size']} hydra.launcher.timeout_s=300"),
            Step(["drlmpi.plan", "--plan", plan, "--compare", f"{OUT}/measured"], log="compare.md")]


PARTS = sorted([*STEPS, "plan_check", "plan_check_breakout"])


def steps(part: str, overrides: list[str]) -> list[Step]:
    """The commands of ``part`` (:data:`PARTS`) with the command line's overrides."""
    if part.startswith("plan_check"):
        return plan_check(overrides, breakout=part == "plan_check_breakout")
    return STEPS[part]


def command(step: Step, out: Path, overrides: list[str], dry_run: bool = False) -> list[str]:
    """The step's command line: OUT filled in; a sweep's own values replaced by the overrides of
    the same key, the overrides added, then its folder (and, dry, ``hydra.launcher.dry_run``)."""
    args = [a.replace(OUT, str(out)) for a in step.args]
    if step.into is not None:
        taken = [o for o in overrides if step.takes(o)]
        keys = {o.partition("=")[0] for o in taken}
        args = [a for a in args if a.partition("=")[0] not in keys] + taken
        args += [f"hydra.sweep.dir={out / step.into}"] + (["hydra.launcher.dry_run=true"] if dry_run else [])
    return [sys.executable, "-m", *args]


def run(cmd: list[str], log: Path | None) -> int:
    """Run ``cmd``, its output shown (and copied to ``log``); its exit status."""
    if log is None:
        return subprocess.run(cmd).returncode
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc, \
            open(log, "w") as fh:
        for line in proc.stdout:
            sys.stdout.write(line)
            fh.write(line)
    return proc.returncode


def read_done(out: Path) -> list[str]:
    """The commands of ``once`` steps that succeeded in ``out`` (none when it has no list)."""
    try:
        done = json.loads((out / DONE).read_text())
    except (OSError, ValueError):
        return []
    return [str(line) for line in done] if isinstance(done, list) else []


def keep_artifacts(out: Path) -> None:
    """Trim every run under ``out`` to the artifact layout (see the module docstring)."""
    for summary in out.rglob("summary.json"):
        run_dir = summary.parent
        for name in ("checkpoint", "tb"):
            shutil.rmtree(run_dir / name, ignore_errors=True)
        for path in [*run_dir.glob("*.pt"), *run_dir.glob("rank*.log")]:
            if path.name != "rank0.log":
                path.unlink()
    for plot in out.glob("report*/*.png"):
        plot.unlink()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = ArgumentParser(
        prog="python -m drlmpi.bench.headline",
        description="Run one study of docs/results/ - its presets' sweeps, benchmarks and report - into OUT "
                    "(the parts and their times: docs/experiments.md).")
    parser.add_argument("part", choices=PARTS)
    parser.add_argument("out", type=Path, help="the study's folder")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE for every sweep of the part")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, list each sweep's jobs")
    parser.add_argument("--keep-all", action="store_true", help="keep checkpoints, policies and every log")
    args = parser.parse_intermixed_args(argv)
    out = args.out.resolve()
    try:  # the study's folder, before any sweep starts in it
        check_output_folder("OUT", args.out)
    except ConfigError as exc:
        parser.error(str(exc))
    commands = steps(args.part, args.overrides)
    if not args.dry_run:
        from drlmpi.sweep import provenance

        provenance.write(out, ["python", "-m", "drlmpi.bench.headline", *argv])
    failed, done = [], read_done(out)
    for step in commands:
        cmd = command(step, out, args.overrides, args.dry_run)
        line = " ".join(cmd[1:])
        print(f"$ python {line}", flush=True)
        if args.dry_run and step.into is None:
            continue
        if step.once and line in done:
            print(f"(done by an earlier run into this folder: kept; remove {out / DONE} to run it again)",
                  flush=True)
            continue
        if run(cmd, None if step.log is None or args.dry_run else out / step.log) != 0:
            failed.append(" ".join(cmd[2:4]))
        elif step.once and not args.dry_run:
            done.append(line)
            (out / DONE).write_text(json.dumps(done, indent=1) + "\n")
    if not args.dry_run and not args.keep_all:
        keep_artifacts(out)
    for what in failed:
        print(f"drlmpi.bench.headline: {what} ...: failed (its output above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
