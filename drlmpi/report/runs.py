"""Find and read run directories: complete runs, missing/partial runs, failed launcher jobs.

A *run directory* is a folder holding ``summary.json``, ``.hydra/config.yaml`` or a launcher's
``job.log``. Folders
are searched at any depth (a Hydra multirun sweep nests them); the search does not descend into
a run directory. A run directory without a readable ``summary.json`` is a *missing* run; a
``jobs.json`` (written by the sweep launcher) anywhere in the tree adds its non-zero-return
jobs as *failed jobs*.
"""

from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from drlmpi.outputs.event_file import EventFileError, read_scalars
from drlmpi.report.jobs import JOB_LOG, Job, job_log_command, override_value, read_jobs
from drlmpi.sweep.jobs import JOBS_FILE

SUMMARY = "summary.json"
HYDRA_CONFIG = Path(".hydra") / "config.yaml"
TB_DIR = "tb"  # the run's TensorBoard event files (drlmpi.outputs.tensorboard_log.TensorBoardLog)
TRAIN_PREFIX = "train/"
LOG_TAIL_LINES = 6

UNKNOWN_ORDER = 1000  # sort key of a topology that declares none


@dataclass(frozen=True)
class TopologyInfo:
    """How a run's topology is shown: its row label, sort key and name in the DQN paper's layout.

    Read from the run's ``summary.json`` (``topology_label``, ``topology_order``,
    ``paper_label``), else asked of the topology class named by the config's
    ``topology._target_`` (``report_label(cfg)``, ``report_order``, ``paper_label(world_size)``),
    else the plain topology name (sorted last, no paper name).
    """

    label: str
    order: int = UNKNOWN_ORDER
    paper: str | None = None


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
    #: the env label before :func:`label_swept_num_envs` adds ``envs=k`` (the scaling grids' key)
    base_env: str = ""
    #: (n, 3): train_seconds, env_steps, return of each training episode (Atari: raw games)
    episodes: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.env, self.algo, self.topology, self.world_size)

    def get(self, name: str, default: Any = None) -> Any:
        value = self.summary.get(name, default)
        return default if value is None else value


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


@dataclass
class RunSet:
    runs: list[Run] = field(default_factory=list)
    missing: list[MissingRun] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failed_jobs(self) -> list[Job]:
        return [j for j in self.jobs if j.failed]

    @property
    def skipped_jobs(self) -> list[Job]:
        return [j for j in self.jobs if j.skipped]

    def empty(self) -> bool:
        return not (self.runs or self.missing or self.jobs)


def read_yaml(path: Path) -> Any:
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return None


