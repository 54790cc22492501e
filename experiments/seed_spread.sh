#!/usr/bin/env bash
# How many env steps DQN LunarLander needs to reach its threshold, seed by seed: sequential
# against star with RANKS-1 simulators, each run to the threshold (or BUDGET steps), written in
# the artifact layout (docs/results.md, "Why DQN LunarLander's speedups differ from seed to seed"):
#
#   bash experiments/seed_spread.sh OUT_DIR [extra overrides...]
#
# SEEDS (default "0 1 2 3 4"), SYNC (star's topology.sync_every values, default "256"), RANKS
# (default 16), BUDGET (default 300000), JOBS (runs at once, default 2), SEQUENTIAL (0: star runs
# only, to add a SYNC value to a study that has its sequential runs; default 1). The star runs are
# STAND-INS unless STANDIN=0: `mpiexec -n 2` with env.num_envs=RANKS-1, one simulator stepping
# RANKS-1 environments - the same rounds (sync_every steps of each of RANKS-1 environments, the
# same rows, the same one-round policy lag, epsilon on job-wide steps) as RANKS-1 simulators of
# one environment each, on a machine with 2 cores. Env steps to the threshold do not depend on
# the machine's speed (star's rounds are collective); seconds do, so this study reads steps.
# MPIEXEC: the launcher (default "mpiexec"). The report's tables: OUT_DIR/report.
set -u
cd "$(dirname "$0")/.."
out=${1:?usage: bash experiments/seed_spread.sh OUT_DIR [overrides...]}
shift
mpiexec=(${MPIEXEC:-mpiexec})
seeds=${SEEDS:-0 1 2 3 4}
ranks=${RANKS:-16}
budget=${BUDGET:-300000}
mkdir -p "$out"
python experiments/provenance.py "$out" -- bash experiments/seed_spread.sh "$out" "$@" \
    "(SEEDS=$seeds SYNC=${SYNC:-256} RANKS=$ranks BUDGET=$budget STANDIN=${STANDIN:-1} SEQUENTIAL=${SEQUENTIAL:-1})"

common=(algo=dqn env=lunarlander run.max_env_steps="$budget" run.progress_every_s=0 "$@")
. experiments/artifacts.sh  # keep RUN_DIR, report OUT_DIR RUN_DIR...
if [ "${STANDIN:-1}" = 1 ]; then
    launch="${mpiexec[*]} -n 2 python -m mpi4py -m drlmpi env.num_envs=$((ranks - 1))"
else
    launch="${mpiexec[*]} -n $ranks python -m mpi4py -m drlmpi"
fi
jobs=()
for seed in $seeds; do
    if [ "${SEQUENTIAL:-1}" = 1 ]; then
        jobs+=("sequential_seed$seed|python -m drlmpi topology=sequential seed=$seed")
    fi
    for sync in ${SYNC:-256}; do
        jobs+=("star${ranks}_sync${sync}_seed$seed|$launch topology=star topology.sync_every=$sync seed=$seed")
    done
done
run_study "${jobs[@]}"
report "$out" "$out"/*_seed*
