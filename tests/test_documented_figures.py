"""Documented figures against their raw outputs (tests/doccheck/claims.py): every figure of
docs/results.md and of each study folder's README.md marked ``<!-- figure ... -->`` is recomputed
from its artifact under docs/results/ and must equal what is written, within the printed rounding;
results.md states no measurement without a marker. The README's results table, which carries no
markers, is checked in tests/test_readme_figures.py."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO
from tests.doccheck.claims import check_file

RESULTS = REPO / "docs" / "results"
#: the marked figures today: fewer means markers were lost, not that figures became checkable
AT_LEAST = {"docs/results.md": 260, "docs/results/*/README.md": 2029}


def _marked_documents() -> dict[str, list[Path]]:
    return {"docs/results.md": [REPO / "docs" / "results.md"],
            "docs/results/*/README.md": sorted(RESULTS.glob("*/README.md"))}


def test_every_marked_figure_recomputes_from_its_artifact():
    for name, paths in _marked_documents().items():
        figures = [f for path in paths for f in check_file(path, RESULTS)]
        assert len(figures) >= AT_LEAST[name], name
        problems = [str(f) for f in figures if f.problem]
        assert not problems, "\n".join(problems)


def test_every_study_folder_names_its_provenance():
    from tests.doccheck.provenance import provenance_problems

    assert provenance_problems(RESULTS) == []


def test_a_study_without_provenance_or_with_a_thin_record_fails(tmp_path, capsys):
    from tests.doccheck.claims import main
    from tests.doccheck.provenance import provenance_problems

    results = tmp_path / "docs" / "results"
    full = {"command": "bash experiments/x.sh OUT", "commit": "abc1234", "date": "2026-11-28",
            "machine": {"cores": 2}, "versions": {"torch": "2.13.0"}}
    for name, record in {"ok": full, "reconstructed": {**full, "commit": None, "recorded": "after the run"},
                         "thin": {"command": "x", "date": "2026-11-28", "machine": {"cores": 2}},
                         "silent": {**full, "command": None}}.items():
        (results / name).mkdir(parents=True)
        (results / name / "provenance.json").write_text(json.dumps(record))
    (results / "bare").mkdir()
    (results / "loose.json").write_text("{}")
    (results / "parts").mkdir()
    (results / "parts" / "provenance_a.json").write_text(json.dumps(full))
    (results / "parts" / "provenance_b.json").write_text("not json")
    problems = provenance_problems(results)
    assert [p.split(": ", 1)[0].split("/results/", 1)[1] for p in problems] == [
        "bare", "loose.json", "parts/provenance_b.json", "silent/provenance.json",
        "thin/provenance.json", "thin/provenance.json"]
    assert "no provenance.json" in problems[0] and "outside any study folder" in problems[1]
    assert "command unknown, and no 'recorded'" in problems[3] and "no 'commit'" in problems[4]
    doc = tmp_path / "docs" / "doc.md"
    doc.write_text("no figures\n")
    assert main([str(doc)]) == 1 and capsys.readouterr().out.count("FAIL provenance") == 6


def test_a_wrong_rounded_or_unsourced_figure_fails(tmp_path):
    run = tmp_path / "results" / "study" / "run"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"env_steps_per_s": 11381.97, "ceiling": 13862.44,
                                                   "stats": {"serves": 20255},
                                                   "runs": [{"ratio": 1.107}, {"ratio": 0.849}]}))
    (run / "metrics.csv").write_text("kind,train_seconds,env_steps,return\n" + "".join(
        f"episode,{i + 1},{10 * (i + 1)},{i}\n" for i in range(150)))
    doc = tmp_path / "doc.md"
    doc.write_text("\n".join([
        "| a | 11,382 <!-- figure field study/run env_steps_per_s --> |",  # rounds to it: ok
        "**82%** <!-- figure ratio study/run env_steps_per_s study/run ceiling -->",  # 82.1%: ok
        "20,255 <!-- figure field study/run stats.serves --> serves and 99.5 "
        "<!-- figure train_return study/run 150 -->",
        "111 s <!-- figure first_reaching study/run 60 --> after 1,110 "
        "<!-- figure first_reaching study/run 60 steps -->",
        "11,383 <!-- figure field study/run env_steps_per_s -->",  # off by one unit: wrong
        "81.9% <!-- figure ratio study/run env_steps_per_s study/run ceiling -->",  # wrong rounding
        "5 <!-- figure field study/gone env_steps_per_s -->",  # no artifact
        "7 <!-- figure field study/run updates_per_s -->",  # no such field
        "<!-- figure field study/run env_steps_per_s -->",  # no number
        "3 <!-- figure mode study/run -->",  # unknown kind
        "0.85 <!-- figure field study/run runs.1.ratio -->",  # an item of a list: ok
        "1 <!-- figure field study/run runs.2.ratio -->",  # past the list's end
        "111 s <!-- figure first_reaching study/run 60 stpes -->",  # neither seconds nor steps
    ]))
    figures = check_file(doc, tmp_path / "results")
    assert [f.problem is None for f in figures] == [True] * 6 + [False] * 6 + [True, False, False]
    assert "unknown figure kind or arguments" in figures[14].problem
    assert figures[0].value == 11381.97 and round(figures[1].value, 2) == 82.11
    assert "gives 11382, not 11383" in figures[6].problem
    assert "summary.json" in figures[8].problem and "no updates_per_s" in figures[9].problem
    assert "no number" in figures[10].problem and "unknown figure kind" in figures[11].problem


def test_the_command_line_checks_files_and_says_which_failed(tmp_path, capsys):
    from tests.doccheck.claims import main

    assert main([str(REPO / "docs" / "results.md")]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and out.count("ok ") >= AT_LEAST["docs/results.md"]
    assert main([]) == 2
    assert Path(REPO / "docs" / "results").is_dir()
    capsys.readouterr()
    assert main([str(tmp_path / "gone.md")]) == 2  # one line, no traceback
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err and "gone.md" in err


def test_learner_benchmark_rows_and_their_ratios(tmp_path):
    bench = tmp_path / "results" / "bench.json"  # as python -m drlmpi.bench.learner --json writes it
    bench.parent.mkdir()
    bench.write_text(json.dumps({"rows": [
        {"algo": "dqn", "batch": 64, "device": "cpu", "mode": "drlmpi", "updates_per_s": 425.2, "note": ""},
        {"algo": "dqn", "batch": 64, "device": "cuda", "mode": "fused", "updates_per_s": 8633.4, "note": ""},
        {"algo": "dqn", "batch": 64, "device": "cuda", "mode": "graph", "updates_per_s": None,
         "note": "failed: RuntimeError"}]}))
    doc = tmp_path / "doc.md"
    doc.write_text("8,633 <!-- figure bench bench.json dqn 64 cuda fused -->, "
                   "20.3x <!-- figure bench_ratio bench.json dqn 64 cuda fused cpu drlmpi -->, "
                   "20x <!-- figure bench_ratio bench.json dqn 64 cuda fused cpu drlmpi -->, "
                   "21x <!-- figure bench_ratio bench.json dqn 64 cuda fused cpu drlmpi -->, "
                   "1 <!-- figure bench bench.json dqn 64 cuda graph -->, "
                   "2 <!-- figure bench bench.json dqn 128 cuda fused -->\n")
    figures = check_file(doc, tmp_path / "results")
    assert [f.problem is None for f in figures] == [True, True, True, False, False, False]
    assert "failed: RuntimeError" in figures[4].problem and "no row dqn 128" in figures[5].problem


def test_median_mean_and_range_over_seeds(tmp_path):
    results = tmp_path / "results"
    for seed, (rate, top) in enumerate([(100.0, 150), (350.0, 120), (300.0, 130)]):
        run = results / "study" / f"central_seed{seed}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"env_steps_per_s": rate, "ceiling": 400.0, "per_rank": [
            {"learn_s": 0.5 * (rank + 1), "updates": 1000} for rank in range(4)]}))
        (run / "metrics.csv").write_text("kind,train_seconds,env_steps,return\n" + "".join(
            f"episode,{i + 1},{10 * (i + 1)},{i if i < top else top}\n" for i in range(200)))
    doc = tmp_path / "doc.md"
    doc.write_text("\n".join([
        "300 <!-- figure median field study/central_seed{0,1,2} env_steps_per_s -->",
        "250 <!-- figure mean field study/central_seed{0,1,2} env_steps_per_s -->",
        "100 <!-- figure min field study/central_seed{0,1,2} env_steps_per_s -->",
        "350 <!-- figure max field study/central_seed{2,1} env_steps_per_s -->",
        "75% <!-- figure median ratio study/central_seed{0,1,2} env_steps_per_s "
        "study/central_seed{0,1,2} ceiling -->",  # each seed over its own ceiling
        "125.35 <!-- figure median train_return study/central_seed{0,1,2} 200 -->",  # 137.25, 117.9, 125.35
        "125.35 <!-- figure median train_return study/central_seed{0,1,2} 2000 steps -->",  # the same
        "120 <!-- figure median train_return study/central_seed{0,1,2} 1500 steps -->",  # 97.6: wrong
        "1.25 ms <!-- figure mean ratio study/central_seed0 per_rank.{0..3}.learn_s "
        "study/central_seed0 per_rank.{0..3}.updates -->",  # 0.5, 1, 1.5 and 2 ms an update
        "100 <!-- figure median field study/central_seed{0,1} env_steps_per_s -->",  # 225: wrong
        "200 <!-- figure median field study/central_seed0 env_steps_per_s -->",  # no group
        "200 <!-- figure median field study/central_seed{0,7} env_steps_per_s -->",  # no seed 7
        "750 <!-- figure sum field study/central_seed{0,1,2} env_steps_per_s -->",  # a total
    ]))
    figures = check_file(doc, results)
    assert [f.problem is None for f in figures] == [True] * 7 + [False, True] + [False] * 3 + [True], [
        str(f) for f in figures]
    assert figures[4].value == 75.0 and "gives 97.6, not 120" in figures[7].problem
    assert figures[8].value == 1.25 and "gives 225, not 100" in figures[9].problem
    assert "one brace group" in figures[10].problem and "central_seed7" in figures[11].problem


def test_table_cells_of_reports_and_numbers_of_text_outputs(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "table.csv").write_text("topology,world_size,train_s_mean,note\n"
                                       "sequential,1,43.64595,\nstar,3,43.9259,\nstar,4,44.127,slow\n")
    (results / "report.md").write_text("\n".join([
        "# report", "",
        "| topology | ranks | env steps/s | MPI wait | steps to threshold: median [min-max] |",
        "|---|---:|---:|---:|---|",
        "| sequential | 1 | 1,198 | 0% | 26k [20k-28k] |",
        "| **groups[2xstar,per_rank]** | 16 | 755 | 83% | - |",
        "| allgather (captured segments) | 8 | 1,575 | 25% | 45k |", "",
        "| topology | ranks | env steps/s | speedup |",
        "|---|---|---|---|",
        "| sequential | 1 | 1,198 | 1.00 |",
        "| allgather (captured segments) | 8 | 1,574 | 1.31 |", ""]))
    (results / "bench.txt").write_text(
        "  run  star on 4 rank(s) ... 779 env steps/s, 389 updates/s (25.5 s)\n"
        "weights     dqn: 67,586 params     1,906,380  bcast state_dict    1,840.8   1,744.0   10.43x\n")
    doc = tmp_path / "doc.md"
    doc.write_text("\n".join([
        "| a | 43.9 s <!-- figure cell table.csv train_s_mean topology=star world_size=3 --> |",
        "1,198 <!-- figure cell report.md \"env steps/s\" topology=sequential -->, "
        "83% <!-- figure cell report.md \"MPI wait\" topology=groups[2xstar,per_rank] -->, "
        "26k <!-- figure cell report.md \"steps to threshold: median [min-max]\" ranks=1 --> "
        "[20k <!-- figure cell report.md \"steps to threshold: median [min-max]#2\" ranks=1 -->-28k "
        "<!-- figure cell report.md \"steps to threshold: median [min-max]#3\" ranks=1 -->]",
        "1.31x <!-- figure cell report.md speedup \"topology=allgather (captured segments)\" -->",
        "389 <!-- figure text bench.txt \"run star  on 4 rank(s)\" 2 --> and 10.4x "
        "<!-- figure text bench.txt \"1,906,380 bcast state_dict\" 3 --> (1,841 "
        "<!-- figure text bench.txt \"bcast state_dict\" -->, 67,586 <!-- figure text bench.txt dqn: -->)",
        "1.1-10.4x <!-- figure text bench.txt \"1,906,380 bcast state_dict\" 3 -->",  # a range's end
        "44 <!-- figure cell table.csv train_s_mean topology=star -->",  # two rows match
        "1,575 <!-- figure cell report.md \"env steps/s\" ranks=8 -->",  # 1,575 and 1,574: disagree
        "3 <!-- figure cell report.md \"env steps/s\" topology=p2p -->",  # no such row
        "3 <!-- figure cell report.md \"steps to threshold: median [min-max]#4\" ranks=1 -->",
        "1,574 <!-- figure cell report.md \"env steps/s\" ranks=8 speedup -->",  # the table with a speedup
        "3 <!-- figure cell report.md ranks topology=sequential \"wait r0\" -->",  # no table has wait r0
        "3 <!-- figure cell table.csv note topology=star world_size=4 -->",  # no number
        "3 <!-- figure text bench.txt \"run star on 8 rank(s)\" -->",  # no such line
        "780 <!-- figure text bench.txt \"run star on 4 rank(s)\" -->",  # 779: wrong
    ]))
    figures = check_file(doc, results)
    assert [f.problem is None for f in figures] == [True] * 12 + [False] * 4 + [True] + [False] * 4, [
        str(f) for f in figures]
    assert figures[2].value == 83.0 and figures[4].value == 20.0 and figures[5].value == 28.0
    assert "disagree" in figures[12].problem and "disagree" in figures[13].problem
    assert "has no row topology=p2p" in figures[14].problem and "no number 4" in figures[15].problem
    assert figures[16].value == 1574 and "has no row topology=sequential wait r0" in figures[17].problem
    assert "no number 1" in figures[18].problem and "no line holding" in figures[19].problem
    assert "gives 779, not 780" in figures[20].problem


def test_one_figure_over_another(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "a.md").write_text("| topology | ranks | env steps/s | ceiling |\n|---|---|---|---|\n"
                                  "| star | 8 | 2,993 | 7,013 |\n| star | 16 | 3,020 | 0 |\n")
    (results / "b.txt").write_text("run star on 8 rank(s) ... 1,174 env steps/s\n")
    doc = tmp_path / "doc.md"
    doc.write_text("\n".join([
        "43% <!-- figure over cell a.md \"env steps/s\" ranks=8 / cell a.md ceiling ranks=8 -->",
        "2.55x <!-- figure over cell a.md \"env steps/s\" ranks=8 / text b.txt \"on 8 rank(s)\" -->",
        "2.6x <!-- figure max over cell a.md \"env steps/s\" ranks={8,16} / text b.txt \"on 8 rank(s)\" -->",
        "2.6x <!-- figure over cell a.md \"env steps/s\" ranks=8 / text b.txt \"on 8 rank(s)\" -->",  # 2.55
        "1 <!-- figure over cell a.md \"env steps/s\" ranks=8 / cell a.md ceiling ranks=16 -->",  # over 0
        "1 <!-- figure over cell a.md \"env steps/s\" ranks=8 / -->",  # nothing below
    ]))
    figures = check_file(doc, results)
    assert [f.problem is None for f in figures] == [True] * 3 + [False] * 3, [str(f) for f in figures]
    assert "gives 2.5494, not 2.6" in figures[3].problem and "is 0" in figures[4].problem
    assert "unknown figure kind" in figures[5].problem


def test_every_table_figure_has_a_marker_or_says_its_output_was_not_kept():
    from tests.doccheck.unbacked import unbacked_rows

    for name in ("docs/results.md",):
        rows = unbacked_rows((REPO / name).read_text())
        assert not rows, f"{name}: table rows with a number and no figure marker:\n" + "\n".join(
            f"{n}: {row[:120]}" for n, row in rows)


def test_every_sentence_measurement_has_a_marker_or_says_why_not():
    from tests.doccheck.unbacked import unbacked_prose

    for name in ("docs/results.md",):
        found = unbacked_prose((REPO / name).read_text())
        assert not found, f"{name}: speedups, shares or rates in sentences with no marker:\n" + "\n".join(
            f"{n}: {figure}" for n, figure in found)


def test_unbacked_prose_finds_measurements_not_targets_settings_or_code(tmp_path):
    from tests.doccheck.unbacked import main, unbacked_prose

    doc = "\n".join([
        "## A study",
        "Star ran 6,441 env steps/s and 1.7x sequential's rate.",  # 2: two unmarked measurements
        "Star ran 6,441 <!-- figure field s/r env_steps_per_s --> env steps/s, **10.5x** "
        "<!-- figure over field s/a k / field s/b k --> (93% <!-- figure ratio s/a k s/b k -->).",
        "The goal >= 6x, at least 1.5x, about 380 updates/s, ~2,500 env steps/s: not measurements.",
        "A figure quoted from elsewhere: 4.7x <!-- unmarked: those outputs were not kept -->.",
        'A marker\'s own words are not prose: 3,352 <!-- figure text r.log "89% ETA 33s |" --> alone.',
        "An empty reason is none: 3.9x <!-- unmarked: -->, and `1.5x` in code is a setting.",  # 7
        "| a table row is the other check's | 7x <!-- figure field s/r k --> |",
        "```", "12x in a fence", "```",
        "<!-- by hand: the growth over samples -->",
        "Declared: 8,517 updates/s.",
        "### Another",
        "<!-- unrecorded: the outputs were not kept -->",  # no reason to leave a figure unmarked
        "Withdrawn or marked: 6,883 env steps/s.",  # 16
        "### Next",
        "Again 25% after the heading.",  # 15
        "A range is one figure: 81-84% and 11,188-11,667 env steps/s; within +-10% is a bound.",  # 16
        "Marked at both ends: 3.5 <!-- figure field s/a k -->-31x <!-- figure field s/b k -->.",
    ])
    assert unbacked_prose(doc) == [(2, "6,441 env steps/s"), (2, "1.7x"), (7, "3.9x"),
                                   (16, "6,883 env steps/s"), (18, "25%"), (19, "84%"),
                                   (19, "11,667 env steps/s")]
    path = tmp_path / "doc.md"
    path.write_text(doc)
    assert main([str(path)]) == 0  # without --prose: tables only
    assert main(["--prose", str(path)]) == 1


def test_unbacked_rows_finds_unmarked_numbers_outside_declared_parts(tmp_path):
    from tests.doccheck.unbacked import main, unbacked_rows

    doc = "\n".join([
        "## A study",
        "| run | env steps/s | note |",  # 1: a header (above a separator)
        "|---|---|---|",
        "| seed 0 | 11,382 <!-- figure field s/run env_steps_per_s --> | ok |",  # marked
        "| seed 1 | 11,188 | - |",  # 5: a number and no marker
        "| seed 2 (label only) | - | `batch=64` |",  # numbers only in the label and in code
        "```", "| in code | 5 |", "```",
        "<!-- by hand: the growth over samples -->",
        "| grown | 1.5x |",  # 11: declared
        "### Next part",
        "| later | 3.9x |",  # 13: the declaration ended at the heading
        "<!-- unrecorded: the run's output was not kept -->",
        "| old | 8,517 |",  # 15: a figure without its output is withdrawn, not declared
        "<!-- not figures: versions -->",
        "| torch | 2.11.0 |",  # 17: settings, declared
        "### Last part",
        "<!-- not figures: -->",  # no reason given: declares nothing
        "| bare | 7 |",  # 20
    ])
    assert [n for n, _ in unbacked_rows(doc)] == [5, 13, 15, 20]
    path = tmp_path / "doc.md"
    path.write_text(doc)
    assert main([str(path)]) == 1 and main([]) == 2
    path.write_text("| a | b |\n|---|---|\n| x | 1 <!-- figure field s/r k --> |\n")
    assert main([str(path)]) == 0
    assert main([str(tmp_path / "gone.md")]) == 2
