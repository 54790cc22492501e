"""The package's layers (docs/architecture.md, "Layers"): a module imports only from its own
package and the layers below it - imports inside functions included - and the package holds no
module over 350 lines and at most five modules directly in ``drlmpi/``; ``drlmpi/topologies/``
holds the topologies and ``core/``; every module path the docs name exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "drlmpi"

#: bottom to top; a package may import from the layers below its own, never from above
LAYERS = [
    {"config"},
    {"job_control"},
    {"mpi", "device"},
    {"data", "envs"},
    {"algos"},
    {"outputs"},
    {"roles"},
    {"topologies"},
    {"run"},
    {"sweep"},
    {"report", "bench"},
    {"planner"},
    {"__main__", "play", "plan"},
]
LAYER = {name: level for level, names in enumerate(LAYERS) for name in names}
MAX_LINES = 350


def _part(module: str) -> str:
    """``drlmpi.<part>...`` -> ``<part>`` (the subpackage, or the top-level module)."""
    return module.split(".")[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in out if name.startswith("drlmpi.")]


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


def test_every_part_of_the_package_has_a_layer():
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in _modules()}
    assert parts == set(LAYER)


def test_imports_point_down_the_layers():
    upward = []
    for path in _modules():
        here = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for line, module in _imports(path):
            there = _part(module)
            if there != here and LAYER[there] >= LAYER[here]:
                where = path.relative_to(PACKAGE.parent)
                upward.append(f"{where}:{line} ({here}) imports {module} ({there})")
    assert not upward, "\n".join(upward)


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _runtime_imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports when it runs (in functions too; not what it imports
    for type checking only): ``from a.b import c`` counts ``a.b.c`` when that is a module."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(block)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & known
            out |= subs if subs else {node.module}
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
    return out & known


def test_no_import_circles():
    """No module imports, through others, one that imports it back (a package's __init__ importing
    its own modules aside): a circle makes what a module needs depend on which side was imported
    first, and was dodged with imports inside functions."""
    modules = {_module_name(p): p for p in _modules()}
    graph = {name: _runtime_imports(path, set(modules)) - {name} for name, path in modules.items()}
    circles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start and not start.startswith(nxt + ".") and not nxt.startswith(start + "."):
                    circles.append(" -> ".join([*trail, nxt]))
                elif nxt not in seen and not start.startswith(nxt):
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert not circles, "\n".join(sorted(set(circles)))


def test_no_module_over_350_lines_and_few_at_the_top():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 5, top


def test_topologies_drive_roles_through_their_methods():
    """A topology never reads a learner's algorithm (``learner.algo``) nor adds to another
    object's counters (``actor.sim_s += ...``): what it needs is a role's method. Only the role
    factory (topologies/core/context.py) hands a learner's algorithm to an actor on the same rank."""
    found = []
    for path in sorted((PACKAGE / "topologies").rglob("*.py")):
        if path.name == "context.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr == "algo" and "learner" in ast.unparse(
                    node.value):
                found.append(f"{where} reads {ast.unparse(node)}")
            if (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute)
                    and ast.unparse(node.target.value) != "self"):
                found.append(f"{where} adds to {ast.unparse(node.target)}")
    assert not found, "\n".join(found)


def test_the_top_of_topologies_holds_the_topologies_and_core():
    """``drlmpi/topologies/`` holds one module or package per built-in topology - the home of the
    class its ``conf/topology/<name>.yaml`` names, one topology each - and ``core/``, what several
    share, which imports no topology. A broken copy fails it: pace.py moved back beside the
    topologies, or core/rounds.py importing star."""
    here = PACKAGE / "topologies"
    top = {p.stem for p in here.glob("*.py") if p.name != "__init__.py"}
    top |= {p.name for p in here.iterdir() if (p / "__init__.py").is_file()}
    homes = {}
    for path in sorted((PACKAGE.parent / "conf" / "topology").glob("*.yaml")):
        (target,) = re.findall(r"^_target_:\s*(\S+)", path.read_text(), re.M)
        parts = target.split(".")
        assert parts[:2] == ["drlmpi", "topologies"] and len(parts) == 4, (path.name, target)
        homes[path.stem] = parts[2]
    assert len(set(homes.values())) == len(homes), homes
    assert top == set(homes.values()) | {"core"}, sorted(top ^ (set(homes.values()) | {"core"}))
    upward = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
              for path in sorted((here / "core").rglob("*.py")) for line, module in _imports(path)
              if module.startswith("drlmpi.topologies.") and module.split(".")[2] != "core"]
    assert not upward, "\n".join(upward)


