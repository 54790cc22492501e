#!/usr/bin/env bash
# The planner's acceptance check on a GPU host: experiments/plan_check.sh in each regime of DQN
# LunarLander-v3 - env.sim_cost_ms 1 and 0, the learner on the CPU and on CUDA - topologies
# sequential/star/async/allgather at 1, 4, 8, 16 ranks; OUT_DIR/<regime>/ holds plan.json,
# plan.md, compare.md and every cell's summary.json.
#
#   MPIEXEC="mpirun --oversubscribe --bind-to none" bash experiments/plan_check_regimes.sh OUT_DIR [REGIME ...]
# REGIME: cpu_sim1 cpu_sim0 cuda_sim1 cuda_sim0 (default: all four). STEPS_CPU (3000) and
# STEPS_CUDA (6000) set each job's step budget (a device learner runs several times faster).
set -u
cd "$(dirname "$0")/.."
out=${1:-multirun/plan_regimes}
shift || true
mkdir -p "$out"
regimes=("$@")
[ ${#regimes[@]} -eq 0 ] && regimes=(cpu_sim1 cpu_sim0 cuda_sim1 cuda_sim0)
for regime in "${regimes[@]}"; do
  device=${regime%_*}
  sim=${regime#*_sim}
  steps=${STEPS_CPU:-3000}
  [ "$device" = cuda ] && steps=${STEPS_CUDA:-6000}
  started=$(date +%s)
  STEPS=$steps RANKS=${RANKS:-1,4,8,16} TOPOLOGIES=${TOPOLOGIES:-sequential,star,async,allgather} \
      bash experiments/plan_check.sh "$out/$regime" "env.sim_cost_ms=$sim" "device=$device" > "$out/$regime.log" 2>&1
  echo "== $regime: $(( $(date +%s) - started )) s"
  tail -4 "$out/$regime/compare.md" 2>/dev/null
done