def _dig(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


_CLASSES: dict[str, Any] = {}


def topology_class(config: dict[str, Any]) -> Any:
    """The class named by ``topology._target_`` in a run's config (``None`` if it cannot be
    imported); imported lazily, once per name."""
    target = _dig(config, "topology", "_target_")
    if not isinstance(target, str) or not target:
        return None
    if target not in _CLASSES:
        try:
            from hydra.utils import get_class

            _CLASSES[target] = get_class(target)
        except Exception:  # noqa: BLE001 (a renamed or removed class: fall back to the name)
            _CLASSES[target] = None
    return _CLASSES[target]


def _ask(cls: Any, attribute: str, *args: Any) -> Any:
    """``cls.attribute(*args)`` (the attribute itself when it is not callable); ``None`` when
    there is no class or on any error."""
    if cls is None:
        return None
    try:
        value = getattr(cls, attribute)
        return value(*args) if callable(value) else value
    except Exception:  # noqa: BLE001
        return None


def topology_info(name: str, summary: dict[str, Any] | None, config: dict[str, Any],
                  world_size: int | None) -> TopologyInfo:
    """A run's :class:`TopologyInfo`: summary fields first, the topology class second, the
    plain ``name`` last."""
    summary = summary or {}
    cls = None
    if not {"topology_label", "topology_order", "paper_label"} <= summary.keys():
        cls = topology_class(config)
    topo_cfg = config.get("topology") if isinstance(config.get("topology"), dict) else {}
    label = summary.get("topology_label")
    if not isinstance(label, str) or not label:
        label = _ask(cls, "report_label", topo_cfg)
    order = summary.get("topology_order")
    if not isinstance(order, int):
        order = _ask(cls, "report_order")
    if "paper_label" in summary:
        paper = summary["paper_label"]
    else:
        paper = _ask(cls, "paper_label", world_size) if world_size else None
    return TopologyInfo(label=label if isinstance(label, str) and label else name,
                        order=order if isinstance(order, int) else UNKNOWN_ORDER,
                        paper=paper if isinstance(paper, str) and paper else None)


def _int_or_none(value: Any) -> int | None:  # None for null or an unresolved interpolation
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def algo_label(name: Any, device: Any, updates: Any = None, capture: Any = None) -> str:
    """The algorithm name, plus ``[cuda]`` (the learner's device) when it learned off the CPU (a
    regime of its own, compared with sequential on that device), or ``[cuda,graph]`` when an
    ``algo.capture`` other than ``auto`` was chosen (update paths are never averaged together).
    A run that did no update (``algo=random``) has no learner to label."""
    device = str(device or "cpu")
    if device in ("cpu", "auto", "None") or updates == 0:
        return str(name)
    if capture not in (None, "auto"):
        return f"{name}[{device},{capture}]"
    return f"{name}[{device}]"


def env_label(name: str, sim_cost_ms: Any, env_cfg: dict[str, Any] | None) -> str:
    """The env name, plus ``[sim=Xms]`` when a simulated step cost makes it another regime and
    ``vector=async`` when simulators step their environments in worker processes."""
    parts = []
    try:
        cost = float(sim_cost_ms or 0)
    except (TypeError, ValueError):
        cost = 0.0
    if cost > 0:
        parts.append(f"sim={cost:g}ms")
    by_rank = (env_cfg or {}).get("sim_cost_ms_by_rank")
    if by_rank:
        parts.append("sim_by_rank=" + ",".join(f"{k}:{v}" for k, v in sorted(by_rank.items(), key=str)))
    if (env_cfg or {}).get("vector", "sync") != "sync":
        parts.append(f"vector={env_cfg['vector']}")
    return f"{name}[{' '.join(parts)}]" if parts else str(name)


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
    fixed = _ask(topology_class(config), "fixed_world_size")
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
        info = topology_info(str(summary.get("topology", _dig(config, "topology", "name"))), summary,
                             config, world_size)
        env = env_label(summary.get("env", _dig(config, "env", "name")),
                        summary.get("sim_cost_ms", _dig(config, "env", "sim_cost_ms")), config.get("env"))
        returns = read_returns(run_dir / "metrics.csv")
        return Run(
            path=run_dir, summary=summary, config=config, env=env, base_env=env,
            algo=algo_label(summary.get("algo", _dig(config, "algo", "name")),
                            summary.get("device", config.get("device")), summary.get("updates"),
                            _dig(config, "algo", "capture")),
            topology=info.label, world_size=world_size,
            seed=summary.get("seed", config.get("seed")),
            evals=returns["eval"], order=info.order, paper=info.paper, episodes=returns["episode"],
            training=training, training_error=training_error,
        )
    overrides = read_yaml(run_dir / ".hydra" / "overrides.yaml")
    launched, cmd_overrides = job_log_command(run_dir)
    overrides = [str(o) for o in overrides] if isinstance(overrides, list) else cmd_overrides

    def what(group: str, key: str = "name") -> Any:  # from the config, else the overrides
        value = _dig(config, group, key) if key else config.get(group)
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
        env=env_label(what("env") or "?", _dig(config, "env", "sim_cost_ms"), config.get("env")),
        algo=algo_label(what("algo") or "?", config.get("device"), capture=_dig(config, "algo", "capture")),
        topology=topology,
        world_size=world_size,
        seed="?" if what("seed", "") is None else what("seed", ""),
        overrides=overrides, reason=reason, log_tail=log_tail(run_dir / "rank0.log"), last_eval=last,
        job_log_tail=log_tail(run_dir / JOB_LOG),
    )


def is_run_dir(path: Path) -> bool:
    return (path / SUMMARY).is_file() or (path / HYDRA_CONFIG).is_file() or (path / JOB_LOG).is_file()


def label_swept_num_envs(runs: list[Run]) -> None:
    """Where runs of one env+algo differ in ``num_envs`` (the PPO-Tetris ranks x envs grid),
    make it part of the env label (``cartpole[envs=4]``) so each setting is its own group."""
    by_pair: dict[tuple[str, str], set[Any]] = {}
    for run in runs:
        by_pair.setdefault((run.env, run.algo), set()).add(run.get("num_envs"))
    for run in runs:
        if len(by_pair[(run.env, run.algo)]) > 1:
            envs = f"envs={run.get('num_envs')}"
            run.env = f"{run.env[:-1]} {envs}]" if run.env.endswith("]") else f"{run.env}[{envs}]"


def discover(paths: list[Path]) -> RunSet:
    """Every run directory and ``jobs.json`` under ``paths`` (each directory read once)."""
    found = RunSet()
    seen: set[Path] = set()
    for root in paths:
        root = Path(root)
        if not root.is_dir():
            found.warnings.append(f"{root}: not a directory, skipped")
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            real = here.resolve()
            if real in seen:
                dirnames[:] = []
                continue
            seen.add(real)
            if JOBS_FILE in filenames:
                jobs, warning = read_jobs(here / JOBS_FILE)
                found.jobs.extend(jobs)
                if warning:
                    found.warnings.append(warning)
            if is_run_dir(here):
                dirnames[:] = []
                item = load_run(here)
                (found.runs if isinstance(item, Run) else found.missing).append(item)
                if isinstance(item, Run) and item.training_error:
                    found.warnings.append(item.training_error)
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    found.runs.sort(key=lambda r: str(r.path))
    found.missing.sort(key=lambda r: str(r.path))
    label_swept_num_envs(found.runs)
    by_dir = {job.resolved_dir(): job for job in found.jobs}
    for m in found.missing:
        job = by_dir.get(m.path.resolve())
        if job is not None:
            m.launcher = job.describe() + (f": {job.reason}" if job.reason else "")
            m.world_size = job.ranks if job.ranks is not None else m.world_size
    return found
