"""Who simulates, who learns and what moves: one module or small package per topology, beside
:mod:`drlmpi.topologies.core` (what several topologies share: the :class:`Topology` base, the run
context, the pace vocabulary, the registry, rank reports, the synchronous rounds and their links,
the data-parallel pieces and the interface a group's wiring offers ``topology=groups``).

Modules that moved keep their old names (:data:`MOVED`): ``import drlmpi.topologies.base`` still
gives :mod:`drlmpi.topologies.core.base` itself (the same module object, so the same classes), with
a :class:`DeprecationWarning` naming the new place, so a plugin written against the old layout
keeps working. The topologies' own classes never moved (``_target_: drlmpi.topologies.star.Star``
in any run directory's saved config still names the class).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

#: old module name (under ``drlmpi.topologies``) -> where it is now; a package's modules follow it
MOVED = {
    "base": "core.base",
    "context": "core.context",
    "pace": "core.pace",
    "registry": "core.registry",
    "reports": "core.reports",
    "rounds": "core.rounds",
    "data_parallel": "core.data_parallel",
    "async_learner": "asynchronous.learner",
    "async_simulator": "asynchronous.simulator",
    "central_wire": "central.wire",
}


def moved_to(name: str) -> str | None:
    """The module's name now, for an old ``drlmpi.topologies.<old>[.<sub>]`` name; else ``None``."""
    prefix = f"{__name__}."
    if not name.startswith(prefix):
        return None
    head, dot, rest = name[len(prefix):].partition(".")
    if head not in MOVED:
        return None
    return f"{prefix}{MOVED[head]}{dot}{rest}"


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name as the module that lives at the new one (one object under both)."""

    def find_spec(self, name, path=None, target=None):
        new = moved_to(name)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=False)

    def __init__(self) -> None:
        self.own_specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def create_module(self, spec):
        new = moved_to(spec.name)
        warnings.warn(f"{spec.name} is {new} now", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self.own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # the import system gave the module the old name's spec: it keeps its own
        module.__spec__ = self.own_specs.pop(module.__spec__.name)


if not any(isinstance(finder, _OldNames) for finder in sys.meta_path):
    # first: an old package's modules are found here, never again through its new __path__
    sys.meta_path.insert(0, _OldNames())
