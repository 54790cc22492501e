#!/usr/bin/env bash
# Fused against captured off-policy updates where users feel them: DQN on LunarLander-v3 with 1 ms
# of CPU work per environment step (env.sim_cost_ms=1), device learner, sequential / star / async
# at 1 / 8 / 16 ranks, next to the raw-stepping ceiling - in ONE invocation on one GPU machine.
#
#   bash experiments/fused_scaling.sh [OUT_DIR] [extra overrides...]
#   STEPS=30000 SIZES=8,16 bash experiments/fused_scaling.sh multirun/fused_scaling
#
# Sweeps (jobs one at a time, each rank on its own core):
#   fused/    algo.capture=fused (the default on CUDA): sequential 1, star and async at SIZES
#   graph/    algo.capture=graph (the captured update before fusion): the same cells
#   ceiling/  algo=random under allgather at SIZES: N ranks stepping with no learner
#   fused/ramp/  with RAMP=N only: fused star at SIZES with topology.ramp_from=N (short first rounds)
#   fused/separate/  with SEPARATE=1 only: fused sequential and star at SIZES with
#             algo.target_forward=separate (the target network in a pass of its own, as before
#             the paired pass): the paired pass's worth in a job
# MODES: the capture modes swept (default "fused graph"; MODES=fused skips the graph cells).
# Then one report per capture mode (OUT_DIR/report_fused, OUT_DIR/report_graph), each with the
# ceiling, whose throughput tables give the speedups over sequential and the ceiling's share.
set -u
cd "$(dirname "$0")/.."
out=${1:-multirun/fused_scaling}
shift || true
sizes=${SIZES:-8,16}
steps=${STEPS:-25000}
launch=(hydra.launcher.mpiexec="${MPIEXEC:-[mpirun,--oversubscribe,--bind-to,none]}")
common=(+experiment=topology_throughput env.sim_cost_ms=1 run.max_env_steps="$steps" "${launch[@]}")
modes=${MODES:-fused graph}
for mode in $modes; do
  python -m drlmpi "${common[@]}" device=cuda algo=dqn algo.capture=$mode topology=sequential \
      world_size=1 hydra.sweep.dir="$out/$mode/sequential" "$@"
  python -m drlmpi "${common[@]}" device=cuda algo=dqn algo.capture=$mode topology=star,async \
      world_size="$sizes" hydra.sweep.dir="$out/$mode/parallel" "$@"
done
python -m drlmpi "${common[@]}" algo=random topology=allgather world_size="$sizes" \
    hydra.sweep.dir="$out/ceiling" "$@"
extra=()
if [ -n "${RAMP:-}" ]; then
  python -m drlmpi "${common[@]}" device=cuda algo=dqn algo.capture=fused topology=star \
      topology.ramp_from="$RAMP" world_size="$sizes" hydra.sweep.dir="$out/fused/ramp" "$@"
  extra=("$out/fused/ramp")
fi
if [ -n "${SEPARATE:-}" ]; then
  python -m drlmpi "${common[@]}" device=cuda algo=dqn algo.capture=fused algo.target_forward=separate \
      topology=sequential world_size=1 hydra.sweep.dir="$out/fused/separate/sequential" "$@"
  python -m drlmpi "${common[@]}" device=cuda algo=dqn algo.capture=fused algo.target_forward=separate \
      topology=star world_size="$sizes" hydra.sweep.dir="$out/fused/separate/parallel" "$@"
  python -m drlmpi.report "$out/fused/separate/sequential" "$out/fused/separate/parallel" "$out/ceiling" \
      --out "$out/report_fused_separate" > /dev/null
fi
for mode in $modes; do
  runs=("$out/$mode/sequential" "$out/$mode/parallel")
  if [ "$mode" = fused ]; then runs+=("${extra[@]}"); fi
  python -m drlmpi.report "${runs[@]}" "$out/ceiling" --out "$out/report_$mode" > /dev/null
done
