"""Several ``python -m drlmpi`` commands at once, each a fork of one process that imported drlmpi.

:func:`start` runs ``python -m tests.forked_sweeps RUNS.json`` (``RUNS.json``: ``[folder, [arg,
...]]`` pairs). That process imports what ``python -m drlmpi`` imports before its ``main()`` runs
(drlmpi's command line: torch, Hydra, the schema) and the check every sweeping process runs for
its first job (:mod:`drlmpi.run.preflight`), and changes nothing else; then it forks one child
per command. A child is the command's own process: it runs drlmpi's ``__main__`` with the
command's arguments (``runpy``, as ``python -m drlmpi`` does) and its own launch time, writes
``folder/stdout`` and ``folder/stderr``, and its exit status - what ``python -m drlmpi`` would
exit with - goes to ``folder/exit_status``. The parent exits once every child has.

What is shared is the imports: torch alone is about 1.9 s of the 3.5 s a sweeping process takes
on one core before its first job, so ten sweeping processes pay it once, not ten times. Whatever
a process of its own shows - the command line up to its exit status, the launcher's checks and
jobs.json - each child still shows.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import runpy
import signal
import subprocess
import sys
import traceback
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class ForkedSweeps:
    """Commands started by :func:`start`; :meth:`result` waits for all of them (once)."""

    def __init__(self, process: subprocess.Popen, timeout: float) -> None:
        self.process, self.timeout = process, timeout

    @functools.cached_property
    def _ended(self) -> subprocess.CompletedProcess:
        try:
            stdout, stderr = self.process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"forked sweeps still running after {self.timeout} s") from None
        finally:  # the forks too, should they still run
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, stdout, stderr)

    def result(self, folder: Path) -> subprocess.CompletedProcess:
        """The exit status and output of the command that ran in ``folder``."""
        ended = self._ended
        assert ended.returncode == 0, ended.stderr[-2000:]
        status, stdout, stderr = ((folder / name).read_text() for name in ("exit_status", "stdout", "stderr"))
        return subprocess.CompletedProcess(str(folder), int(status), stdout, stderr)


def start(runs: list[tuple[Path, list[str]]], runs_file: Path, timeout: float = 600) -> ForkedSweeps:
    """Start ``python -m drlmpi ARGS`` for every ``(folder, ARGS)`` of ``runs`` at once."""
    runs_file.write_text(json.dumps([(str(folder), args) for folder, args in runs]))
    process = subprocess.Popen([sys.executable, "-m", "tests.forked_sweeps", str(runs_file)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    return ForkedSweeps(process, timeout)


def _exit_status(exc: SystemExit) -> int:
    """The status a process ends with when ``exc`` leaves it (a message is printed, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _child(folder: Path, args: list[str]) -> None:
    """Run one command in this (forked) process, and end it with the command's exit status."""
    import drlmpi.run.command_line as command_line

    for fd, name in ((1, "stdout"), (2, "stderr")):
        os.dup2(os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    status = 1
    try:
        command_line._launch_time = datetime.now()  # as if imported now
        sys.argv = [str(Path(command_line.__file__).parent.parent / "__main__.py"), *args]
        runpy.run_module("drlmpi", run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException:  # noqa: BLE001 (reported as Python would, exit status 1)
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what the interpreter runs at exit (logging's flush among them)
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def main(runs_file: str) -> None:
    import drlmpi.run.command_line  # noqa: F401 (what python -m drlmpi imports before main())
    import drlmpi.run.preflight  # noqa: F401 (what every sweeping process imports for its first job)

    runs = [(Path(folder), list(args)) for folder, args in json.loads(Path(runs_file).read_text())]
    sys.stdout.flush()
    sys.stderr.flush()
    children = {}
    for folder, args in runs:
        pid = os.fork()
        if pid == 0:
            _child(folder, args)
        children[pid] = folder
    while children:
        pid, wait_status = os.wait()
        (children.pop(pid) / "exit_status").write_text(str(os.waitstatus_to_exitcode(wait_status)))


if __name__ == "__main__":
    main(sys.argv[1])
