#!/usr/bin/env bash
# Acting-bound DQN throughput, two commits side by side in ONE invocation on one machine:
# sequential DQN on LunarLander-v3 with no simulated cost and no learning (learning_starts above
# the budget), so env steps/s is the environment plus the simulator's act path. Each commit runs
# from its own git worktree, alternating, REPEATS times.
#
#   bash experiments/act_cost.sh OUT_DIR BEFORE_COMMIT [AFTER_COMMIT (default HEAD)]
#
# OUT_DIR/<label>_<i>/ keeps each run (summary.json, metrics.csv, rank 0's log, .hydra/), labels
# "before" and "after"; provenance.json records the command and both commits.
set -u
cd "$(dirname "$0")/.."
out=${1:?usage: bash experiments/act_cost.sh OUT_DIR BEFORE_COMMIT [AFTER_COMMIT]}
before=${2:?usage: bash experiments/act_cost.sh OUT_DIR BEFORE_COMMIT [AFTER_COMMIT]}
after=${3:-HEAD}
repeats=${REPEATS:-3}
steps=${STEPS:-20000}
mkdir -p "$out"
out=$(cd "$out" && pwd)
DRLMPI_COMMIT="$(git rev-parse --short "$before") (before) and $(git rev-parse --short "$after") (after)" \
    python experiments/provenance.py "$out" -- bash experiments/act_cost.sh "$out" "$before" "$after" \
    "(REPEATS=$repeats STEPS=$steps)"
. experiments/artifacts.sh
trees=$(mktemp -d)
git worktree add -q "$trees/before" "$before" && git worktree add -q "$trees/after" "$after"
for i in $(seq 1 "$repeats"); do
    for label in before after; do
        (cd "$trees/$label" && PYTHONPATH="$trees/$label" python -m drlmpi env=lunarlander env.sim_cost_ms=0 \
            run.max_env_steps="$steps" algo.learning_starts=1000000000 run.eval_every=1000000000 \
            run.progress_every_s=0 hydra.run.dir="$out/${label}_$i" 2>&1 | grep throughput | sed "s/^/$label $i:/")
        keep "$out/${label}_$i"
    done
done
git worktree remove --force "$trees/before" && git worktree remove --force "$trees/after"
rm -rf "$trees"
