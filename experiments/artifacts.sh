# The artifact layout of docs/results/ (docs/results.md), shared by the study scripts that write
# it (headline.sh, seed_spread.sh, vtrace_study.sh): source it, then keep each run and report the
# study; run_study runs a list of jobs a few at a time into the layout.

keep() {  # keep RUN_DIR: what the layout keeps of a run (summary.json, metrics.csv, rank0.log, .hydra/)
    rm -rf "$1"/checkpoint "$1"/tb "$1"/*.pt
    find "$1" -name 'rank*.log' ! -name rank0.log -delete
}

report() {  # report OUT_DIR RUN_DIR...: the report's tables (no plots) in OUT_DIR/report
    local out=$1
    shift
    python -m drlmpi.report "$@" --out "$out/report" > /dev/null && rm -f "$out"/report/*.png
}

run_study() {  # run_study "NAME|COMMAND"...: each COMMAND with the caller's ${common[@]} and
               # hydra.run.dir=$out/NAME, JOBS (default 2) at a time, each run kept, one line each
    local running=0 job
    for job in "$@"; do
        _study_run "$job" &
        running=$((running + 1))
        if [ "$running" -ge "${JOBS:-2}" ]; then wait -n; running=$((running - 1)); fi
    done
    wait
}

_study_run() {  # _study_run "NAME|COMMAND": one run of run_study, and its line
    local name=${1%%|*} cmd=${1#*|}
    $cmd "${common[@]}" hydra.run.dir="$out/$name" > /dev/null 2>&1 || echo "$name failed" >&2
    keep "$out/$name"
    if [ ! -f "$out/$name/summary.json" ]; then echo "$name: no summary.json"; return; fi
    python -c "import json, sys; s = json.load(open(sys.argv[1])); print(sys.argv[2] + ':', (
        f'solved at {s[\"env_steps_to_threshold\"]:,} env steps' if s['solved'] else 'not solved'),
        f'(policy lag mean {s.get(\"policy_lag_mean\") or 0:.1f})')" "$out/$name/summary.json" "$name"
}
