#!/usr/bin/env bash
# The planner against measurement, in ONE invocation on one machine: `python -m drlmpi.plan` of
# a config first (its probe runs on the idle machine, as a user would run it), then the
# topology_throughput preset's cells of the same config (every topology at 1, 2, 4, 8, 16 ranks,
# one job at a time), then the plan's cells next to the measured ones: the error of each and the
# share within +-25%.
#
#   bash experiments/plan_check.sh [OUT_DIR] [overrides...]
#   STEPS=3000 RANKS=1,2,4,8,16 bash experiments/plan_check.sh multirun/plan_check env.sim_cost_ms=1
# On Open MPI: MPIEXEC="mpirun --oversubscribe --bind-to none" (the sweep and the probe's MPI part).
set -u
cd "$(dirname "$0")/.."
out=${1:-multirun/plan_check}
shift || true
steps=${STEPS:-3000}
ranks=${RANKS:-1,2,4,8,16}
topologies=${TOPOLOGIES:-sequential,p2p,star,async,allgather,parameter_server,groups,central}
launcher=${MPIEXEC:-mpiexec}
mkdir -p "$out"
DRLMPI_PLAN_MPIEXEC="$launcher" python -m drlmpi.plan algo=dqn env=lunarlander run.max_env_steps="$steps" \
    "$@" --ranks "$ranks" --topologies "$topologies" --out "$out/plan.json"
python -m drlmpi +experiment=topology_throughput algo=dqn "topology=$topologies" "world_size=$ranks" \
    run.max_env_steps="$steps" hydra.sweep.dir="$out/measured" hydra.launcher.timeout_s=120 \
    "hydra.launcher.mpiexec=[${launcher// /,}]" "$@" 2>&1 | grep -E "FAILED|sweep:" | tail -5
python -m drlmpi.plan --plan "$out/plan.json" --compare "$out/measured"
