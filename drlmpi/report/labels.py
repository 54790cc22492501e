"""How a run is named in the report: its env, algorithm and topology labels.

A label tells runs apart that must not be averaged together or compared as one regime: the env
name plus a simulated step cost or worker-process stepping (:func:`env_label`), the algorithm
plus the learner's device and update path (:func:`algo_label`), and the topology's row label,
sort key and name in the DQN paper's layout (:class:`TopologyInfo`), which the topology class
named by the run's config declares (:func:`topology_class`), so the report knows no topology
by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drlmpi.device.determinism import PRECISION_LABELS

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


def dig(mapping: Any, *keys: str) -> Any:
    """``mapping[key][key]...`` of a run's config; ``None`` where a level is missing or not a dict."""
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


_CLASSES: dict[str, Any] = {}


def topology_class(config: dict[str, Any]) -> Any:
    """The class named by ``topology._target_`` in a run's config (``None`` if it cannot be
    imported); imported lazily, once per name."""
    return import_class(dig(config, "topology", "_target_"))


def import_class(target: Any) -> Any:
    """The class a config's ``_target_`` names (``None`` if it cannot be imported); imported
    lazily, once per name."""
    if not isinstance(target, str) or not target:
        return None
    if target not in _CLASSES:
        try:  # through the registry: a plugin topology imports from its directory
            from drlmpi.topologies.core.registry import import_target

            _CLASSES[target] = import_target(target)
        except Exception:  # noqa: BLE001 (a renamed or removed class: fall back to the name)
            _CLASSES[target] = None
    return _CLASSES[target]


def ask_class(cls: Any, attribute: str, *args: Any) -> Any:
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
        label = ask_class(cls, "report_label", topo_cfg)
    order = summary.get("topology_order")
    if not isinstance(order, int):
        order = ask_class(cls, "report_order")
    if "paper_label" in summary:
        paper = summary["paper_label"]
    else:
        paper = ask_class(cls, "paper_label", world_size) if world_size else None
    return TopologyInfo(label=label if isinstance(label, str) and label else name,
                        order=order if isinstance(order, int) else UNKNOWN_ORDER,
                        paper=paper if isinstance(paper, str) and paper else None)


def algo_label(name: Any, device: Any, updates: Any = None, capture: Any = None,
               variants: list[str] | None = None, precision: Any = None, per_graph: Any = None) -> str:
    """The algorithm name, plus ``[cuda]`` (the learner's device) when it learned off the CPU (a
    regime of its own, compared with sequential on that device), or ``[cuda,graph]`` when an
    ``algo.capture`` other than ``auto`` was chosen (update paths are never averaged together),
    ``[cuda,tf32]`` (or ``bf16``) when ``run.matmul_precision`` lowered the products' precision,
    ``[cuda,x8]`` when ``algo.updates_per_graph`` replayed several updates a graph (the same
    updates at another rate), and the algorithm's own ``variants`` (:func:`algo_variants`:
    ``ppo[vtrace=false]``). A run that did no update (``algo=random``) has no learner to label."""
    device = str(device or "cpu")
    parts = []
    if device not in ("cpu", "auto", "None") and updates != 0:
        parts = [device] + ([str(capture)] if capture not in (None, "auto") else [])
        parts += [PRECISION_LABELS[precision]] if precision in PRECISION_LABELS else []
        parts += [f"x{per_graph}"] if isinstance(per_graph, int) and per_graph > 1 else []
    parts += variants or []
    return f"{name}[{','.join(parts)}]" if parts else str(name)


def algo_variants(config: dict[str, Any]) -> list[str]:
    """The options of the run's algorithm that make it a regime of its own
    (:meth:`~drlmpi.algos.base.Algorithm.report_variant_parts`, asked of the class named by
    ``algo._target_``; none when it cannot be imported)."""
    algo = dig(config, "algo")
    parts = ask_class(import_class(dig(config, "algo", "_target_")), "report_variant_parts", algo or {})
    return parts if isinstance(parts, list) else []


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
