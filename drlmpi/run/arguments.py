"""The command line's checks before Hydra or MPI start: every group choice against the configs
Hydra can find and every override's value against the schema (every value of a sweep), output
directories that can be written, the run directory claimed (:mod:`drlmpi.run.ownership`), and
``resume=DIR`` turned into the run's own overrides.
"""

from __future__ import annotations

from pathlib import Path

from drlmpi.config.checks import check_override
from drlmpi.config.choices import check_group_choices
from drlmpi.config.inputs import check_writable
from drlmpi.config.overrides import find, override_args, parse, value_text, values


def chosen(argv: list[str], group: str, default: str) -> tuple[str, ...] | None:
    """The ``group=name`` the command line picks, or each name of a sweep over several (``None``
    when an experiment preset may change it, or for a sweep function Hydra expands)."""
    picked = find(argv, group)
    if picked is not None:
        names = values(picked)
        return None if names is None else tuple(str(name) for name in names)
    if any(o.key_or_group.startswith("experiment") for o in parse(argv)):
        return None
    return (default,)


#: Hydra's options of which a command line may give one (it refuses two with a traceback)
HYDRA_MODES = (("--run", "-r"), ("--multirun", "-m"), ("--cfg", "-c"), ("--info", "-i"),
               ("--shell-completion", "-sc"))


def check_command_line(argv: list[str]) -> None:
    """Raise ConfigError, before Hydra or MPI start, for a group choice that names no config
    (:func:`~drlmpi.config.choices.check_group_choices`) or an override whose value the schema
    rejects (every value of a sweep). Registers every environment family's options, then every
    topology's (a plugin topology that cannot be imported is refused here): before the first
    ``topology.`` override, else once the others pass - registering imports every topology
    class, and with it torch (about 2 s), which a refusal of any other option need not wait for.
    First the environment variables drlmpi reads
    (:func:`drlmpi.config.environment.check_environment`) and the plugin directories' config files
    (:func:`drlmpi.config.plugins.check_plugin_files`): a bad value or file is refused here, in
    one line, as a bad override is."""
    from drlmpi.config.environment import check_environment
    from drlmpi.config.errors import ConfigError
    from drlmpi.config.plugins import check_plugin_files

    check_environment()
    check_plugin_files()
    modes = [names[0] for names in HYDRA_MODES if any(a in names for a in argv)]
    if len(modes) > 1:
        raise ConfigError(f"{' and '.join(modes)} cannot be given together (one of "
                          f"{', '.join(names[0] for names in HYDRA_MODES)})")
    check_group_choices(argv)  # the groups first: they pick the scopes the options are checked in
    check_launcher_overrides(argv)
    from drlmpi.envs.families import register as register_families  # the env files start from them

    register_families()
    scopes = {"algo": chosen(argv, "algo", "dqn"), "topology": chosen(argv, "topology", "sequential"),
              "env": chosen(argv, "env", "cartpole")}
    for arg in override_args(argv):
        if parse([arg])[0].key_or_group.startswith("topology."):
            _register_topologies()
        check_override(arg, scopes)
    _register_topologies()


def check_launcher_overrides(argv: list[str]) -> None:
    """Refuse, in one line, a ``hydra.launcher.KEY=`` value the sweep launcher does not take
    (``bind``, ``invalid``, ``order``, ``cores``, ``timeout_s``, ``deadline_s``: Hydra would say it in
    four lines when it builds the launcher)."""
    from drlmpi.config.errors import ConfigError
    from drlmpi.job_control.launchers import check_launcher_setting

    for override in parse(override_args(argv)):
        key = override.key_or_group
        if key.startswith("hydra.launcher.") and not override.is_delete():
            for value in values(override) or []:
                try:
                    check_launcher_setting(key.split(".", 2)[2], value)
                except ValueError as exc:
                    raise ConfigError(str(exc)) from None


def _register_topologies() -> None:
    from drlmpi.topologies.core.registry import register  # imported here: it imports torch

    register()


