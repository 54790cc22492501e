"""What users read of the schema: ``python -m drlmpi --help`` (:func:`short_help`: one screen - the
usage, the config groups, the options most runs set and where the rest are), ``python -m drlmpi
--help-all`` (:func:`help_lines`: every option, wrapped to :data:`WIDTH` characters), the
reference table of docs/configuration.md (:func:`reference_table`) and its table of the built-in
topologies (:func:`topology_table`, and the README's list of them: :func:`topology_names`), both
made from the registries: ``python -m drlmpi.run.reference --write`` rewrites the document's
generated blocks (:data:`BLOCKS`; without ``--write`` it prints the reference), and a test keeps
them in step. The full list and the table name every environment family's and topology's options
too, so both register them first (:mod:`drlmpi.envs.families`,
:mod:`drlmpi.topologies.core.registry`); the short help reads only the schema's own scopes and
conf/, and starts no torch.
"""

from __future__ import annotations

import inspect
import os
import sys
import textwrap
from pathlib import Path

from drlmpi.config.options import Option, format_number
from drlmpi.config.plugins import CONF_DIR
from drlmpi.config.schema import SCHEMA
from drlmpi.job_control.abort import CONFIG_ERROR_EXIT, end_job

#: no line of either help is longer than this
WIDTH = 100
#: the options most runs set, each with a doc of one short line (the full one: --help-all)
MOST_USED = (
    ("world_size", "ranks of the job (N > 1: launched for you with DRLMPI_MPIEXEC)"),
    ("seed", "base seed; rank r uses seed + 10000 * r"),
    ("device", "learner device: cpu | cuda | cuda:N | auto"),
    ("run.max_env_steps", "budget: job-wide environment steps (null: none)"),
    ("run.max_train_seconds", "budget: training seconds, evaluation excluded (null: none)"),
    ("run.eval_every", "greedy evaluation every this many job-wide env steps"),
    ("run.stop_on_solve", "stop at the first evaluation that reaches env.reward_threshold"),
    ("run.progress_every_s", "seconds between progress lines (0: quiet)"),
    ("env.num_envs", "environments each simulating rank steps together"),
    ("env.sim_cost_ms", "CPU milliseconds of busy work added per env step (a costly simulator)"),
    ("algo.lr", "learning rate (default: the algorithm's)"),
    ("algo.batch_size", "minibatch size per update (default: the algorithm's)"),
)

USAGE = """\
drlmpi - deep RL experiments across MPI ranks, with interchangeable topologies

usage:
  python -m drlmpi [group=name] [key=value ...]   one run (world_size=N: on N ranks)
  python -m drlmpi -m topology=star,p2p seed=0,1  a sweep: one MPI job per combination
  python -m drlmpi +experiment=NAME               a preset study (conf/experiment/)
  python -m drlmpi resume=RUN_DIR                 continue a run from its last checkpoint
  mpiexec -n N python -m mpi4py -m drlmpi ...     one run under your own MPI launcher
  python -m drlmpi.report RUN_OR_SWEEP_DIR        tables and plots from run directories
  python -m drlmpi.plan [overrides]               predict each topology's speed on this machine
  python -m drlmpi.play RUN_DIR                   replay a trained policy"""

FOOTER = """\
more:
  python -m drlmpi [overrides] --cfg job  print the composed config (what a run gets), no run
  python -m drlmpi --help-all             every option: default, allowed values, meaning
  python -m drlmpi --hydra-help           Hydra's own options
  hydra.run.dir=DIR                       where a run writes (default: outputs/DATE/TIME_...)
  docs/configuration.md                   every option, the presets and what a run writes"""


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


#: the order in which the references list the schema's groups of scopes
GROUP_ORDER = ("", "run", "env", "algo", "topology")


def registered_scopes() -> list[tuple[str, dict[str, Option]]]:
    """Every scope of the schema, the environment families' and topologies' registered first,
    in :data:`GROUP_ORDER` (an environment family's own options right after ``env``'s)."""
    from drlmpi.envs.families import register as register_families
    from drlmpi.topologies.core.registry import register  # here: it imports torch (command_line imports this)

    register_families()
    register()
    return sorted(SCHEMA.items(), key=lambda item: GROUP_ORDER.index(item[0].split("/")[0]))


def _family(scope: str) -> str:
    """``atari family: ALE/ ids`` for an environment family's scope, else nothing."""
    from drlmpi.envs.families import FAMILIES

    if not scope.startswith("env/"):
        return ""
    name = scope.split("/", 1)[1]
    ids = [family.ids for family in FAMILIES if family.name == name]
    return f"{name} family: {ids[0]}" if ids else f"{name} family"


def reference_table() -> str:
    """The markdown reference of every option: scope, key, allowed values, doc."""
    lines = ["| option | default | allowed | meaning |", "|---|---|---|---|"]
    for scope, options in registered_scopes():
        prefix = ("env." if scope.startswith("env/") else scope.replace("/", "=") + ": " if "/" in scope
                  else f"{scope}." if scope else "")
        for key, option in options.items():
            if key == "_target_":
                continue
            note = f"({_family(scope)}) " if scope.startswith("env/") else ""
            doc = (note + option.doc).replace("|", "\\|")
            lines.append(f"| `{prefix}{key}` | `{shown_default(option)}` | {option.allowed(markdown=True)} "
                         f"| {doc} |")
    return "\n".join(lines)


