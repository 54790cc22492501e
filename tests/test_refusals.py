"""Every refusal: a bad command line, configuration or world size is refused before any rank
starts working, in one line that says what to do instead.

The refusals are checked in-process, through the same functions ``python -m drlmpi`` calls in
the same order (the command line's checks, composition, then :func:`drlmpi.run.preflight.make_plan` at the
job's world size). A few subprocess tests show the form a user sees: exit code 2, the line printed
once (not once per rank), no traceback, and no rank left waiting - for each place a refusal can
come from (the command line on every rank, rank 0's directory check, validation after Hydra,
and the plan made before ``world_size=N`` starts any rank).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from drlmpi.config.errors import ConfigError
from drlmpi.config.overrides import override_args
from drlmpi.run.arguments import check_command_line, check_output_directories, resume_arguments
from drlmpi.run.preflight import make_plan
from tests.conftest import REPO
from tests.mpirun import fresh_python, run_job
from tests.pool_worker import compose
from tests.shared_runs import declare

IMAGE_ENV = "env.id=tests.image_env:ImageSide-v0"


def refusal(*argv: str, world_size: int = 1) -> str:
    """The message with which ``python -m drlmpi ARGV`` on ``world_size`` ranks is refused
    (fails the test if it is accepted or spans several lines)."""
    args = list(argv)
    with pytest.raises(ConfigError) as info:
        if any(a.startswith("resume=") for a in args):
            args, _ = resume_arguments(args)
        check_command_line(args)
        check_output_directories(args)
        make_plan(compose([a for a in args if not a.startswith(("hydra.", "-"))]), world_size)
    message = str(info.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize(("argv", "ranks", "expected"), [
    # world sizes the topology cannot use
    (["topology=p2p"], 3, "topology=p2p needs exactly 2 ranks, but the job has 3"),
    (["topology=star"], 1, "topology=star needs at least 2 ranks, but the job has 1"),
    (["topology=sequential"], 2, "topology=sequential needs exactly 1 rank, but the job has 2"),
    (["topology=async"], 1, "topology=async needs at least 2 ranks, but the job has 1"),
    (["topology=groups", "topology.learners=2"], 5,
     "topology.learners=2 needs a world size that is a multiple of 2"),
    # options a topology cannot take
    (["topology=async", "topology.sync_unit=episodes"], 2, "use topology.sync_unit=steps"),
    (["algo=ppo", "topology=async", "topology.utd_mode=free", "topology.max_policy_lag=8"], 2,
     "utd_mode=free is for off-policy algorithms"),
    (["topology=allgather", "topology.backend=nccl"], 1,
     "topology.backend=nccl averages gradients on GPUs: it needs device=cuda"),
    (["topology=allgather", "topology.backend=gloo", "topology.reduce=allgather"], 1,
     "topology.reduce=allgather is an MPI reduction"),
    (["topology=allgather", "topology.backend=ucc"], 1, "topology.backend must be one of"),
    # an algorithm that cannot act in the environment, naming one that can
    (["algo=td3", "env=cartpole"], 1, "algo=td3 needs a continuous (Box) action space"),
    (["algo=dqn", "env=pendulum"], 1, "algo=dqn needs a discrete action space"),
    (["env=pendulum"], 1, "algo=td3"),
    (["algo=td3", IMAGE_ENV, "env.reward_threshold=null"], 1, "algo=td3"),
    (["env.id=NoSuchEnv-v9"], 1, "env.id='NoSuchEnv-v9' cannot be made"),
    (["topology=star", "env.sim_cost_ms_by_rank={7: 5}"], 3,
     "env.sim_cost_ms_by_rank names rank 7, but the job has 3 rank(s), 0 to 2"),
    (["topology=star", "env.sim_cost_ms_by_rank={1: -2}"], 3, "the cost of rank 1 must be a number"),
    # Atari
    (["env=tetris", "+env.atari.frame_skip=0"], 1, "env.atari.frame_skip must be"),
    (["env.atari={frame_skip: 4}"], 1, "env.atari is an option of the atari family (env files: breakout, "
                                       "pong, tetris), not of env=cartpole (gym family)"),
    (["env.num_threads=2"], 1, "env.num_threads is an option of the atari family (env files: breakout, "
                               "pong, tetris), not of env=cartpole (gym family), got 2"),
    (["++env.num_threads=2"], 1,  # added past the command line's check: the run plan refuses it
     "env.num_threads is an option of the atari family (ALE/ ids), not of env.id=CartPole-v1 (gym family)"),
    (["env=breakout", "env.atari.frame_stak=2"], 1, "did you mean env.atari.frame_stack?"),
    (["env=tetris", "env.vector=async"], 1, "env.vector=async is not for ALE/ ids: a simulator's"),
    (["env=pong", "+env.kwargs.render_mode=human"], 1, "env.kwargs.render_mode is not taken by ALE ids"),
    (["env=tetris", "algo=td3"], 1, "algo=td3 needs a continuous"),
    (["env=breakout", "algo=ppo", "+env.atari.screen_size=16", "algo.encoder=cnn"], 1,
     "algo.encoder=cnn needs images of at least 36x36"),
    # values the schema refuses: on the command line, in a sweep, after composition
    (["algo.gamma=1.5"], 1, "algo.gamma must be in [0, 1], got 1.5"),
    (["-m", "topology=sequential", "algo.lr=1e-3,abc"], 1, "algo.lr must be a number, got 'abc'"),
    (["+experiment/pair=ppo_cartpole", "algo.clip_range=-1", "run.max_env_steps=100"], 1,
     "algo.clip_range must be > 0, got -1"),
    (["hydra.run.dir=/dev/null/run"], 1,
     "hydra.run.dir is not a writable directory (Not a directory), got /dev/null/run"),
    # Hydra's options: the value of --cfg is not an override; two of its modes are refused
    (["--cfg", "job", "algo.gamma=2"], 1, "algo.gamma must be in [0, 1], got 2"),
    (["-m", "--cfg", "job", "seed=0,1"], 1, "--multirun and --cfg cannot be given together"),
])
def test_refused_in_one_line(argv, ranks, expected):
    assert expected in refusal(*argv, world_size=ranks)


def test_groups_refusal_names_the_sizes_that_work():
    message = refusal("topology=groups", "topology.learners=2", world_size=5)
    assert "mpiexec -n 6" in message and "use topology.learners=1" in message


CHECKPOINTED = declare("checkpointed-sequential", 1, [
    "run.max_env_steps=600", "run.checkpoint_every_s=0.01", "run.progress_every_s=0", "algo.hidden=[16]",
    "algo.learning_starts=100", "run.eval_every=100000"])


def test_resume_refusals(tmp_path, runs):
    checkpointed_run = runs.get(CHECKPOINTED).run_dir  # a run with a checkpoint, as a killed one has
    assert json.loads((checkpointed_run / "checkpoint" / "meta.json").read_text())["world_size"] == 1
    assert refusal(f"resume={tmp_path}").startswith("resume: ")
    assert "only run.max_env_steps" in refusal(f"resume={checkpointed_run}", "topology=star")
    assert refusal(f"resume={checkpointed_run}", "run.max_env_steps=0") == \
        "run.max_env_steps must be >= 1, got 0"
    # Another world size than the checkpoint's: refused by every rank before any message.
    assert "resume: the checkpoint was written by 1 rank(s) and this job has 2" in \
        refusal(f"resume={checkpointed_run}", world_size=2)


# -- what a user sees ---------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drlmpi", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize(("args", "line"), [
    (("algo.gamma=1.5",), "drlmpi: error: algo.gamma must be in [0, 1], got 1.5"),  # the command line
    (("topology=p2p",), "drlmpi: error: topology=p2p needs exactly 2 ranks, but the job has 1"),  # validate
    # world_size=N started alone: refused before mpiexec starts any rank (drlmpi.run.prelaunch)
    (("topology=p2p", "world_size=3"),
     "drlmpi: error: topology=p2p needs exactly 2 ranks, but the job has 3"),
])
def test_a_refusal_is_one_line_exit_2_no_traceback(tmp_path, args, line):
    proc = _cli(*args, f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(line)
    assert proc.stderr.count("drlmpi: error") == 1 and "Traceback" not in proc.stderr
    assert "starting mpiexec" not in proc.stderr and "Abort" not in proc.stderr
    assert not (tmp_path / "run" / "run.lock").exists()  # the claimed directory is let go


def test_the_composed_config_is_printed_with_cfg_job():
    """``--cfg job`` (what --help names to see a run's config) and ``--info plugins``: Hydra's
    options and their values, before or after the overrides, never read as overrides."""
    assert override_args(["-m", "--cfg", "job", "--info", "plugins", "seed=1", "--info", "-cn",
                          "config", "--config-dir=x", "algo=ppo"]) == ["seed=1", "algo=ppo"]
    proc = _cli("env=lunarlander", "--cfg", "job", "algo=ppo")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "id: LunarLander-v3" in proc.stdout and "name: ppo" in proc.stdout


def test_a_command_line_refusal_does_not_wait_for_torch():
    """A bad option that is not a topology's is refused before the topologies are registered
    (which imports torch, ~2 s): the refusal takes ~0.2 s instead of ~2 s."""
    code = ("import sys\n"
            "from drlmpi.run.command_line import main\n"
            "try:\n"
            "    main(['algo.gamma=1.5', 'hydra.run.dir=/nonexistent/run'])\n"
            "except SystemExit as exc:\n"
            "    assert exc.code == 2, exc.code\n"
            "assert 'torch' not in sys.modules, 'the refusal imported torch'\n")
    proc = fresh_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == "drlmpi: error: algo.gamma must be in [0, 1], got 1.5\n"


def test_world_size_is_checked_before_any_rank_starts():
    """The plan every rank would make, made by the process that would exec mpiexec (which
    leaves mpi4py's setting as it found it: a later import of MPI in the process initialises it)."""
    import mpi4py

    from drlmpi.run.prelaunch import check_before_launch

    initialize = mpi4py.rc.initialize

    with pytest.raises(ConfigError, match="topology=p2p needs exactly 2 ranks, but the job has 3"):
        check_before_launch(["topology=p2p", "world_size=3", "hydra.run.dir=/nonexistent"], 3)
    with pytest.raises(ConfigError, match="run.eval_on=simulators needs the rounds"):
        check_before_launch(["topology=async", "run.eval_on=simulators", "world_size=3"], 3)
    check_before_launch(["topology=p2p", "world_size=2"], 2)  # a job that can run: no error
    check_before_launch(["--config-dir", "/elsewhere", "topology=p2p"], 3)  # Hydra's flags: the ranks check
    assert mpi4py.rc.initialize == initialize


@pytest.mark.parametrize(("override", "ranks", "message"), [
    ("algo.gamma=1.5", 2, "drlmpi: error: algo.gamma must be in [0, 1], got 1.5"),  # every rank, no MPI
    ("hydra.run.dir=/proc/drlmpi/x", 2, "drlmpi: error: hydra.run.dir is not a writable directory"),  # rank 0
    ("topology=p2p", 3, "drlmpi: error: topology=p2p needs exactly 2 ranks, but the job has 3"),  # after MPI
])
def test_a_refusal_under_mpiexec_ends_every_rank(tmp_path, override, ranks, message):
    job = run_job(ranks, [override], tmp_path / "run", timeout=90)  # run_job fails the test on a hang
    assert job.returncode == 2
    assert job.stderr.count(message) == 1, job.stderr
    assert job.stderr.count("drlmpi: error") == 1 and "Traceback" not in job.stderr



@pytest.mark.parametrize(("launcher", "rank", "speaks", "waits"), [
    ("OMPI", "0", True, False), ("OMPI", "1", False, True),  # Open MPI ends the job at a failure
    ("PMI", "0", True, False), ("PMI", "1", False, False),  # MPICH waits for every rank
])
def test_a_refusal_every_rank_makes_leaves_rank_0_time_to_say_it(monkeypatch, capsys, launcher, rank,
                                                               speaks, waits):
    """A refusal every rank makes before MPI: rank 0 says it; under Open MPI, whose launcher ends
    every rank at the first that fails, the others wait before failing (rank 0's exit ends them),
    or the job would end without the line (seen on an H200 host's Open MPI 4.1.6)."""
    from drlmpi.job_control.abort import CONFIG_ERROR_GRACE_S
    from drlmpi.run import command_line

    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    prefix = "OMPI_COMM_WORLD_" if launcher == "OMPI" else "PMI_"
    monkeypatch.setenv(f"{prefix}RANK", rank)
    monkeypatch.setenv(f"{prefix}SIZE", "2")
    slept = []
    monkeypatch.setattr(command_line.time, "sleep", slept.append)
    with pytest.raises(SystemExit) as exited:
        command_line.main(["algo.gamma=1.5"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.count("drlmpi: error: algo.gamma must be in [0, 1], got 1.5") == (1 if speaks else 0)
    assert slept == ([CONFIG_ERROR_GRACE_S] if waits else [])