def test_groups_drives_its_wirings_through_their_interface():
    """topology=groups composes another topology's wiring of a group (star's, async's) through
    ``GroupWiring`` (topologies/core/wiring.py) alone: it compares nothing with a topology's name
    and reads no class's options by key (its settings inherit them). A broken copy fails it:
    ``report = Star(self.cfg).simulate(sub) if wiring == "star" else ...``, or ``**{key:
    Allgather.options[key] ...}`` / ``options_of(AllgatherSettings)[key]`` among its options."""
    others = {p.stem for p in (PACKAGE.parent / "conf" / "topology").glob("*.yaml")} - {"groups"}
    found = []
    for node in ast.walk(ast.parse((PACKAGE / "topologies" / "groups.py").read_text())):
        line = f"topologies/groups.py:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and node.value in others:
            found.append(f"{line} names {node.value!r}")
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "options" and ast.unparse(node.value.value) != "cls"):
            found.append(f"{line} reads {ast.unparse(node)}")
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "options_of"):
            found.append(f"{line} reads {ast.unparse(node)}")
    assert not found, "\n".join(found)


#: what resolves a job from its raw config: only the run plan (drlmpi/run/preflight.py) calls these
RESOLVERS = {"probe_spec", "read_meta", "get_class", "check_config", "resolve_device"}


def test_only_the_run_plan_resolves_the_config():
    """The roles and topologies get the environment's spaces, the classes, the device and the
    checkpoint to resume from the :class:`~drlmpi.topologies.core.context.RunPlan`; none of them probes
    an environment, reads a checkpoint's meta, imports a ``_target_`` or checks the config again."""
    found = []
    for path in _modules():
        if path.relative_to(PACKAGE).parts[0] not in ("roles", "topologies"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in RESOLVERS:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} calls {name}")
    assert not found, "\n".join(found)


#: ``.get(<literal key>, <default>)`` reads outside config/ and report/ that are not reads of an
#: option: file, key -> what it reads. Every option's default lives in the schema, and a composed
#: config carries every option of its scopes, so code reads ``cfg.key`` / ``cfg["key"]``.
SECOND_DEFAULTS = {
    ("planner/model.py", "ranks"): "a calibration record",
    ("planner/compare.py", "world_size"): "a summary.json",
    ("planner/compare.py", "overrides"): "a saved plan",
    ("planner/probe.py", "batch_size"): "a batch rule's per-rank algorithm options",
    ("envs/vector.py", "final_info"): "a Gymnasium info dict",
    ("envs/atari.py", "full_action_space"): "an ALE registration's kwargs",
    ("envs/atari.py", "max_num_frames_per_episode"): "an ALE registration's kwargs",
    ("algos/base.py", "name"): "a hand-made algorithm config may have no name",
    ("run/objective.py", "_target_"): "Hydra's sweeper config",
    ("run/summary.py", "resolved_options"): "a topology's report",
    ("topologies/central/__init__.py", "train_seconds"): "a finished run's summary (its report section)",
    ("topologies/central/__init__.py", "per_rank"): "a finished run's summary (its report section)",
}
SECOND_DEFAULT = re.compile(r"(?<!environ)\.get\(\"(\w+)\", ")  # (environment variables aside)


def test_options_are_read_without_a_second_default():
    """Fails when code outside config/ and report/ reads an option with its own fallback
    (``topo_cfg.get("sync_every", 1)``: three such fallbacks once disagreed with the schema and
    with each other) instead of the value the composed config carries."""
    found = []
    for path in _modules():
        relative = str(path.relative_to(PACKAGE))
        if relative.split("/")[0] in ("config", "report"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"drlmpi/{relative}:{number} .get({key!r}, ...)" for key in SECOND_DEFAULT.findall(line)
                      if (relative, key) not in SECOND_DEFAULTS]
    assert not found, "\n".join(found)


#: where a file of the package is named by its path: the documentation, the config groups'
#: headers, and the package's and the tests' own docstrings and comments
NAMING = ("README.md", "docs/**/*.md", "conf/**/*.yaml", "drlmpi/**/*.py", "tests/*.py")
PACKAGE_PATH = re.compile(r"(?<![\w./-])drlmpi/[\w/]*\w\.py\b")


def _named_package_paths() -> list[tuple[str, int, str]]:
    root = PACKAGE.parent
    named = []
    for pattern in NAMING:
        for path in sorted(root.glob(pattern)):
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                named += [(str(path.relative_to(root)), number, m.group())
                          for m in PACKAGE_PATH.finditer(line)]
    return named


def test_every_package_path_the_docs_name_exists():
    """Every ``drlmpi/<...>.py`` named in README.md, docs/, conf/ and the sources exists (a
    module moved leaves no stale path behind). A broken copy fails it: docs/architecture.md
    naming ``algos/vtrace.py`` under ``drlmpi/`` again, or outputs/event_file.py moved away
    while docs/architecture.md names it."""
    named = _named_package_paths()
    assert len(named) > 50 and any(where.startswith("docs/") for where, _, _ in named)
    missing = [f"{where}:{line}: {path}" for where, line, path in named
               if not (PACKAGE.parent / path).is_file()]
    assert not missing, "\n".join(missing)