def topology_table() -> str:
    """The markdown table of drlmpi's own topologies, from the registry in report order: name,
    accepted world sizes, class (the ``_target_`` its YAML names) and the class's summary."""
    from drlmpi.topologies.core.registry import built_in

    lines = ["| topology | ranks | class (`_target_`) | what it does |", "|---|---|---|---|"]
    for name, cls in built_in().items():
        summary = " ".join(inspect.getdoc(cls).split("\n\n")[0].split()).replace("``", "`")
        lines.append(f"| `{name}` | {cls.sizes_text()} | `{cls.__module__}.{cls.__qualname__}` | {summary} |")
    return "\n".join(lines)


def topology_names() -> str:
    """drlmpi's own topologies as the README names them: ``a``, ``b``, ... or ``z`` (report order)."""
    from drlmpi.topologies.core.registry import built_in

    names = [f"`{name}`" for name in built_in()]
    return f"{', '.join(names[:-1])} or {names[-1]}"


#: the document whose blocks are generated, and each block's name -> what makes it
#: (``<!-- NAME:begin -->`` ... ``<!-- NAME:end -->``)
DOCUMENT = CONF_DIR.parent / "docs" / "configuration.md"
BLOCKS = {"topologies": topology_table, "schema": reference_table}


def _split(text: str, name: str) -> tuple[str, str, str]:
    """(up to and with ``<!-- NAME:begin -->``, the block, from ``<!-- NAME:end -->`` on)."""
    begin, end = f"<!-- {name}:begin -->\n", f"\n<!-- {name}:end -->"
    before, rest = text.split(begin, 1)
    block, after = rest.split(end, 1)
    return before + begin, block, end + after


def generated_block(text: str, name: str) -> str:
    """The text between a document's ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` lines."""
    return _split(text, name)[1]


def write_blocks(path: Path = DOCUMENT) -> None:
    """Rewrite every generated block of ``path`` from what makes it."""
    text = path.read_text()
    for name, make in BLOCKS.items():
        before, _, after = _split(text, name)
        text = before + make() + after
    path.write_text(text)


def wrap(text: str, indent: int, hang: int) -> list[str]:
    """``text`` in lines of at most :data:`WIDTH` characters: the first indented by ``indent``,
    the others by ``hang`` (never broken inside a word or at a hyphen)."""
    return textwrap.wrap(text, WIDTH, initial_indent=" " * indent, subsequent_indent=" " * hang,
                         break_on_hyphens=False, break_long_words=False) or [""]


def help_lines() -> list[str]:
    """``--help-all``: every option of every scope, as ``key=default  (allowed values)`` and its
    doc beneath, wrapped to :data:`WIDTH` characters."""
    out = []
    for scope, options in registered_scopes():
        if not options:  # an environment family without options of its own
            continue
        title = f"env: {_family(scope)}" if scope.startswith("env/") else scope.replace("/", "=")
        out += ["", f"[{title or 'top level'}]"]
        prefix = scope.split("/")[0] + "." if scope else ""
        for key, option in options.items():
            if key in ("_target_", "name"):
                continue
            out += wrap(f"{prefix}{key}={shown_default(option)}  ({option.allowed()})", 2, 6)
            out += wrap(option.doc, 6, 6)
    return out


def config_groups() -> list[str]:
    """The config groups the command line picks from (``algo  dqn, ppo, ...``), read from the
    files in conf/ and the plugin directories, so a new algorithm, environment, topology or preset
    shows up by itself."""
    from drlmpi.config.choices import config_repository, group_choices, top_level

    repository = config_repository()
    lines = ["config groups (pick with group=name; conf/):"]
    for group in ("algo", "env", "topology", "experiment", "hydra/sweeper", "hydra/launcher"):
        key = "+experiment" if group == "experiment" else group
        # the top level of each; a folder's configs (the presets' parts, Optuna's samplers) by folder
        own, folders = top_level(group_choices(group, repository))
        text = ", ".join(own)
        if folders and not group.startswith("hydra/"):
            text += f"; their parts: {', '.join(f'{folder}/' for folder in folders)}"
        lines += wrap(f"{key:<15}" + text, 2, 17)
    return lines


def most_used(scopes: dict[str, dict[str, Option]] = SCHEMA) -> list[str]:
    """:data:`MOST_USED`, each as ``key=default`` (the default left out where each algorithm or
    topology has its own) and its short doc. Raises KeyError for a key no scope has."""
    lines = ["most used options (the schema's defaults; a preset or conf/tuned/ may set others):"]
    for dotted, doc in MOST_USED:
        group, _, key = dotted.rpartition(".")
        found = [options[key] for scope, options in scopes.items()
                 if scope.split("/")[0] == group and key in options]
        if not found:
            raise KeyError(f"--help names {dotted}, which no scope of the schema has")
        defaults = {shown_default(option) for option in found}
        setting = f"{dotted}={defaults.pop()}" if len(defaults) == 1 else dotted
        lines += wrap(f"{setting:<27} {doc}", 2, 30)
    return lines


def short_help() -> str:
    """``--help``: one screen (under 60 lines of at most :data:`WIDTH` characters)."""
    return "\n".join([USAGE, "", *config_groups(), "", *most_used(), "", FOOTER])


def full_help() -> str:
    """``--help-all``: the usage and every option."""
    return "\n".join([USAGE, "", *config_groups(), "",
                      "every option (key=default  (allowed values); each value is checked before any "
                      "rank starts):", *help_lines(), "", FOOTER])


def print_help(full: bool = False) -> None:
    """``--help`` (``full``: ``--help-all``), from conf/ and the schema (a plugin directory that
    cannot be read is refused in one line, as a run's would be)."""
    from drlmpi.config.errors import ConfigError

    try:
        text = full_help() if full else short_help()
    except ConfigError as exc:
        end_job(f"drlmpi: error: {exc}", CONFIG_ERROR_EXIT, abort=False)
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `--help-all | head`: the reader stopped; nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["--write"]:
        write_blocks()
    else:
        print(reference_table())