def check_output_directories(argv: list[str]) -> None:
    """Raise ConfigError for an output directory (``hydra.run.dir``, ``hydra.sweep.dir``, or the
    current directory for the default ``outputs/`` and ``multirun/``) that cannot be written."""
    given = False
    for override in parse(argv):
        key = override.key_or_group
        if key in ("hydra.run.dir", "hydra.sweep.dir"):
            given = True
            path = value_text(override)
            if path is not None and "${" not in path:
                check_writable(key, path)
    if not given:
        check_writable("the current directory (outputs/, multirun/)", ".")


def claim_run_directory(argv: list[str]) -> str | None:
    """Claim the run directory (:func:`drlmpi.run.ownership.claim`) when the command line names it
    as a plain path (``hydra.run.dir=PATH``; ``resume=`` does); a directory Hydra must resolve is
    claimed by rank 0 once resolved. Returns the directory it claimed (``None``: none). Raises
    ConfigError for a live run's directory, or a finished run's that ``resume=`` or
    ``run.overwrite=true`` do not allow."""
    from drlmpi.run.ownership import claim, say

    given = find(argv, "hydra.run.dir")
    path = value_text(given) if given is not None else None
    if not path or "${" in path:
        return None
    overwrite = find(argv, "run.overwrite")
    say(claim(path, overwrite=overwrite is not None and values(overwrite) == [True],
              resuming=find(argv, "resume") is not None))
    return path


#: overrides a resumed run may change (budgets and reporting; anything else would change the run).
RESUME_MAY_CHANGE = ("run.max_env_steps", "run.max_train_seconds", "run.max_episodes",
                     "run.checkpoint_every_s", "run.progress_every_s", "run.stop_on_solve")
#: accepted beside resume= without changing the run: the sweep launcher resumes a job of a
#: preset that sets MULTIRUN as one run
RESUME_PASS_THROUGH = ("hydra.mode",)


def resume_arguments(argv: list[str]) -> tuple[list[str], int]:
    """``resume=DIR [budget overrides]`` -> the run's own overrides (``DIR/.hydra/overrides.yaml``)
    plus those, ``resume=DIR`` and ``hydra.run.dir=DIR``; and the checkpoint's world size.
    Refuses, in one line, a directory without a checkpoint and overrides that would change
    the run (another topology, algorithm or size)."""
    import json

    from drlmpi.config.errors import ConfigError
    from drlmpi.config.inputs import read_yaml
    from drlmpi.outputs.checkpoint import read_meta

    value = value_text(find(argv, "resume")) or ""
    run_dir = Path(value).expanduser().absolute()
    extra = [a for a in argv if a.startswith("-") or parse([a])[0].key_or_group != "resume"]
    for arg in extra:
        if arg.startswith("-") or parse([arg])[0].key_or_group not in RESUME_MAY_CHANGE + RESUME_PASS_THROUGH:
            raise ConfigError(f"resume=DIR continues a run with its own configuration; only "
                              f"{', '.join(RESUME_MAY_CHANGE)} may be changed, got {arg}")
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    if not overrides_file.is_file():
        raise ConfigError(f"resume: {value} is not a drlmpi run directory (no .hydra/overrides.yaml), "
                          f"got {value}")
    try:
        meta = read_meta(run_dir)
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"resume: the checkpoint description cannot be read ({exc}), got {value}") from None
    if meta is None:
        raise ConfigError(f"resume: {value} has no checkpoint yet (one is written every "
                          f"run.checkpoint_every_s seconds), got {value}")
    if not isinstance(meta, dict) or not isinstance(meta.get("world_size"), int):
        raise ConfigError(f"resume: the checkpoint description names no world size (a damaged "
                          f"checkpoint/meta.json), got {value}")
    own = ("resume=", "hydra.run.dir=", "run.overwrite=")  # where and how the first part started
    recorded = read_yaml(overrides_file, "the run's overrides are lost: start the run anew", kind=list)
    saved = [str(o) for o in recorded if not str(o).startswith(own) and str(o) not in extra]
    return [*saved, *extra, f"resume={run_dir}", f"hydra.run.dir={run_dir}"], int(meta["world_size"])
