#!/usr/bin/env bash
# The planner against measurement, in ONE invocation on one machine: the topology_throughput
# preset's cells for one simulated step cost (every topology at 1, 2, 4, 8, 16 ranks, one job at
# a time), then `python -m drlmpi.plan` of the same config with --compare: predicted and
# measured env steps/s per cell, the error of each, and the share within +-25%.
#
#   bash experiments/plan_check.sh [OUT_DIR] [overrides...]
#   STEPS=3000 RANKS=1,2,4,8,16 bash experiments/plan_check.sh multirun/plan_check env.sim_cost_ms=1
# On Open MPI: MPIEXEC="mpirun --oversubscribe --bind-to none" (the sweep and the ping-pong).
set -u
cd "$(dirname "$0")/.."
out=${1:-multirun/plan_check}
shift || true
steps=${STEPS:-3000}
ranks=${RANKS:-1,2,4,8,16}
topologies=${TOPOLOGIES:-sequential,p2p,star,async,allgather,parameter_server,groups,central}
launcher=${MPIEXEC:-mpiexec}
python -m drlmpi +experiment=topology_throughput algo=dqn "topology=$topologies" "world_size=$ranks" \
    run.max_env_steps="$steps" hydra.sweep.dir="$out/measured" hydra.launcher.timeout_s=120 \
    "hydra.launcher.mpiexec=[${launcher// /,}]" "$@" 2>&1 | grep -E "ok|FAILED|skipped:|sweep:" | tail -40
DRLMPI_PLAN_MPIEXEC="$launcher" python -m drlmpi.plan algo=dqn env=lunarlander run.max_env_steps="$steps" \
    "$@" --ranks "$ranks" --topologies "$topologies" --out "$out/plan.json" --compare "$out/measured"
