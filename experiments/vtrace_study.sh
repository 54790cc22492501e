#!/usr/bin/env bash
# Async PPO with and without the V-trace correction: env steps to the threshold, seed by seed,
# for the five settings of docs/results.md, "Async PPO: V-trace and the decoupled objective
# (dev)", written in the artifact layout:
#
#   bash experiments/vtrace_study.sh OUT_DIR [extra overrides...]
#
# Every run is `mpiexec -n 3 python -m mpi4py -m drlmpi algo=ppo topology=async world_size=3`
# (1 learner + 2 simulators) with `seed=S algo.vtrace=V run.progress_every_s=0`, the setting's
# overrides and the extra overrides, into OUT_DIR/<setting>_vtrace<V>_seed<S>. SETTINGS (default
# all five, in this order, the longest first):
#   lunarlander          env=lunarlander (tuned: 16,384-row rollouts, 1e6 steps)
#   pendulum             env=pendulum run.max_env_steps=200000 (tuned: 4,096-row rollouts)
#   cartpole_sb3         env=cartpole with SB3's PPO defaults (2,048-row rollouts, batch 64,
#                        10 epochs, lr 3e-4, gamma 0.99, lambda 0.95), 150,000 steps, eval every 8,192
#   cartpole             env=cartpole (tuned: 256-row rollouts, 20 updates each)
#   cartpole_publish200  env=cartpole topology.publish_every=200 (weights every 10 rollouts)
# SEEDS (default "0 1 2", and "0 1 2 3 4" for cartpole_publish200 as in the section; when set,
# every setting uses it), VTRACE (algo.vtrace values, default "true false"), JOBS (runs at once,
# default 2), MPIEXEC (the launcher, default "mpiexec"). Each call writes provenance.json, or
# provenance_<tag>.json with TAG=<tag> (to add runs to a folder without overwriting the first
# call's). Under async the learner and the simulators do not wait for each other, so the policy
# lag, and with it the steps to the threshold, depend on the machine's speed and load. The
# report's tables (over every run in OUT_DIR): OUT_DIR/report.
set -u
cd "$(dirname "$0")/.."
out=${1:?usage: bash experiments/vtrace_study.sh OUT_DIR [overrides...]}
shift
mpiexec=(${MPIEXEC:-mpiexec})
settings=${SETTINGS:-lunarlander pendulum cartpole_sb3 cartpole cartpole_publish200}
vtrace=${VTRACE:-true false}
mkdir -p "$out"
python experiments/provenance.py "$out" -- bash experiments/vtrace_study.sh "$out" "$@" \
    "(SETTINGS=$settings SEEDS=${SEEDS:-default} VTRACE=$vtrace JOBS=${JOBS:-2})"
if [ -n "${TAG:-}" ]; then mv "$out/provenance.json" "$out/provenance_$TAG.json"; fi

. experiments/artifacts.sh  # keep RUN_DIR, report OUT_DIR RUN_DIR...
overrides() {  # overrides SETTING: the setting's overrides (the section's ```bash block)
    case $1 in
        lunarlander) echo "env=lunarlander" ;;
        pendulum) echo "env=pendulum run.max_env_steps=200000" ;;
        cartpole_sb3) echo "env=cartpole algo.rollout_steps=2048 algo.batch_size=64 algo.epochs=10" \
            "algo.lr=3e-4 algo.gamma=0.99 algo.gae_lambda=0.95 run.max_env_steps=150000 run.eval_every=8192" ;;
        cartpole) echo "env=cartpole" ;;
        cartpole_publish200) echo "env=cartpole topology.publish_every=200" ;;
        *) echo "unknown setting $1" >&2; return 1 ;;
    esac
}
common=(run.progress_every_s=0 "$@")
launch="${mpiexec[*]} -n 3 python -m mpi4py -m drlmpi algo=ppo topology=async world_size=3"
jobs=()
for setting in $settings; do
    extra=$(overrides "$setting") || exit 2
    if [ "$setting" = cartpole_publish200 ]; then seeds=${SEEDS:-0 1 2 3 4}; else seeds=${SEEDS:-0 1 2}; fi
    for seed in $seeds; do
        for v in $vtrace; do
            jobs+=("${setting}_vtrace${v}_seed$seed|$launch $extra seed=$seed algo.vtrace=$v")
        done
    done
done
run_study "${jobs[@]}"
report "$out" "$out"/*_seed*
