"""What users read of the schema: ``python -m drlmpi --help`` (:func:`print_help`: the usage, the
config groups and every option, :func:`help_lines`) and the reference table of
docs/configuration.md (:func:`reference_table`; ``python -m drlmpi.run.reference`` prints it, and
a test keeps the document in step). Both list every topology's options too, so both register
them first (:mod:`drlmpi.topologies.registry`).
"""

from __future__ import annotations

import os
import sys

from drlmpi.config.options import Option, format_number
from drlmpi.config.plugins import group_files
from drlmpi.config.schema import SCHEMA
from drlmpi.job_control.abort import CONFIG_ERROR_EXIT, end_job


def shown_default(option: Option) -> str:
    """An option's default as one writes it on the command line (``???``: none)."""
    value = option.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    if isinstance(value, float):
        return format_number(value) if float(value).is_integer() and abs(value) < 1e15 else repr(value)
    return str(value)


def reference_table() -> str:
    """The markdown reference of every option: scope, key, allowed values, doc."""
    from drlmpi.topologies.registry import register  # here: it imports torch (command_line imports this)

    register()
    lines = ["| option | default | allowed | meaning |", "|---|---|---|---|"]
    for scope, options in SCHEMA.items():
        prefix = scope.replace("/", "=") + ": " if "/" in scope else (f"{scope}." if scope else "")
        for key, option in options.items():
            if key == "_target_":
                continue
            doc = option.doc.replace("|", "\\|")
            lines.append(f"| `{prefix}{key}` | `{shown_default(option)}` | {option.allowed(markdown=True)} "
                         f"| {doc} |")
    return "\n".join(lines)


def help_lines() -> list[str]:
    """One line per option for ``python -m drlmpi --help``."""
    from drlmpi.topologies.registry import register

    register()
    out = []
    for scope, options in SCHEMA.items():
        out.append("")
        out.append(f"  [{scope.replace('/', '=') or 'top level'}]")
        prefix = scope.split("/")[0] + "." if scope else ""
        for key, option in options.items():
            if key in ("_target_", "name"):
                continue
            setting = f"{prefix}{key}={shown_default(option)}"
            out.append(f"    {setting:38} {option.allowed():28} {option.doc}")
    return out

USAGE = """\
drlmpi - deep RL experiments across MPI ranks, with interchangeable topologies

usage:
  python -m drlmpi [key=value ...]                         one run (world_size=N re-launches under mpiexec)
  mpiexec -n N python -m mpi4py -m drlmpi topology=star    one run on N ranks
  python -m drlmpi -m topology=star,async world_size=4,8   a sweep: one MPI job per combination
  python -m drlmpi +experiment=learning_matrix             a study preset (conf/experiment/)
  python -m drlmpi resume=RUN_DIR                          continue a run from its last checkpoint
  python -m drlmpi.report RUN_OR_SWEEP_DIR ...             tables and plots from run directories
  python -m drlmpi.play RUN_DIR                            replay a trained policy

config groups (conf/):
{groups}
  --hydra-help  Hydra's own options     --cfg job  print the composed config and exit
Options (type and allowed values are checked before any rank starts; docs/configuration.md):"""


def config_groups() -> str:
    """One line per config group the command line picks from (``algo=dqn|td3|...``), read from
    the files in conf/, so a new algorithm, environment, topology or preset shows up by itself."""
    lines = []
    for group in ("algo", "env", "topology", "experiment"):
        names = sorted(group_files(group))  # conf/ and the plugin directories
        key = "+experiment" if group == "experiment" else group
        lines.append(f"  {key}={'|'.join(names)}")
    return "\n".join(lines)


def print_help() -> None:
    """``--help``: the usage header and every option's one-line doc, from the schema (a plugin
    directory that cannot be read is refused in one line, as a run's would be)."""
    from drlmpi.config.errors import ConfigError

    try:
        groups, options = config_groups(), help_lines()
    except ConfigError as exc:
        end_job(f"drlmpi: error: {exc}", CONFIG_ERROR_EXIT, abort=False)
    try:
        print(USAGE.format(groups=groups))
        print("\n".join(options), flush=True)
    except BrokenPipeError:  # `--help | head`: the reader stopped; nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover
    print(reference_table())
