#!/usr/bin/env bash
# PPO Breakout env steps/s at 16 ranks on one GPU host, in ONE invocation: star, central and
# allgather (each rank acting on the GPU), next to the raw-stepping ceiling (algo=random under
# allgather: 16 ranks stepping the same Atari pipeline, no learner), then the report.
#
#   bash experiments/central_breakout.sh [OUT_DIR] [extra overrides...]
#   SECONDS_PER_RUN=60 RANKS=16 bash experiments/central_breakout.sh multirun/central_breakout
set -u
cd "$(dirname "$0")/.."
out=${1:-multirun/central_breakout}
shift || true
ranks=${RANKS:-16}
seconds=${SECONDS_PER_RUN:-45}
mpirun=(${MPIEXEC:-mpirun --oversubscribe --bind-to none} -n "$ranks")
common=(algo=ppo env=breakout device=cuda run.max_env_steps=null run.max_train_seconds="$seconds"
        run.eval_every=1000000000 run.progress_every_s=15)
for topology in star central allgather; do
    extra=()
    [ "$topology" = star ] && extra=(topology.sync_every=16)
    "${mpirun[@]}" python -m mpi4py -m drlmpi "${common[@]}" topology=$topology "${extra[@]}" \
        hydra.run.dir="$out/$topology" "$@" 2>&1 | grep -v "^\[.*progress\]" | tail -4
done
# env.num_envs=8: the games a rank steps under algo=ppo (conf/tuned/atari/ppo.yaml), which
# algo=random does not load - the same pipeline, not one game a rank
"${mpirun[@]}" python -m mpi4py -m drlmpi "${common[@]}" algo=random topology=allgather env.num_envs=8 \
    hydra.run.dir="$out/ceiling" "$@" 2>&1 | tail -3
python -m drlmpi.report "$out/star" "$out/central" "$out/allgather" "$out/ceiling" --out "$out/report" >/dev/null
sed -n '/^## Throughput/,/^## Plots/p' "$out/report/report.md" | grep -v "^## Plots"
