"""What every entry point does with what a user hands it besides overrides - YAML files, sizes and
counts, devices, files and folders to write - so that a bad one is refused in one line that says
what is wrong and what to do, with exit status 2, never a traceback:

* :func:`read_yaml`: a config file read (a plugin directory's, a run directory's), or
  :class:`~drlmpi.config.errors.ConfigError` naming the file and where the YAML breaks;
* :class:`ArgumentParser`: argparse, its errors in one line (no usage block);
  :func:`positive_int`, :func:`positive_float` and :func:`device_name`: its ``type=`` functions
  for sizes, counts, seconds and torch devices;
* :func:`check_writable`, :func:`check_output_file`, :func:`check_output_folder`: where an entry
  point will write, checked before it spends any time (:class:`ConfigError` otherwise);
* :func:`refuse`: the line itself, ``PROG: error: PROBLEM`` on stderr, and the exit status.

Light on purpose (argparse, pathlib): every entry point imports it before anything else.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

#: the exit status of a refusal: the same as ``python -m drlmpi``'s for a configuration it refuses
REFUSED_EXIT = 2


def refuse(prog: str, problem: object) -> int:
    """Print ``PROG: error: PROBLEM`` on stderr, one line; returns :data:`REFUSED_EXIT` for the
    entry point to exit with."""
    print(f"{prog}: error: {problem}", file=sys.stderr, flush=True)
    return REFUSED_EXIT


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose refusals are one line, ``PROG: error: MESSAGE`` (argparse prints
    its usage block first; ``--help`` still shows it), with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(REFUSED_EXIT, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    """argparse ``type=``: a whole number >= 1 (a batch size, a count, threads)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number >= 1 is needed, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a whole number >= 1 is needed, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse ``type=``: a finite number > 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number > 0 is needed, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"a finite number > 0 is needed, got {text}")
    return value


def device_name(text: str) -> str:
    """argparse ``type=``: a device torch can name (``cpu``, ``cuda``, ``cuda:1``); whether it is
    there is the benchmark's to find out (a row that fails says so)."""
    import torch  # the benchmarks that take a device have it imported already

    try:
        torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"a torch device such as cpu, cuda or cuda:1 is needed, "
                                         f"got {text!r}") from None
    return text


def read_yaml(path: Path | str, advice: str = "correct it", kind: type | None = None) -> Any:
    """The OmegaConf container of the YAML file ``path``. A file that cannot be read or is not
    valid YAML raises :class:`~drlmpi.config.errors.ConfigError` in one line naming the file, the
    line and column where the YAML breaks and what the parser found, then ``advice`` (what to
    do); ``kind`` (``dict`` or ``list``): one whose top level is not that is refused alike."""
    import yaml
    from omegaconf import DictConfig, OmegaConf

    from drlmpi.config.errors import ConfigError

    try:
        loaded = OmegaConf.load(path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = exc.problem or exc.context or type(exc).__name__
        raise ConfigError(f"{path} is not valid YAML ({where}{what}): {advice}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML ({exc}): {advice}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file (YAML is UTF-8 text): {advice}") from None
    except OSError as exc:  # a folder, unreadable; OmegaConf's "Invalid loaded object type" too
        raise ConfigError(f"{path} cannot be read as YAML ({exc.strerror or exc}): {advice}") from None
    if kind is not None and isinstance(loaded, DictConfig) != (kind is dict):
        shape = "a mapping (key: value lines)" if kind is dict else "a list (- item lines)"
        raise ConfigError(f"{path} is not {shape}: {advice}")
    return loaded


def check_writable(option: str, path: str) -> None:
    """Raise ConfigError unless a file can be written in directory ``path`` (created for the
    check if it does not exist, and removed again with every level the check created)."""
    import tempfile

    from drlmpi.config.errors import ConfigError

    target = Path(path).expanduser().absolute()
    created: list[Path] = []
    probe = target
    while not probe.exists() and probe != probe.parent:
        created.append(probe)
        probe = probe.parent
    try:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=target):
            pass
    except OSError as exc:
        raise ConfigError(f"{option} is not a writable directory ({exc.strerror}), got {path}") from None
    finally:
        for level in created:  # deepest first
            try:
                level.rmdir()
            except OSError:
                break


def check_output_folder(option: str, path: Path | str) -> None:
    """Raise ConfigError unless ``path`` is a folder that can be written in, or can be made one
    (``option``: how the command line names it)."""
    _check_folder(option, path, Path(path).expanduser())


def check_output_file(option: str, path: Path | str) -> None:
    """Raise ConfigError unless the file ``path`` can be written: not a folder, in a folder that
    can be written in or made (``option``: how the command line names it)."""
    from drlmpi.config.errors import ConfigError

    target = Path(path).expanduser()
    if target.is_dir():
        raise ConfigError(f"{option} {path} is a folder: name a file, e.g. {target / 'out.json'}")
    _check_folder(option, path, target.parent)


def _check_folder(option: str, given: Path | str, folder: Path) -> None:
    """``folder`` (``given`` or the one ``given`` goes into) can be written in, or made."""
    from drlmpi.config.errors import ConfigError

    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        if existing == Path(given).expanduser():
            raise ConfigError(f"{option} {given} is a file: name a folder (one that does not exist yet "
                              "is made)")
        raise ConfigError(f"{option} {given}: {existing} is a file, not a folder: name a path in a folder")
    check_writable(f"{option}'s folder" if folder != Path(given).expanduser() else option, str(folder))
