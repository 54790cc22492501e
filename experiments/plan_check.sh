#!/usr/bin/env bash
# The planner against measurement, in ONE invocation on one machine: `python -m drlmpi.plan` of a
# config first (its probe and calibration run on the idle machine, as a user would run them), then
# every cell measured - each topology at each size it accepts, one real job at a time - then the
# plan's cells next to the measured ones: each error, the share within +-25%, the median signed
# error and how the recommended cell measured. Everything lands in OUT_DIR (plan.json, compare.md,
# measured/*/summary.json).
#
#   bash experiments/plan_check.sh [OUT_DIR] [overrides...]
#   STEPS=3000 RANKS=1,4,8,16 TOPOLOGIES=sequential,star,async,allgather \
#       bash experiments/plan_check.sh multirun/plan_check env.sim_cost_ms=1
# MEASURE=jobs (default) runs the cells in one MPI launch, each job in-process on the first n
#   ranks while the others sleep (python -m drlmpi.planner.jobs --measure: one start-up for all);
#   MEASURE=sweep runs them as the topology_throughput preset's sweep, one mpiexec per job.
# REPEATS=R (MEASURE=jobs) measures every cell R times (interleaved rounds; the comparison takes each cell's mean):
#   runs of one config differ by 10-20% on the hosts measured, as much as the tolerance.
# PLAN_SECONDS=S is the plan's --seconds (default 1; the calibration trains 4 S per topology).
# On Open MPI: MPIEXEC="mpirun --oversubscribe --bind-to none" (the probe, calibration and cells).
set -u
cd "$(dirname "$0")/.."
out=${1:-multirun/plan_check}
shift || true
steps=${STEPS:-3000}
ranks=${RANKS:-1,2}
topologies=${TOPOLOGIES:-sequential,p2p,star,async,allgather,parameter_server,groups,central}
launcher=${MPIEXEC:-mpiexec}
mkdir -p "$out"
export DRLMPI_PLAN_MPIEXEC="$launcher"
python -m drlmpi.plan algo=dqn env=lunarlander run.max_env_steps="$steps" "$@" \
    --ranks "$ranks" --topologies "$topologies" --seconds "${PLAN_SECONDS:-1}" --out "$out/plan.json" \
    | tee "$out/plan.md" || exit 1
if [ "${MEASURE:-jobs}" = sweep ]; then
  python -m drlmpi +experiment=topology_throughput algo=dqn "topology=$topologies" "world_size=$ranks" \
      run.max_env_steps="$steps" hydra.sweep.dir="$out/measured" \
      hydra.launcher.timeout_s=300 "hydra.launcher.mpiexec=[${launcher// /,}]" "$@" 2>&1 \
      | grep -E "FAILED|sweep:" | tail -5
else
  python -m drlmpi.planner.jobs --measure "$out/measured" --ranks "$ranks" --topologies "$topologies" \
      --repeats "${REPEATS:-1}" \
      algo=dqn env=lunarlander run.max_env_steps="$steps" "$@" 2>&1 | grep -E "drlmpi.planner.jobs|Error" | tail -5
fi
python -m drlmpi.plan --plan "$out/plan.json" --compare "$out/measured" | tee "$out/compare.md"
