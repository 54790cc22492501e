"""The plan's grid before any prediction: one composed config per topology (the user's overrides
plus ``topology=NAME``), why each (topology, ranks) cell would be refused, and the predicted
cells (:mod:`drlmpi.planner.model`). Read by the command line (:mod:`drlmpi.planner.cli`), the
calibration and its jobs."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from drlmpi.planner.model import Prediction


def compose(overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from drlmpi.config.plugins import CONF_DIR
    from drlmpi.envs.families import register as register_families
    from drlmpi.topologies.core.registry import register

    register()  # every topology's options (the topology files start from them)
    register_families()  # every environment family's (so do the env files)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def base_overrides(overrides: list[str]) -> list[str]:
    """The user's overrides without the topology and world size (each cell sets its own)."""
    return [o for o in overrides if not o.startswith(("topology=", "world_size="))]


def cell_overrides(overrides: list[str], topology: str) -> list[str]:
    """The overrides of ``topology``'s cells: the user's, ``topology=NAME`` and ``world_size=null``
    (each cell, and each of the planner's jobs, has its own size, whatever size a preset names:
    ``+experiment=ppo_breakout_16`` says 16)."""
    return [*base_overrides(overrides), f"topology={topology}", "world_size=null"]


def configs(overrides: list[str], topologies: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """One composed config per topology (:func:`cell_overrides`), and why a topology could not
    be composed."""
    from omegaconf.errors import OmegaConfBaseException

    cfgs, refused = {}, {}
    for name in topologies:
        try:
            cfgs[name] = compose(cell_overrides(overrides, name))
        except (OmegaConfBaseException, ValueError, KeyError) as exc:
            refused[name] = str(exc).splitlines()[0]
    return cfgs, refused


def topology_class(cfg: DictConfig) -> type:
    from drlmpi.run.preflight import resolve_classes

    return resolve_classes(cfg)[1]


def accepted(cfg: DictConfig, ranks: int) -> str | None:
    """Why a job of ``cfg`` on ``ranks`` ranks would be refused (``None``: it would start)."""
    from drlmpi.config.errors import ConfigError
    from drlmpi.run.preflight import make_plan

    try:
        make_plan(cfg, ranks)
    except ConfigError as exc:
        return str(exc)
    return None


def cell_refusals(cfgs: dict[str, Any], refused: dict[str, str],
                  ranks: list[int]) -> dict[tuple[str, int], str | None]:
    """Why each (topology, size) cell would be refused (``None``: it would start), each checked
    once: the calibration and the cells both read this."""
    return {(name, n): refused.get(name) or accepted(cfgs[name], n)
            for name in [*cfgs, *refused] for n in ranks}


def plan_cells(cfgs: dict[str, Any], why: dict[tuple[str, int], str | None], probe: Any,
               calibrations: dict[str, dict] | None = None) -> list[Prediction]:
    """Every cell of ``why`` (:func:`cell_refusals`): refused with its reason, or predicted."""
    from drlmpi.planner.model import one_rank, predict

    calibrations = calibrations or {}
    single = one_rank(calibrations)  # every one-rank cell's (one process stepping and learning)
    return [Prediction(name, n, refused=reason) if reason is not None
            else predict(topology_class(cfgs[name]), n, probe, cfgs[name],
                         single if n == 1 and single else calibrations.get(name))
            for (name, n), reason in why.items()]


def games_cells(overrides: list[str], topologies: list[str], ranks: list[int], games: list[int],
                p: Any, calibrations: dict[str, dict]) -> list[Prediction]:
    """``--games``: every topology and size at each setting of ``env.num_envs``, from the one probe
    (each environment's step as measured, acting at each setting's batch:
    :meth:`~drlmpi.topologies.core.pace.Probe.with_games`) and calibration."""
    cells = []
    for n in games:
        cfgs, refused = configs(with_games(overrides, n), topologies)
        cells += cells_with_games(cfgs, cell_refusals(cfgs, refused, ranks), p, calibrations, n)
    return cells


def with_games(overrides: list[str], games: int | None) -> list[str]:
    """``overrides`` at one setting of ``env.num_envs`` (``None``: the config's own)."""
    return [*overrides, f"env.num_envs={games}"] if games is not None else list(overrides)


def cells_with_games(cfgs: dict[str, Any], why: dict[tuple[str, int], str | None], p: Any,
                     calibrations: dict[str, dict], games: int | None) -> list[Prediction]:
    """:func:`plan_cells` at one setting of ``env.num_envs`` (``None``: the config's own), each
    cell labelled with it."""
    cells = plan_cells(cfgs, why, p if games is None else p.with_games(games), calibrations)
    for cell in cells:
        cell.games = games
    return cells


def predict_again(saved: dict[str, Any], extra: list[str] | None = None) -> list[Prediction]:
    """A plan.json's cells predicted again by this version's model, from the plan's own probe
    and calibration (``--plan FILE --again``: a change of the model scored on checks measured
    before it, on any machine): each cell the plan refused stays refused with its reason (the
    refusals were the planning host's: a CUDA cell is refused on a machine without one), the
    others are predicted for the plan's overrides followed by ``extra`` (another budget, say);
    :class:`~drlmpi.config.errors.ConfigError` where they do not compose."""
    from drlmpi.config.errors import ConfigError
    from drlmpi.run.arguments import check_command_line
    from drlmpi.topologies.core.pace import Probe

    p = Probe.from_json(saved["probe"])
    check_command_line(list(extra or []))  # the plan's own were checked when it was made
    overrides = [*saved["overrides"], *(extra or [])]
    cells: list[Prediction] = []
    for games in dict.fromkeys(cell.get("games") for cell in saved["cells"]):
        why = {(str(c["topology"]), int(c["ranks"])): c.get("refused")
               for c in saved["cells"] if c.get("games") == games}
        cfgs, refused = configs(with_games(overrides, games), list(dict.fromkeys(name for name, _ in why)))
        if refused:
            raise ConfigError(f"the plan's overrides{' with ' + ' '.join(extra) if extra else ''} "
                              f"do not compose: {next(iter(refused.values()))}")
        cells += cells_with_games(cfgs, why, p, saved.get("calibration") or {}, games)
    return cells
