#!/usr/bin/env bash
# The simulator-bound scaling table with the device learner, and the raw-stepping ceiling,
# in ONE invocation on one GPU machine (16 cores): DQN on LunarLander-v3 with 1 ms of CPU work per
# environment step (env.sim_cost_ms=1), device=cuda, captured updates.
#
#   bash experiments/device_scaling.sh [OUT_DIR] [extra overrides...]
#   SIZES=1,2,4,8,16 STEPS=20000 bash experiments/device_scaling.sh multirun/scaling
#
# Jobs run one at a time (the launcher), each rank on its own core. Sweeps:
#   device learner, algo.updates_per_graph=$PER_GRAPH (default 4): sequential, star, async,
#     allgather and parameter_server (gradient exchanges between captured segments);
#   star with one update per graph replay (the earlier learner), for comparison;
#   algo=random under allgather: N ranks stepping with no learner (the ceiling).
# Then the report of all of them (OUT_DIR/report/report.md).
set -u
cd "$(dirname "$0")/.."
out=${1:-multirun/device_scaling}
shift || true
sizes=${SIZES:-1,8,16}
steps=${STEPS:-20000}
per_graph=${PER_GRAPH:-4}
launch=(hydra.launcher.mpiexec="${MPIEXEC:-[mpirun,--oversubscribe,--bind-to,none]}")
common=(+experiment=topology_throughput env.sim_cost_ms=1 run.max_env_steps="$steps" "${launch[@]}")
python -m drlmpi "${common[@]}" device=cuda algo=dqn algo.updates_per_graph="$per_graph" \
    topology=sequential,star,async,allgather,parameter_server world_size="$sizes" \
    hydra.sweep.dir="$out/device_k$per_graph" "$@"
python -m drlmpi "${common[@]}" device=cuda algo=dqn algo.updates_per_graph=1 topology=star \
    world_size="${STAR_K1_SIZES:-16}" hydra.sweep.dir="$out/device_k1" "$@"
python -m drlmpi "${common[@]}" algo=random topology=allgather world_size="$sizes" \
    hydra.sweep.dir="$out/ceiling" "$@"
python -m drlmpi.report "$out/device_k$per_graph" "$out/device_k1" "$out/ceiling" --out "$out/report"
