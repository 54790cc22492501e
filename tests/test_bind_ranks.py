"""``bind_ranks``: a rank pins itself to a core of its own when the job's ranks fill the cores it may
use (``auto``), always (``core``) or never (``none``); threads started after the pin inherit it,
and summary.json's ``per_rank[].cpus`` says where each rank could run. (The end-to-end job:
tests/test_cli.py, the ``world_size=3`` relaunch with ``bind_ranks=core``.)
"""

from __future__ import annotations

import os

import pytest

from drlmpi.job_control.process import bind_rank, cpu_list, pinned_cpu
from tests.mpirun import fresh_python


@pytest.mark.parametrize("mode, rank, size, cpus, expected", [
    ("auto", 3, 4, [4, 5, 6, 7], 7),      # a job with its own CPU list, as many ranks as CPUs
    ("auto", 0, 16, list(range(16)), 0),  # a job that fills the host
    ("auto", 0, 15, list(range(16)), None),  # a spare core: stay unbound
    ("auto", 0, 16, [3], None),           # the launcher bound it already
    ("auto", 0, 1, [0, 1], None),         # a singleton
    ("core", 2, 3, [0, 1], 0),            # more ranks than cores: wrap
    ("core", 0, 1, [5, 9], 5),
    ("none", 1, 2, [0, 1], None),
])
def test_which_core_a_rank_takes(mode, rank, size, cpus, expected):
    assert pinned_cpu(mode, rank, size, cpus) == expected


def test_auto_leaves_ranks_of_several_threads_unbound():
    # threads_per_rank=2 or env.num_threads=2 on a full host: one core would serialise them
    assert pinned_cpu("auto", 3, 16, list(range(16)), threads=2) is None
    assert pinned_cpu("core", 3, 16, list(range(16)), threads=2) == 3  # asked for: pinned


def test_cpu_lists_read_like_tasksets():
    assert cpu_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert cpu_list([3]) == "3" and cpu_list([]) == ""


def test_an_unknown_choice_is_refused_before_mpi():
    with pytest.raises(ValueError, match="bind_ranks must be one of auto, core, none"):
        bind_rank("socket", comm=None)


def test_a_pinned_rank_and_the_threads_it_starts_run_on_one_core():
    code = """
import os, threading
from mpi4py import MPI
from drlmpi.job_control.process import bind_rank
world = MPI.COMM_WORLD
before = sorted(os.sched_getaffinity(0))
os.environ["DRLMPI_BIND_RANKS"] = "none"
print(bind_rank("auto", world))        # the environment's none replaces auto
os.environ.pop("DRLMPI_BIND_RANKS")
print(bind_rank("auto", world))        # a singleton: auto leaves it alone
print(sorted(os.sched_getaffinity(0)) == before)
os.environ["DRLMPI_BIND_RANKS"] = "none"
print(bind_rank("core", world))        # an explicit choice wins over the environment
seen = []
thread = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))
thread.start(); thread.join()
print(sorted(os.sched_getaffinity(0)), seen[0], before[0])
"""
    proc = fresh_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split("\n")
    first = min(os.sched_getaffinity(0))
    assert lines[:4] == ["None", "None", "True", str(first)], proc.stdout
    assert lines[4] == f"[{first}] [{first}] {first}", proc.stdout
