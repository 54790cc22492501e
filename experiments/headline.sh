#!/usr/bin/env bash
# The headline figures on one 16-core GPU host, written straight into the artifact layout of
# docs/results/ (docs/results.md; each part's folder gets its runs' summary.json, metrics.csv,
# rank 0's log and composed config (.hydra/), the report's tables and provenance.json: command, commit, machine, versions).
# Each part fits one accelerator call (10 minutes at most):
#
#   bash experiments/headline.sh PART OUT_DIR [extra overrides...]
#
#   learner          learner updates/s: DQN, TD3 and PPO at batch 64 (MLP) and DQN and PPO on
#                    Atari frames at batch 256, CPU against the device modes (bench.json,
#                    bench_atari.json; 3.0 min on an H100 host)
#   learner_modes    the captured against the fused update (DQN, TD3 at batch 64, 128 - the tuned DQN
#                    LunarLander batch, which a job's in-job rate compares with - and 256, with each
#                    device row's kernels per update, TD3 also with algo.twin_critics=stacked:
#                    bench_fused.json) and run.deterministic's cost (DQN, TD3, PPO MLPs and the
#                    Atari CNNs at batch 256, eager and graph: bench_det.json,
#                    bench_det_atari.json); not yet timed, about 5 min by the rows' count (2 s a
#                    row, compiling before each fused one)
#   fused_scaling    DQN LunarLander, env.sim_cost_ms=1: sequential, star and async at 8 and 16
#                    ranks, fused and graph, with the raw-stepping ceiling (6.6 min on an H100
#                    host: give the call its full 10 minutes)
#   steady           DQN LunarLander (env.sim_cost_ms=1, the fused learner) on 16 ranks for STEPS
#                    (default 100,000) env steps: star (paired target pass, the default), star
#                    with algo.target_forward=separate, star with topology.round_rows=960, async,
#                    and the raw-stepping ceiling: the share of the ceiling once start-up and the
#                    first round are a small part of the run (RANKS, DEVICE and MPIEXEC_LIST, the
#                    launcher as a Hydra list, for a smaller check elsewhere; reports in
#                    paired/report and separate/report)
#   bind             star on RANKS (default 16) ranks over STEPS (default 25,000) env steps of DQN
#                    LunarLander (env.sim_cost_ms=1, rounds of 64, 8 updates a replay, TF32),
#                    bind_ranks=none against bind_ranks=core, alternating REPEATS (default 3)
#                    times, with the raw-stepping ceiling under each (OUT/none, OUT/core, a report
#                    each): what pinning each rank to a core buys a job that fills the host
#                    (docs/results/h200host_bind_ranks/bind: the same with mpirun --bind-to core)
#   breakout_share   the raw-stepping ceiling (8 games a rank) and the ppo_breakout_16 preset,
#                    SECONDS each (default 120), in one call: central's share of the ceiling
#   breakout         the ppo_breakout_16 preset for SEEDS (default "0 1 2") under TOPOLOGY
#                    (default central): 8.5-8.8 minutes a seed, so one seed a call
#   dqn_ttt          DQN LunarLander (env.sim_cost_ms=1) to the threshold: sequential and star on
#                    16 ranks for SEEDS (default "0 1 2"), the same evaluation cadence. A seed
#                    takes 1.5-3.5 min when sequential solves in 30k-90k steps, longer when it
#                    needs more (seed 2: not solved at 140k steps after 3.6 min on an H100
#                    host, nor at 138k after 3.8 min on an H200 host: give its sequential run,
#                    TTT_RUNS=sequential, a call of its own), so give a call one or two seeds;
#                    STAR: overrides for the star runs only (STAR="topology.sync_every=64");
#                    TTT_RUNS: which runs (default "sequential star"; TTT_RUNS=star16, or star,
#                    adds star runs to a study's sequential ones); six star runs took 5.7 min
#   td3              TD3 HalfCheetah-v5, star on 8 ranks, 1M steps, seed SEED (default 0), the TD3
#                    paper's evaluation cadence (10 greedy episodes every 5,000 steps) played by
#                    the simulators (run.eval_on=simulators): 311-326 s of wall for 300 s of
#                    training on an H200 host, one seed a call. On the learner's rank
#                    (run.eval_on=learner) the same cadence doubles the wall clock (930k steps took
#                    505 s, 277 s of it training); two seeds side by side on one GPU (8 cores
#                    each) train at ~2,500 env steps/s each against 3,350 alone
#   td3_variants     TD3's fused update at batch 256 with each critic layout, target pass and
#                    matmul precision (bench.learner --stacked-critics --target-forward paired
#                    --precision high medium: TF32 and bfloat16), DQN's at batch 64 and 128 at each
#                    precision, one update and 8 updates a graph replay (rows 'fused x8 ...':
#                    algo.updates_per_graph=8); writes the fastest TD3 variant's overrides to
#                    OUT/fastest_td3.txt (for td3_ttt's arguments)
#   td3_ttt          TD3 HalfCheetah-v5 to a greedy mean of 5,000: sequential and star on 8
#                    ranks for SEEDS (default "0 1 2"; TTT_RUNS and STAR as for dqn_ttt, star8
#                    naming the star runs), both evaluated every 5,000 steps on the
#                    learner (10 episodes, off the training clock). On an H200 host a
#                    sequential run took 80-98 s of wall and a star run 40-69 s, so one seed a
#                    call beside a td3 seed, or three seeds in a call of their own. Star wants
#                    rounds of 64 (STAR="topology.sync_every=64": as many env steps to 5,000 as
#                    sequential, where 256 needed 1.2-1.4x); sequential seeds side by side on one
#                    GPU ran 8-17% slower than alone (docs/results/h200host_td3_ttt_sync64)
#
# The runs' commit: $DRLMPI_COMMIT if set (a copied tree may carry a stale .git), else git's.
# MPIEXEC: the launcher (default "mpirun --oversubscribe --bind-to none").
set -u
cd "$(dirname "$0")/.."
part=${1:?usage: bash experiments/headline.sh PART OUT_DIR [overrides...]}
out=${2:?usage: bash experiments/headline.sh PART OUT_DIR [overrides...]}
shift 2
mpirun=(${MPIEXEC:-mpirun --oversubscribe --bind-to none})
seeds=${SEEDS:-0 1 2}
ttt_runs=${TTT_RUNS:-sequential star}
mkdir -p "$out"
python experiments/provenance.py "$out" -- bash experiments/headline.sh "$part" "$out" "$@" \
    "(SEEDS=$seeds TOPOLOGY=${TOPOLOGY:-central} SECONDS=${SECONDS_PER_RUN:-120} SEED=${SEED:-0} STAR=${STAR:-} TTT_RUNS=$ttt_runs MODES=${MODES:-} RAMP=${RAMP:-} SEPARATE=${SEPARATE:-})"

