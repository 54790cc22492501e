"""What an algorithm says about its settings before it runs (a part of
:class:`~drlmpi.algos.base.Algorithm`): its settings class and the typed settings of a config, its
name in messages, the variants that make a report's regime, the options it resolves for a job's
size, and the checks of its spaces and storage that the run plan makes before any rank starts."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import torch

from drlmpi.config.errors import ConfigError
from drlmpi.config.scopes import AlgoSettings
from drlmpi.config.settings import options_of, plain, read_only
from drlmpi.data.layout import ExperienceLayout
from drlmpi.device.memory import host_available_bytes
from drlmpi.envs.spec import EnvSpec


class Configured:
    """The class-level part of an algorithm: everything here reads a config, never an instance."""

    extra_columns: ClassVar[tuple[tuple[str, int], ...]]  # (:class:`~drlmpi.algos.base.Algorithm`'s)
    #: the algorithm's settings (:mod:`drlmpi.config.scopes`); ``None`` for an algorithm that
    #: declares none (a custom one): its config then stays a read-only mapping
    settings_class: ClassVar[type[AlgoSettings] | None] = None
    #: the config key that sizes the learner's device storage (see :meth:`storage_bytes`).
    storage_option: ClassVar[str] = "buffer_size"
    #: config keys whose non-default value makes a run a regime of its own in reports
    #: (``ppo[vtrace=false]``), never averaged with the default's runs (:meth:`report_variant_parts`)
    report_variants: ClassVar[tuple[str, ...]] = ()
    #: values of a report variant that are shown as its default is (not at all): ``encoder=cnn``
    #: is what ``auto`` gives on images, and what the Atari configs write out
    report_plain: ClassVar[dict[str, tuple[Any, ...]]] = {}

    @classmethod
    def experience_layout(cls, spec: EnvSpec) -> ExperienceLayout:
        """The columns of this algorithm's experience rows for ``spec`` (base + its extras)."""
        return ExperienceLayout(spec.obs_dim, spec.action_dim, cls.extra_columns,
                                spec.obs_shape, spec.obs_dtype)

    @classmethod
    def settings_of(cls, cfg: AlgoSettings | Mapping[str, Any]) -> Any:
        """``cfg`` as this algorithm's settings (a config node, a saved run's config or a plain
        mapping is built into them; an algorithm without a settings class keeps a read-only
        mapping)."""
        if cls.settings_class is not None:
            return cls.settings_class.coerce(cfg)
        return cfg if isinstance(cfg, MappingProxyType) else MappingProxyType(read_only(plain(cfg)))

    @classmethod
    def config_name(cls, cfg: AlgoSettings | Mapping[str, Any]) -> str:
        """The name messages use for this algorithm (its ``name``, else the class name)."""
        settings = cls.settings_of(cfg)
        if isinstance(settings, Mapping):
            return settings["name"] if "name" in settings else cls.__name__.lower()
        return settings.name

    @classmethod
    def report_variant_parts(cls, cfg: AlgoSettings | Mapping[str, Any]) -> list[str]:
        """``key=value`` for each of :attr:`report_variants` that ``cfg`` sets away from its
        default (booleans written as in overrides: ``vtrace=false``)."""
        if cls.settings_class is None:
            return []
        settings, options = cls.settings_of(cfg), options_of(cls.settings_class)
        parts = []
        for key in cls.report_variants:
            value = getattr(settings, key)
            if value != options[key].default and value not in cls.report_plain.get(key, ()):
                parts.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
        return parts

    @classmethod
    def job_options(cls, cfg: Mapping[str, Any], job_envs: int) -> dict[str, Any]:
        """Options of ``cfg`` this algorithm resolves for a job of ``job_envs`` environments
        (all simulators' ``env.num_envs``), as ``{option: value}``; the plan writes them into
        the job's config before anything reads it (PPO: per-environment rollouts)."""
        return {}

    # -- checks ---------------------------------------------------------------------------
    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        """Raise :class:`ConfigError` if this algorithm cannot handle ``spec``'s spaces."""

    @classmethod
    def storage_bytes(cls, spec: EnvSpec, cfg: Mapping[str, Any]) -> int:
        """Bytes of learner storage (replay or rollout rows) this config allocates on the
        learner's device; networks and optimizer state are not counted (megabytes)."""
        return 0

    @classmethod
    def check_storage(cls, spec: EnvSpec, cfg: Mapping[str, Any], device: str | torch.device,
                      free_bytes: int | None = None, headroom: float = 0.9) -> None:
        """Refuse at start-up, in one line, storage that cannot fit where the learner keeps it:
        more than ``headroom`` of the free memory (``free_bytes``, else what CUDA reports for a
        CUDA ``device``, or the host's available memory for the CPU). The message names the
        size, the per-row bytes and the option that sets it."""
        device = torch.device(device)
        need = cls.storage_bytes(spec, cfg)
        if free_bytes is None:
            free_bytes = (torch.cuda.mem_get_info(device)[0] if device.type == "cuda"
                          else host_available_bytes())
            if free_bytes is None:  # not knowable here: nothing to refuse
                return
        if need > headroom * free_bytes:
            option = cls.storage_option
            where = device if device.type == "cuda" else "the host"
            hint = "or use device=cpu" if device.type == "cuda" else "or use fewer learner ranks"
            rows = getattr(cls.settings_of(cfg), option)
            raise ConfigError(
                f"algo={cls.config_name(cfg)}: its storage needs {need / 2**30:.2f} GiB in {where} "
                f"(algo.{option}={rows} rows x {cls.experience_layout(spec).row_bytes} bytes, "
                f"observations {spec.describe_obs()}) but only {free_bytes / 2**30:.2f} GiB is free: "
                f"lower algo.{option} {hint}"
            )
