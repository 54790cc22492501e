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
