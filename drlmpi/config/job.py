"""The whole job's settings, typed: :class:`JobSettings` is what a checked, composed config becomes
once (:func:`drlmpi.run.preflight.make_plan`), and what every part of a run reads."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from drlmpi.config.schema import SETTINGS
from drlmpi.config.scopes import EnvSettings, RootSettings, RunSettings
from drlmpi.config.settings import Settings, read_only


def section(group: str, node: Mapping[str, Any]) -> Settings | Mapping[str, Any]:
    """``algo`` or ``topology`` as its settings class (by the composed ``name``), or - for an
    algorithm or topology that declares none - its values as a read-only mapping."""
    cls = SETTINGS.get(f"{group}/{node['name']}")
    if cls is not None:
        return cls.build(node)
    plain = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    return types.MappingProxyType(read_only(plain))


@dataclasses.dataclass(frozen=True)
class JobSettings(RootSettings):
    """The top level's options (:class:`RootSettings`) and each section's settings."""

    run: RunSettings = dataclasses.field(default_factory=RunSettings)
    env: EnvSettings | None = None
    algo: Any = None
    topology: Any = None

    @classmethod
    def build(cls, node: Mapping[str, Any], env: type[EnvSettings] = EnvSettings) -> JobSettings:
        """The typed settings of a checked, composed job config; ``env``: the settings class of
        its ``env`` section (its id's family's: ``Family.section()``, every env option and the
        family's own)."""
        root = RootSettings.build(node)
        return cls(**{f.name: getattr(root, f.name) for f in dataclasses.fields(RootSettings)},
                   run=RunSettings.build(node["run"]), env=env.build(node["env"]),
                   algo=section("algo", node["algo"]), topology=section("topology", node["topology"]))
