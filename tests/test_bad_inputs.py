"""Bad input to every entry point - a file that is missing, a folder where a file goes, a file
where a folder goes, a YAML or JSON file that cannot be read, a size of 0, an environment
variable set to a value it does not take - is refused in ONE line on stderr saying what is wrong
and what to do, with exit status 2: never a traceback, a run started anyway, or a benchmark that
measures nothing and exits 0.

Each case calls the entry point's ``main(argv)`` in this process (about 0.1 s each, 1 s for the
one that plans a 2-rank job). Where the entry point would, given the bad input, go on to real work
(Hydra and the job, the planner's probe, a benchmark's measurement, a study's sweeps), that work is
replaced by a stand-in that fails the test: a refusal must come before it.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from drlmpi.config.errors import ConfigError
from tests.conftest import REPO

#: a finished run of docs/results/ (read only): the report's input
A_RUN = REPO / "docs" / "results" / "h200host_td3_ttt" / "sequential_seed0"
#: a plugin topology file that is not YAML: the flow list is never closed
BAD_YAML = "_target_: ring.Ring\nlaps: [1, 2\nname: ring\n"
YAML_SAYS = "is not valid YAML (line 3, column 5: expected ',' or ']', but got ':')"
#: a short run, should a case get as far as one (a stand-in stops it first)
SHORT = ["run.max_env_steps=64", "run.progress_every_s=0", "run.tensorboard=false"]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """The bad inputs, under ``tmp_path``: a plain file, an empty folder, a file that is not text,
    plugin directories with a file that is not YAML, run directories whose files are damaged."""
    (tmp_path / "afile.txt").write_text("hello\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "binary.md").write_bytes(b"\x89PNG\x00\xff\xfe")
    (tmp_path / "README.md").write_text("# not this repository's README\n")
    for name, group in (("plugin", "topology"), ("plugin_algo", "algo")):
        (tmp_path / name / group).mkdir(parents=True)
        (tmp_path / name / group / "bad.yaml").write_text(BAD_YAML)
    for name, overrides, meta in (("run_bad_overrides", "- seed=1\n- [x\n", {"world_size": 1}),
                                  ("run_empty_overrides", "", {"world_size": 1}),
                                  ("run_bad_meta", "- seed=1\n", {})):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "overrides.yaml").write_text(overrides)
        (tmp_path / name / "checkpoint").mkdir()
        (tmp_path / name / "checkpoint" / "meta.json").write_text(json.dumps(meta))
    for name, config in (("play_bad_config", "algo: [x\n"), ("play_empty_config", "")):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "config.yaml").write_text(config)
        (tmp_path / name / "policy.pt").write_bytes(b"")
    plan = json.loads((REPO / "docs" / "results" / "2core_plan_check" / "sim0" / "plan.json").read_text())
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return tmp_path


def _never(what: str) -> Callable[..., None]:
    def stand_in(*args: object, **kwargs: object) -> None:
        pytest.fail(f"accepted: {what} started")
    return stand_in


#: (id, entry point module, argv, environment, the one line it must print, what must not start).
#: ``{tmp}`` is the fixture's folder. Before: what the same input gave before it was refused.
CASES = [
    # item 4: a plugin topology YAML file that is not YAML (before: yaml.parser.ParserError)
    ("plugin-topology-yaml", "drlmpi.run.command_line", ["topology=star", *SHORT],
     {"DRLMPI_PLUGIN_PATH": "{tmp}/plugin"},
     "drlmpi: error: {tmp}/plugin/topology/bad.yaml " + YAML_SAYS + ": correct it, or take {tmp}/plugin off "
     "DRLMPI_PLUGIN_PATH", "hydra.main"),
    # ... or another group's, which Hydra would have read (before: Hydra's ParserError traceback)
    ("plugin-algo-yaml", "drlmpi.run.command_line", SHORT, {"DRLMPI_PLUGIN_PATH": "{tmp}/plugin_algo"},
     "drlmpi: error: {tmp}/plugin_algo/algo/bad.yaml " + YAML_SAYS + ": correct it, or take "
     "{tmp}/plugin_algo off DRLMPI_PLUGIN_PATH", "hydra.main"),
    ("plugin-yaml-plan", "drlmpi.planner.cli", ["--no-calibrate"], {"DRLMPI_PLUGIN_PATH": "{tmp}/plugin"},
     "drlmpi.plan: error: {tmp}/plugin/topology/bad.yaml " + YAML_SAYS + ": correct it, or take "
     "{tmp}/plugin off DRLMPI_PLUGIN_PATH", "drlmpi.planner.probe.probe"),
    # environment variables (before: a traceback from bind_rank under Hydra's "Error executing job";
    # YIELD and CUDNN_BENCHMARK: the value ignored without a word)
    ("env-bind-ranks", "drlmpi.run.command_line", SHORT, {"DRLMPI_BIND_RANKS": "socket"},
     "drlmpi: error: DRLMPI_BIND_RANKS must be one of auto, core, none, got 'socket' (or unset it)",
     "hydra.main"),
    ("env-yield", "drlmpi.run.command_line", SHORT, {"DRLMPI_YIELD": "yes"},
     "drlmpi: error: DRLMPI_YIELD must be one of 0, 1, got 'yes' (or unset it)", "hydra.main"),
    ("env-cudnn", "drlmpi.run.command_line", SHORT, {"DRLMPI_CUDNN_BENCHMARK": "off"},
     "drlmpi: error: DRLMPI_CUDNN_BENCHMARK must be one of 0, 1, got 'off' (or unset it)", "hydra.main"),
    ("env-bind-ranks-plan", "drlmpi.planner.cli", ["--no-calibrate"], {"DRLMPI_BIND_RANKS": "socket"},
     "drlmpi.plan: error: DRLMPI_BIND_RANKS must be one of auto, core, none, got 'socket' (or unset it)",
     "drlmpi.planner.probe.probe"),
    ("env-cudnn-bench", "drlmpi.bench.learner", ["--seconds", "0.01"], {"DRLMPI_CUDNN_BENCHMARK": "off"},
     "python -m drlmpi.bench.learner: error: DRLMPI_CUDNN_BENCHMARK must be one of 0, 1, got 'off' "
     "(or unset it)", "drlmpi.bench.learner.timed"),
    # the sweep launcher's settings (before: Hydra's four lines, "Error in call to target ...")
    ("launcher-bind", "drlmpi.run.command_line", ["-m", "seed=0", "hydra.launcher.bind=bogus", *SHORT], {},
     "drlmpi: error: hydra.launcher.bind must be 'auto' or 'none', got 'bogus'", "hydra.main"),
    ("launcher-timeout", "drlmpi.run.command_line", ["-m", "seed=0", "hydra.launcher.timeout_s=-3", *SHORT],
     {},
     "drlmpi: error: hydra.launcher.timeout_s must be null or a number of seconds > 0, got -3", "hydra.main"),
    ("launcher-cores", "drlmpi.run.command_line", ["-m", "seed=0", "hydra.launcher.cores=zero", *SHORT], {},
     "drlmpi: error: hydra.launcher.cores must be null, 'auto' or an integer >= 1, got 'zero'", "hydra.main"),
    # a launch command that is not there (before: "starting ..." then the error, exit 1)
    ("env-mpiexec-missing", "drlmpi.run.command_line", ["world_size=2", "topology=star", *SHORT],
     {"DRLMPI_MPIEXEC": "no-such-mpiexec"},
     "drlmpi: error: world_size>1 needs 'no-such-mpiexec' on PATH (pip install mpich), or another launch "
     "command in DRLMPI_MPIEXEC, or start the job with your MPI launcher", "os.execvp"),
    # resume= of a run directory whose files are damaged (before: ParserError; an empty overrides.yaml
    # resumed the checkpoint with the default config; KeyError 'world_size')
    ("resume-overrides-yaml", "drlmpi.run.command_line", ["resume={tmp}/run_bad_overrides"], {},
     "drlmpi: error: {tmp}/run_bad_overrides/.hydra/overrides.yaml is not valid YAML (line 3, column 1: "
     "expected ',' or ']', but got '<stream end>'): the run's overrides are lost: start the run anew",
     "hydra.main"),
    ("resume-overrides-empty", "drlmpi.run.command_line", ["resume={tmp}/run_empty_overrides"], {},
     "drlmpi: error: {tmp}/run_empty_overrides/.hydra/overrides.yaml is not a list (- item lines): the "
     "run's overrides are lost: start the run anew", "hydra.main"),
    ("resume-meta", "drlmpi.run.command_line", ["resume={tmp}/run_bad_meta"], {},
     "drlmpi: error: resume: the checkpoint description names no world size (a damaged "
     "checkpoint/meta.json), got {tmp}/run_bad_meta", "hydra.main"),
    # item 4: the report's --out an existing file (before: FileExistsError; NotADirectoryError)
    ("report-out-file", "drlmpi.report.__main__", [str(A_RUN), "--out", "{tmp}/afile.txt"], {},
     "drlmpi.report: error: --out {tmp}/afile.txt is a file: name a folder (one that does not exist yet "
     "is made)", None),
    ("report-out-in-file", "drlmpi.report.__main__", [str(A_RUN), "--out", "{tmp}/afile.txt/report"], {},
     "drlmpi.report: error: --out {tmp}/afile.txt/report: {tmp}/afile.txt is a file, not a folder: name a "
     "path in a folder", None),
    # play's run directory with a damaged config (before: ParserError; an OmegaConf traceback)
    ("play-config-yaml", "drlmpi.play", ["{tmp}/play_bad_config"], {},
     "drlmpi.play: error: {tmp}/play_bad_config/.hydra/config.yaml is not valid YAML (line 2, column 1: "
     "expected ',' or ']', but got '<stream end>'): is {tmp}/play_bad_config a drlmpi run directory?", None),
    ("play-config-empty", "drlmpi.play", ["{tmp}/play_empty_config"], {},
     "drlmpi.play: error: {tmp}/play_empty_config/.hydra/config.yaml names no env.id or algo._target_: is "
     "{tmp}/play_empty_config a drlmpi run directory?", None),
    # item 4: sizes of benchmarks (before: --batch 0 and --seconds 0 ran and exited 0; --threads 0, a
    # device torch cannot name and --json a folder: a traceback, the last after the measurements)
    ("learner-batch-0", "drlmpi.bench.learner", ["--batch", "0"], {},
     "python -m drlmpi.bench.learner: error: argument --batch: a whole number >= 1 is needed, got 0",
     "drlmpi.bench.learner.timed"),
    ("learner-seconds-0", "drlmpi.bench.learner", ["--seconds", "0"], {},
     "python -m drlmpi.bench.learner: error: argument --seconds: a finite number > 0 is needed, got 0",
     "drlmpi.bench.learner.timed"),
    ("learner-threads-0", "drlmpi.bench.learner", ["--threads", "0", "--seconds", "0.01"], {},
     "python -m drlmpi.bench.learner: error: argument --threads: a whole number >= 1 is needed, got 0",
     "drlmpi.bench.learner.timed"),
    ("learner-repeats-0", "drlmpi.bench.learner", ["--repeats", "0"], {},
     "python -m drlmpi.bench.learner: error: argument --repeats: a whole number >= 1 is needed, got 0",
     "drlmpi.bench.learner.timed"),
    ("learner-device", "drlmpi.bench.learner", ["--device", "cuba", "--seconds", "0.01"], {},
     "python -m drlmpi.bench.learner: error: argument --device: a torch device such as cpu, cuda or "
     "cuda:1 is needed, got 'cuba'", "drlmpi.bench.learner.timed"),
    ("learner-json-folder", "drlmpi.bench.learner", ["--seconds", "0.01", "--json", "{tmp}/adir"], {},
     "python -m drlmpi.bench.learner: error: --json {tmp}/adir is a folder: name a file, e.g. "
     "{tmp}/adir/out.json", "drlmpi.bench.learner.timed"),
    ("act-threads-0", "drlmpi.bench.act", ["--threads", "0"], {},
     "python -m drlmpi.bench.act: error: argument --threads: a whole number >= 1 is needed, got 0",
     "drlmpi.bench.act.measure"),
    ("act-json-folder", "drlmpi.bench.act", ["--json", "{tmp}/adir"], {},
     "python -m drlmpi.bench.act: error: --json {tmp}/adir is a folder: name a file, e.g. "
     "{tmp}/adir/out.json",
     "drlmpi.bench.act.measure"),
    ("kernel-list-batch-0", "drlmpi.bench.kernel_list", ["--batch", "0"], {},
     "python -m drlmpi.bench.kernel_list: error: argument --batch: a whole number >= 1 is needed, got 0",
     "drlmpi.bench.kernel_list.drlmpi_step"),
    ("progress-kb-0", "drlmpi.bench.progress", ["--kb", "0"], {},
     "python -m drlmpi.bench.progress: error: argument --kb: a whole number >= 1 is needed, got 0",
     "drlmpi.bench.progress.delays"),
    ("allreduce-iters-0", "drlmpi.bench.allreduce", ["--iters", "0"], {},
     "python -m drlmpi.bench.allreduce: error: argument --iters: a whole number >= 1 is needed, got 0",
     "drlmpi.mpi.timed.TimedComm"),
    ("allreduce-repeats-0", "drlmpi.bench.allreduce", ["--repeats", "0"], {},
     "python -m drlmpi.bench.allreduce: error: argument --repeats: a whole number >= 1 is needed, got 0",
     "drlmpi.mpi.timed.TimedComm"),
    ("allreduce-td3-images", "drlmpi.bench.allreduce", ["--algo", "td3", "--obs", "atari"], {},
     "python -m drlmpi.bench.allreduce: error: --obs atari and atari_impala take --algo dqn or ppo "
     "(TD3 has no image networks)",
     "drlmpi.mpi.timed.TimedComm"),
    # (before: --envs 0 crashed the process with a segmentation fault; --steps 0 measured nothing)
    ("atari-envs-0", "drlmpi.bench.atari", ["--envs", "0"], {},
     "python -m drlmpi.bench.atari: error: argument --envs: a whole number >= 1 is needed, got 0",
     "drlmpi.bench.atari.benchmark"),
    ("atari-steps-0", "drlmpi.bench.atari", ["--steps", "0"], {},
     "python -m drlmpi.bench.atari: error: argument --steps: a whole number >= 1 is needed, got 0",
     "drlmpi.bench.atari.benchmark"),
    ("atari-unknown-game", "drlmpi.bench.atari", ["ALE/Nope-v5"], {},
     "python -m drlmpi.bench.atari: error: ALE/Nope-v5 is not a game this benchmark can step: Environment "
     "`Nope` doesn't exist in namespace ALE. Did you mean: `Gopher`?", "drlmpi.bench.atari.benchmark"),
    # a study's folder that is a file (before: each sweep failed in turn; without --dry-run a traceback)
    ("headline-out-file", "drlmpi.bench.headline", ["plan_check", "{tmp}/afile.txt", "--dry-run"], {},
     "python -m drlmpi.bench.headline: error: OUT {tmp}/afile.txt is a file: name a folder (one that does "
     "not exist yet is made)", "drlmpi.bench.headline.run"),
    # the planner (before: --seconds nan probed for ever; --compare of nothing compared nothing, exit 0)
    ("plan-seconds-nan", "drlmpi.planner.cli", ["--seconds", "nan", "--no-calibrate"], {},
     "drlmpi.plan: error: --seconds nan: must be a finite number > 0", "drlmpi.planner.probe.probe"),
    ("plan-compare-missing", "drlmpi.planner.cli", ["--plan", "{tmp}/plan.json", "--compare", "{tmp}/gone"],
     {}, "drlmpi.plan: error: --compare {tmp}/gone: no such directory (name run or sweep directories)", None),
    ("plan-compare-file", "drlmpi.planner.cli",
     ["--plan", "{tmp}/plan.json", "--compare", "{tmp}/afile.txt"], {},
     "drlmpi.plan: error: --compare {tmp}/afile.txt: not a directory (name run or sweep directories)", None),
    # the calibration's jobs by hand (before: ValueError; a spec that is not there: FileNotFoundError;
    # --measure a file: the launch failed with a RuntimeError traceback)
    ("jobs-ranks", "drlmpi.planner.jobs", ["--measure", "{tmp}/m", "--ranks", "x"], {},
     "python -m drlmpi.planner.jobs: error: argument --ranks: comma-separated world sizes >= 1 are needed, "
     "e.g. 1,2,4, got 'x'", "drlmpi.planner.jobs.launch"),
    ("jobs-measure-file", "drlmpi.planner.jobs", ["--measure", "{tmp}/afile.txt", "--ranks", "1"], {},
     "python -m drlmpi.planner.jobs: error: --measure {tmp}/afile.txt is a file: name a folder (one that "
     "does not exist yet is made)", "drlmpi.planner.jobs.launch"),
    ("jobs-spec-missing", "drlmpi.planner.jobs", ["{tmp}/gone.json"], {},
     "python -m drlmpi.planner.jobs: error: no spec file {tmp}/gone.json (the planner writes one; to measure "
     "by hand: --measure DIR)", "drlmpi.planner.jobs.run_spec"),
    # item 4: the figure checkers (before: a folder was "no such file"; a file that is not text, a
    # UnicodeDecodeError; a README outside a checkout, FileNotFoundError)
    ("claims-folder", "tests.doccheck.claims", ["{tmp}/adir"], {},
     "claims: error: a folder, not a file: {tmp}/adir", None),
    ("links-binary", "tests.doccheck.links", ["{tmp}/binary.md"], {},
     "links: error: not UTF-8 text: {tmp}/binary.md", None),
    ("unbacked-binary", "tests.doccheck.unbacked", ["{tmp}/binary.md"], {},
     "unbacked: error: not UTF-8 text: {tmp}/binary.md", None),
    ("readme-elsewhere", "tests.doccheck.readme", ["{tmp}/README.md"], {},
     "readme: error: {tmp}/README.md: no docs/results/ folder above it", None),
]


@pytest.mark.parametrize(("module", "argv", "env", "line", "must_not_start"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_refused_in_one_line(files, monkeypatch, capsys, module, argv, env, line,
                                          must_not_start):
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(tmp=files))
    if must_not_start is not None:
        monkeypatch.setattr(must_not_start, _never(must_not_start))
    monkeypatch.chdir(files)  # a run that got as far as Hydra would write outputs/ here
    main = importlib.import_module(module).main
    try:
        code = main([arg.format(tmp=files) for arg in argv])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    assert (code, captured.err) == (2, line.format(tmp=files) + "\n")


def test_every_environment_variable_is_documented_with_what_it_takes():
    """docs/configuration.md's table of environment variables lists each one drlmpi reads, with
    the values it takes."""
    from drlmpi.config.environment import VARIABLES

    page = (REPO / "docs" / "configuration.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines()
            if line.startswith("| `DRLMPI_")}
    assert sorted(rows) == sorted(v.name for v in VARIABLES)
    for variable in VARIABLES:
        for value in variable.choices or ():
            assert f"`{value}`" in rows[variable.name], (variable.name, value)


def test_an_empty_value_reads_as_unset_and_a_good_one_passes():
    from drlmpi.config.environment import check_environment

    check_environment({"DRLMPI_BIND_RANKS": "", "DRLMPI_YIELD": "1", "DRLMPI_CUDNN_BENCHMARK": "0",
                       "DRLMPI_COMMIT": "anything"})
    with pytest.raises(ConfigError, match="^DRLMPI_YIELD must be one of 0, 1, got ' 1'"):
        check_environment({"DRLMPI_YIELD": " 1"})
