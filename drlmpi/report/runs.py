"""Read one run directory: a complete run (:class:`Run`), or a missing or partial one (:class:`MissingRun`).

A *run directory* is a folder holding ``summary.json``, ``.hydra/config.yaml`` or a launcher's
``job.log`` (:func:`is_run_dir`). One with a readable ``summary.json`` is a complete run: its
summary, config, eval and training-episode returns (``metrics.csv``) and training curves
(``tb/``). One without is a *missing* run: what its config, overrides or ``job.log`` tell of
what it was to be, why it has no summary, and the tails of its logs. Finding run directories
under a path is :mod:`drlmpi.report.discovery`; naming a run's env, algorithm and topology is
:mod:`drlmpi.report.labels`.
"""

from __future__ import annotations

import csv
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from drlmpi.config.job import JobSettings
from drlmpi.outputs.event_file import EventFileError, read_scalars
from drlmpi.report.jobs import JOB_LOG, job_log_command, override_value
from drlmpi.report.labels import (
    UNKNOWN_ORDER,
    algo_label,
    algo_variants,
    ask_class,
    dig,
    env_label,
    topology_class,
    topology_info,
)

SUMMARY = "summary.json"
HYDRA_CONFIG = Path(".hydra") / "config.yaml"
TB_DIR = "tb"  # the run's TensorBoard event files (drlmpi.outputs.tensorboard_log.TensorBoardLog)
TRAIN_PREFIX = "train/"
LOG_TAIL_LINES = 6


@dataclass
class Run:
    """One complete run (a readable ``summary.json``)."""

    path: Path
    summary: dict[str, Any]
    config: dict[str, Any]
    env: str            # env name, plus [sim=...] when a simulated cost was set
    algo: str
    topology: str       # topology label, e.g. allgather[allgather]
    world_size: int
    seed: Any
    evals: np.ndarray   # (n, 3): train_seconds, env_steps, return of each eval row
    order: int = UNKNOWN_ORDER   # the topology's sort key
    paper: str | None = None     # its column name in the DQN paper's layout, if it has one
    #: ``train/<metric>`` curves of ``tb/``, by metric: (n, 2) env_steps, value
    training: dict[str, np.ndarray] = field(default_factory=dict)
    training_error: str = ""     # why ``tb/`` could not be read (empty: read, or absent)
    #: the env label before :func:`~drlmpi.report.discovery.label_swept_num_envs` adds ``envs=k``
    #: (the scaling grids' key)
    base_env: str = ""
    #: (n, 3): train_seconds, env_steps, return of each training episode (Atari: raw games)
    episodes: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.env, self.algo, self.topology, self.world_size)

    def get(self, name: str, default: Any = None) -> Any:
        value = self.summary.get(name, default)
        return default if value is None else value

    @functools.cached_property
    def settings(self) -> JobSettings | None:
        """The run's saved config as the job's typed settings (:func:`saved_settings`)."""
        return saved_settings(self.config)


@dataclass
class MissingRun:
    """A run directory without a (readable) ``summary.json``."""

    path: Path
    env: str
    algo: str
    topology: str
    world_size: int | None
    seed: Any
    overrides: list[str]
    reason: str
    log_tail: str
    last_eval: str = ""
    job_log_tail: str = ""
    launcher: str = ""    # the jobs.json record of this directory, e.g. "failed, return code 1"


def read_yaml(path: Path) -> Any:
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return None


def _int_or_none(value: Any) -> int | None:  # None for null or an unresolved interpolation
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def read_returns(path: Path) -> dict[str, np.ndarray]:
    """The ``eval`` and ``episode`` (training episodes) rows of ``metrics.csv``, each as
    (train_seconds, env_steps, return), in one pass; empty arrays if unreadable."""
    rows: dict[str, list] = {"eval": [], "episode": []}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                kept = rows.get(row.get("kind"))
                if kept is None:
                    continue
                try:
                    kept.append((float(row["train_seconds"]), float(row["env_steps"]), float(row["return"])))
                except (KeyError, TypeError, ValueError):
                    continue  # a truncated last line of a killed run
    except OSError:
        pass
    return {kind: np.array(found, dtype=float).reshape(-1, 3) for kind, found in rows.items()}


def read_training(run_dir: Path) -> tuple[dict[str, np.ndarray], str]:
    """The ``train/<metric>`` curves of a run's ``tb/`` event files as
    ``{metric: (n, 2) array of env_steps, value}``, and an error text (empty when read, or when
    the run has no event files: a run with ``run.tensorboard=false``, or an older one)."""
    tb = run_dir / TB_DIR
    if not tb.is_dir():
        return {}, ""
    try:
        scalars = read_scalars(tb)
    except (OSError, EventFileError) as exc:
        return {}, f"{tb}: event files unreadable, training curves left out ({exc})"
    return {tag[len(TRAIN_PREFIX):]: np.array([(step, value) for step, _, value in points], dtype=float)
            for tag, points in scalars.items() if tag.startswith(TRAIN_PREFIX)}, ""


