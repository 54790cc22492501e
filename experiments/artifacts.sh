# The artifact layout of docs/results/ (docs/results.md), shared by the study scripts that write
# it (headline.sh, seed_spread.sh): source it, then keep each run and report the study.

keep() {  # keep RUN_DIR: what the layout keeps of a run (summary.json, metrics.csv, rank0.log, .hydra/)
    rm -rf "$1"/checkpoint "$1"/tb "$1"/*.pt
    find "$1" -name 'rank*.log' ! -name rank0.log -delete
}

report() {  # report OUT_DIR RUN_DIR...: the report's tables (no plots) in OUT_DIR/report
    local out=$1
    shift
    python -m drlmpi.report "$@" --out "$out/report" > /dev/null && rm -f "$out"/report/*.png
}
