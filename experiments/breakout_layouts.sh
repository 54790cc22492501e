#!/usr/bin/env bash
# Breakout env steps/s on one GPU host by layout of ranks and AtariVectorEnv threads, in ONE
# invocation: for each layout "RANKS:ENVS:THREADS" (ENVS environments per stepping rank, stepped
# by THREADS C++ threads), the raw-stepping ceiling (algo=random, allgather: every rank steps,
# no learner) and PPO under central (rank 0 learns and acts for the others), then star (16 ranks,
# one thread each), then the report's throughput table.
#
#   bash experiments/breakout_layouts.sh [OUT_DIR] [extra overrides...]
#   SECONDS_PER_RUN=40 LAYOUTS="16:8:1 6:24:3 4:40:5" bash experiments/breakout_layouts.sh multirun/layouts
#
# A central layout's learner rank steps nothing, so RANKS-1 simulators x THREADS should stay
# within the host's cores; the ceiling runs RANKS x THREADS stepping threads.
set -u
cd "$(dirname "$0")/.."
out=${1:-multirun/breakout_layouts}
shift || true
seconds=${SECONDS_PER_RUN:-40}
layouts=${LAYOUTS:-16:8:1 6:24:3 4:40:5}
mpirun=(${MPIEXEC:-mpirun --oversubscribe --bind-to none})
common=(env=breakout device=cuda run.max_env_steps=null run.max_train_seconds="$seconds"
        run.eval_every=1000000000 run.progress_every_s=0)
dirs=()
run() {  # run NAME RANKS overrides...
    local name=$1 ranks=$2
    shift 2
    "${mpirun[@]}" -n "$ranks" python -m mpi4py -m drlmpi "${common[@]}" hydra.run.dir="$out/$name" "$@" \
        2>&1 | tail -2
    dirs+=("$out/$name")
}
for layout in $layouts; do
    IFS=: read -r ranks envs threads <<< "$layout"
    tag="${ranks}x${envs}x${threads}"
    run "ceiling_$tag" "$ranks" algo=random topology=allgather env.num_envs="$envs" \
        env.num_threads="$threads" "$@"
    run "central_$tag" "$ranks" algo=ppo topology=central env.num_envs="$envs" \
        env.num_threads="$threads" "$@"
done
run star_16x8x1 16 algo=ppo topology=star topology.sync_every=16 "$@"
python -m drlmpi.report "${dirs[@]}" --out "$out/report" >/dev/null
sed -n '/^## Throughput/,/^## Plots/p' "$out/report/report.md" | grep -v "^## Plots"