. experiments/artifacts.sh  # keep RUN_DIR, report OUT_DIR RUN_DIR...
run() {  # run NAME RANKS overrides...: one drlmpi job into OUT_DIR/NAME
    local name=$1 ranks=$2
    shift 2
    "${mpirun[@]}" -n "$ranks" python -m mpi4py -m drlmpi hydra.run.dir="$out/$name" "$@" 2>&1 | tail -3
    keep "$out/$name"
}
throughput() {  # throughput DEFAULT_STEPS: thr=(...), the topology_throughput preset's common
                # arguments for RANKS (default 16) ranks over STEPS (else DEFAULT_STEPS) env steps
    thr=(+experiment=topology_throughput env.sim_cost_ms=1 run.max_env_steps="${STEPS:-$1}"
         world_size="${RANKS:-16}" hydra.launcher.mpiexec="${MPIEXEC_LIST:-[mpirun,--oversubscribe,--bind-to,none]}")
}
ttt() {  # ttt STAR_RANKS overrides...: per seed, sequential then star on STAR_RANKS ranks, to the
         # threshold (${common[@]} first; TTT_RUNS picks the runs, STAR adds to the star ones)
    local ranks=$1
    shift
    for seed in $seeds; do
        case " $ttt_runs " in *" sequential "*)
            run "sequential_seed$seed" 1 "${common[@]}" topology=sequential seed="$seed" "$@" ;;
        esac
        case " $ttt_runs " in *" star "* | *" star$ranks "*)
            run "star${ranks}_seed$seed" "$ranks" "${common[@]}" topology=star seed="$seed" ${STAR:-} "$@" ;;
        esac
    done
    report "$out" "$out"/*_seed*
}

case "$part" in
learner)
    python -m drlmpi.bench.learner --algo dqn td3 ppo --batch 64 --device cpu cuda --seconds 2 \
        --json "$out/bench.json" | tee "$out/bench.txt"
    python -m drlmpi.bench.learner --algo dqn ppo --batch 256 --device cpu cuda --obs atari \
        --seconds 2 --json "$out/bench_atari.json" | tee "$out/bench_atari.txt"
    ;;
learner_modes)
    python -m drlmpi.bench.learner --algo dqn td3 --batch 64 128 256 --device cuda --modes graph fused \
        --kernels --stacked-critics --separate-target --seconds 2 --json "$out/bench_fused.json" | tee "$out/bench_fused.txt"
    python -m drlmpi.bench.learner --algo dqn td3 ppo --batch 256 --device cuda --modes eager graph \
        --deterministic --seconds 2 --json "$out/bench_det.json" | tee "$out/bench_det.txt"
    python -m drlmpi.bench.learner --obs atari --algo ppo dqn --batch 256 --device cuda \
        --modes eager graph --deterministic --seconds 2 --json "$out/bench_det_atari.json" \
        | tee "$out/bench_det_atari.txt"
    ;;
steady)
    throughput 100000
    dev=device=${DEVICE:-cuda}
    python -m drlmpi "${thr[@]}" algo=random topology=allgather hydra.sweep.dir="$out/ceiling" "$@"
    python -m drlmpi "${thr[@]}" "$dev" algo=dqn topology=star,async hydra.sweep.dir="$out/paired" "$@"
    python -m drlmpi "${thr[@]}" "$dev" algo=dqn topology=star topology.round_rows=960 \
        hydra.sweep.dir="$out/paired_rows960" "$@"
    python -m drlmpi "${thr[@]}" "$dev" algo=dqn topology=star algo.target_forward=separate \
        hydra.sweep.dir="$out/separate" "$@"
    for d in $(find "$out" -name summary.json -printf '%h\n'); do keep "$d"; done
    report "$out/paired" "$out/ceiling" "$out/paired" "$out/paired_rows960"
    report "$out/separate" "$out/ceiling" "$out/separate"
    ;;
fused_scaling)
    bash experiments/fused_scaling.sh "$out/runs" "$@"
    for d in $(find "$out/runs" -name summary.json -printf '%h\n'); do keep "$d"; done
    ;;
bind)
    throughput 25000
    star=(device="${DEVICE:-cuda}" algo=dqn topology=star topology.sync_every=64 algo.updates_per_graph=8
          run.matmul_precision=high)
    for b in none core; do
        python -m drlmpi "${thr[@]}" algo=random topology=allgather bind_ranks="$b" \
            hydra.sweep.dir="$out/$b/ceiling" "$@" > /dev/null
    done
    for r in $(seq "${REPEATS:-3}"); do
        for b in none core; do
            python -m drlmpi "${thr[@]}" "${star[@]}" bind_ranks="$b" hydra.sweep.dir="$out/$b/star_$r" "$@" > /dev/null
        done
    done
    for d in $(find "$out" -name summary.json -printf '%h\n'); do keep "$d"; done
    for b in none core; do report "$out/$b" "$out/$b"; done
    ;;
breakout_share)
    s=${SECONDS_PER_RUN:-120}
    run ceiling 16 algo=random topology=allgather env=breakout env.num_envs=8 run.max_env_steps=null \
        run.max_train_seconds="$s" run.eval_every=1000000000 run.progress_every_s=0 "$@"
    run central 16 +experiment=ppo_breakout_16 run.max_train_seconds="$s" "$@"
    report "$out" "$out/ceiling" "$out/central"
    ;;
breakout)
    topology=${TOPOLOGY:-central}
    for seed in $seeds; do
        run "${topology}_seed$seed" 16 +experiment=ppo_breakout_16 topology="$topology" seed="$seed" "$@"
    done
    report "$out" "$out"/*_seed*
    ;;
dqn_ttt)
    common=(algo=dqn env=lunarlander env.sim_cost_ms=1 device=cuda run.progress_every_s=0)
    ttt 16 "$@"
    ;;
td3)
    run "star8_seed${SEED:-0}" 8 algo=td3 env=halfcheetah topology=star device=cuda \
        run.stop_on_solve=false run.eval_every=5000 run.eval_on=simulators run.progress_every_s=30 \
        seed="${SEED:-0}" "$@"
    report "$out" "$out"/star8_seed*
    ;;
td3_variants)
    python -m drlmpi.bench.learner --algo td3 --batch 256 --device cuda --modes fused --stacked-critics \
        --target-forward paired --precision high medium --kernels --seconds 2 --json "$out/bench_td3.json" \
        | tee "$out/bench_td3.txt"
    python -m drlmpi.bench.learner --algo dqn --batch 64 128 --device cuda --modes fused --precision high medium \
        --updates-per-graph 8 --kernels --seconds 2 --json "$out/bench_dqn.json" | tee "$out/bench_dqn.txt"
    python - "$out/bench_td3.json" > "$out/fastest_td3.txt" <<'EOF'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r["updates_per_s"]]
best = max(rows, key=lambda r: r["updates_per_s"])["mode"].split()
print(" ".join(o for word, o in (("stacked", "algo.twin_critics=stacked"), ("paired", "algo.target_forward=paired"),
                                  ("tf32", "run.matmul_precision=high"), ("bf16", "run.matmul_precision=medium"))
               if word in best))
EOF
    echo "fastest TD3 update: $(cat "$out/fastest_td3.txt")"
    ;;
td3_ttt)
    common=(algo=td3 env=halfcheetah device=cuda run.eval_every=5000 run.eval_on=learner run.progress_every_s=0)
    ttt 8 "$@"
    ;;
*)
    echo "unknown part: $part (learner, learner_modes, steady, fused_scaling, bind, breakout_share, breakout, dqn_ttt, td3, td3_variants, td3_ttt)" >&2
    exit 2
    ;;
esac