def saved_settings(config: Mapping[str, Any]) -> JobSettings | None:
    """A run directory's saved config (``.hydra/config.yaml``) as the job's typed settings, the
    same types a run reads: an option the run's version did not have takes its default, so runs
    written before it load; ``None`` for a config these types cannot read (no ``env.id``, a value
    of another type)."""
    from drlmpi.envs.families import family_of
    from drlmpi.envs.families import register as register_families
    from drlmpi.topologies.core.registry import register

    register()
    register_families()
    try:
        node = OmegaConf.create(dict(config))  # its interpolations (world_size_by_topology...) resolved
        return JobSettings.build(node, env=family_of(node.env.id).section())
    except (KeyError, TypeError, ValueError, LookupError, OmegaConfBaseException):
        return None


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _world_size_of_missing(run_dir: Path, config: dict[str, Any], launched: int | None) -> int | None:
    if _int_or_none(config.get("world_size")) is not None:
        return _int_or_none(config.get("world_size"))
    if launched is not None:
        return launched
    fixed = ask_class(topology_class(config), "fixed_world_size")
    if isinstance(fixed, int):
        return fixed
    # Otherwise the highest rank log: a lower bound (only ranks that started wrote one).
    logs = (re.fullmatch(r"rank(\d+)\.log", p.name) for p in run_dir.glob("rank*.log"))
    ranks = [int(m.group(1)) for m in logs if m]
    return max(ranks) + 1 if ranks else None


def load_run(run_dir: Path) -> Run | MissingRun:
    """Read one run directory."""
    config = read_yaml(run_dir / HYDRA_CONFIG)
    config = config if isinstance(config, dict) else {}
    reason = ""
    summary = None
    if (run_dir / SUMMARY).is_file():
        try:
            summary = json.loads((run_dir / SUMMARY).read_text())
            if not isinstance(summary, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            summary, reason = None, f"summary.json unreadable ({exc})"
    else:
        reason = "no summary.json"
    if summary is not None:
        world_size = int(summary.get("world_size") or 1)
        training, training_error = read_training(run_dir)
        info = topology_info(str(summary.get("topology", dig(config, "topology", "name"))), summary,
                             config, world_size)
        env = env_label(summary.get("env", dig(config, "env", "name")),
                        summary.get("sim_cost_ms", dig(config, "env", "sim_cost_ms")), config.get("env"))
        returns = read_returns(run_dir / "metrics.csv")
        return Run(
            path=run_dir, summary=summary, config=config, env=env, base_env=env,
            algo=_algo_label(summary.get("algo", dig(config, "algo", "name")),
                             summary.get("device", config.get("device")), config, summary.get("updates")),
            topology=info.label, world_size=world_size,
            seed=summary.get("seed", config.get("seed")),
            evals=returns["eval"], order=info.order, paper=info.paper, episodes=returns["episode"],
            training=training, training_error=training_error,
        )
    overrides = read_yaml(run_dir / ".hydra" / "overrides.yaml")
    launched, cmd_overrides = job_log_command(run_dir)
    overrides = [str(o) for o in overrides] if isinstance(overrides, list) else cmd_overrides

    def what(group: str, key: str = "name") -> Any:  # from the config, else the overrides
        value = dig(config, group, key) if key else config.get(group)
        return value if value is not None else override_value(overrides, group)

    world_size = _world_size_of_missing(run_dir, config, launched)
    topology = topology_info(str(what("topology") or "?"), None, config, world_size).label
    evals = read_returns(run_dir / "metrics.csv")["eval"]
    last = ""
    if len(evals):
        t, steps, ret = evals[-1]
        last = f"last eval: return {ret:g} at {steps:.0f} env steps, {t:.1f} s"
    return MissingRun(
        path=run_dir,
        env=env_label(what("env") or "?", dig(config, "env", "sim_cost_ms"), config.get("env")),
        algo=_algo_label(what("algo") or "?", config.get("device"), config),
        topology=topology,
        world_size=world_size,
        seed="?" if what("seed", "") is None else what("seed", ""),
        overrides=overrides, reason=reason, log_tail=log_tail(run_dir / "rank0.log"), last_eval=last,
        job_log_tail=log_tail(run_dir / JOB_LOG),
    )


def _algo_label(name: Any, device: Any, config: dict[str, Any], updates: Any = None) -> str:
    """:func:`algo_label` with the regimes the run's composed ``config`` chose (capture mode,
    variants, matmul precision, updates a graph replay)."""
    return algo_label(name, device, updates, capture=dig(config, "algo", "capture"),
                      variants=algo_variants(config), precision=dig(config, "run", "matmul_precision"),
                      per_graph=dig(config, "algo", "updates_per_graph"))


def is_run_dir(path: Path) -> bool:
    return (path / SUMMARY).is_file() or (path / HYDRA_CONFIG).is_file() or (path / JOB_LOG).is_file()
