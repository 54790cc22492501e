"""Writing a run's files whole or not at all: a temporary file beside the target, renamed over
it once complete. A write the file system refuses (a full disk, a quota, a read-only mount)
raises :class:`FileWriteError`, which names the file and the cause in one line, after the
temporary file is removed - the file it would have replaced is left as it was.

``torch.save`` is given an open Python file rather than a path: torch's own file writer turns a
short write into ``RuntimeError: [enforce fail at inline_container.cc:...] unexpected pos``,
losing the ``errno``; through a Python file the ``OSError`` reaches us (sometimes as the
context of that ``RuntimeError``, when torch's writer fails again while closing the archive).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch


class FileWriteError(Exception):
    """A file of the run could not be written for a reason of the file system (no space, quota,
    read-only, I/O error). ``str()`` is the one line the job ends with.

    Attributes:
        path: the file that was being written.
        reason: the cause in words (``No space left on device``).
    """

    def __init__(self, path: Path, reason: str, message: str | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(message or f"cannot write {self.path}: {reason}")


def file_system_error(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind ``exc`` (itself, or in its chain of causes and contexts), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def write_whole(path: Path, write: Callable[[IO[bytes]], None], shared: bool = False) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, then rename it over ``path``.
    A failure of the file system raises :class:`FileWriteError` (the temporary file removed); any
    other exception (a bug: an object that cannot be saved) propagates unchanged. ``shared``:
    several processes may write ``path`` at once (with the same content), so each writes its own
    temporary file, named by host and pid."""
    path = Path(path)
    mine = f".{socket.gethostname()}.{os.getpid()}" if shared else ""
    tmp = path.with_name(f"{path.name}{mine}.tmp")
    try:
        with open(tmp, "wb") as fh:  # the last buffered bytes may fail at close: inside the try
            write(fh)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        cause = file_system_error(exc) if isinstance(exc, (OSError, RuntimeError)) else None
        if cause is None:
            raise
        reason = cause.strerror or str(cause) or type(cause).__name__
        raise FileWriteError(path, reason) from None


def atomic_save(obj: Any, path: Path, shared: bool = False) -> None:
    """``torch.save(obj)`` into ``path``, whole or not at all (see :func:`write_whole`)."""
    write_whole(path, lambda fh: torch.save(obj, fh), shared)


def atomic_write_json(data: dict[str, Any], path: Path) -> None:
    """``data`` as indented JSON into ``path``, whole or not at all (see :func:`write_whole`)."""
    text = (json.dumps(data, indent=2, default=float) + "\n").encode()
    write_whole(path, lambda fh: fh.write(text))
