"""The README as a front door and the documents' links: the README's results table recomputed
from its artifacts through tests/doccheck/readme_figures.txt (the README carries no markers), the
README's size and the commands CI runs from it, every study folder's README and index line, and
every relative link of README.md and docs/ (tests/doccheck/readme.py, tests/doccheck/links.py)."""

from __future__ import annotations

import json
import re

from tests.conftest import REPO
from tests.doccheck.links import broken_links
from tests.doccheck.readme import check_readme, main, read_spec, table_rows

README = REPO / "README.md"


def test_the_readme_results_table_recomputes_from_its_artifacts():
    rows = table_rows(README.read_text())
    figures = [line for line in read_spec(REPO / "tests/doccheck/readme_figures.txt") if not line.setting]
    assert 1 <= len(rows) <= 6 and len(figures) >= 12, (rows, figures)
    assert check_readme(README) == []


def test_the_readme_is_short_plain_and_shows_the_commands_ci_runs():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) < 120 and len(text.encode()) < 8 * 1024 and "<!--" not in text
    assert [n for n, line in enumerate(lines, 1) if len(line) > 160] == []
    ci = [re.sub(r"\s*\|\|.*$", "", line.strip()) for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip().startswith("python -m") and "venv" not in line]
    assert ci == ['python -m pip install -e ".[mpich,test]" && python -m drlmpi', "python -m pytest"]
    assert all(command in text for command in ci)


def test_every_study_folder_has_a_readme_and_a_line_in_the_results_index():
    index = (REPO / "docs" / "results.md").read_text()
    folders = sorted(p for p in (REPO / "docs" / "results").iterdir() if p.is_dir())
    assert [f.name for f in folders if not (f / "README.md").is_file()] == []
    assert [f.name for f in folders if f"- [{f.name}](results/{f.name}/README.md)" not in index] == []


def test_every_relative_link_of_the_docs_resolves():
    pages = [README, *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("docs/results/*/README.md"))]
    assert [p for page in pages for p in broken_links(page)] == []


def _study(tmp_path, env_steps_per_s=11381.97):
    run = tmp_path / "docs" / "results" / "study" / "run"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"env_steps_per_s": env_steps_per_s, "threshold": 200}))
    readme = tmp_path / "README.md"
    readme.write_text("| Result | Machine |\n|---|---|\n"
                      "| [A study][s]: 11,382 env steps/s on 16 ranks | H200 |\n\n"
                      "[s]: docs/results/study/README.md\n")
    spec = tmp_path / "spec.txt"
    spec.write_text("# comment\nstudy | 11,382 | field study/run env_steps_per_s\n"
                    "study | 16 | setting: ranks\n")
    return readme, spec


def test_a_changed_artifact_an_unnamed_number_or_a_missing_figure_fails(tmp_path):
    readme, spec = _study(tmp_path / "same")
    assert check_readme(readme, spec) == []
    readme, spec = _study(tmp_path / "changed", env_steps_per_s=11390.0)  # the artifact changed
    (problem,) = check_readme(readme, spec)
    assert problem.startswith(f"{spec}:2: ") and problem.endswith(
        "README.md:3: '11,382' <- field study/run env_steps_per_s: the artifact gives 11390, not 11382")
    readme, spec = _study(tmp_path / "again")
    readme.write_text(readme.read_text().replace("on 16 ranks", "on 16 ranks, 3 seeds"))
    assert check_readme(readme, spec) == ["README line 3: 3 is neither a figure nor a setting of spec.txt"]
    spec.write_text(spec.read_text() + "study | 2.5x | field study/run threshold\nother | 1 | setting: x\n")
    problems = check_readme(readme, spec)
    assert "does not write '2.5x'" in problems[0]
    assert "no results row linking to docs/results/other/" in problems[1]
    spec.write_text("study 11,382\n")
    try:
        check_readme(readme, spec)
        raise AssertionError("a line without its three fields was read")
    except ValueError as exc:
        assert "not 'STUDY | WRITTEN | SPEC'" in str(exc)


def test_the_command_line_checks_the_readme_and_names_a_missing_file(tmp_path, capsys):
    readme, spec = _study(tmp_path)
    assert main([str(readme), str(spec)]) == 0
    assert main([str(tmp_path / "gone.md")]) == 2
    assert capsys.readouterr().err.strip() == f"readme: error: no such file: {tmp_path / 'gone.md'}"


def test_a_broken_link_or_anchor_is_found_and_code_and_web_addresses_are_not(tmp_path):
    (tmp_path / "b.md").write_text("# The `env.atari` options: one\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#the-envatari-options-one) [gone](c.md) [anchor](b.md#nothing)\n"
                    "`[code](d.md)` [web](https://example.org/x) ![img](b.md)\n[ref]: e.md\n"
                    "```\n[fenced](f.md)\n```\n")
    assert [p.split(": ", 1)[1] for p in broken_links(page)] == [
        "c.md (no such file)", "b.md#nothing (no heading with that anchor)", "e.md (no such file)"]
