"""What users read of the schema: ``python -m drlmpi --help`` (:func:`help_lines`) and the
reference table of docs/configuration.md (:func:`reference_table`; ``python -m
drlmpi.run.reference`` prints it, and a test keeps the document in step). Both list every
topology's options too, so both register them first (:mod:`drlmpi.topologies.registry`).
"""

from __future__ import annotations

from drlmpi.config.options import Option, format_number
from drlmpi.config.schema import SCHEMA
from drlmpi.topologies.registry import register


def shown_default(option: Option) -> str:
    """An option's default as one writes it on the command line (``???``: none)."""
    value = option.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    if isinstance(value, float):
        return format_number(value) if float(value).is_integer() and abs(value) < 1e15 else repr(value)
    return str(value)


def reference_table() -> str:
    """The markdown reference of every option: scope, key, allowed values, doc."""
    register()
    lines = ["| option | default | allowed | meaning |", "|---|---|---|---|"]
    for scope, options in SCHEMA.items():
        prefix = scope.replace("/", "=") + ": " if "/" in scope else (f"{scope}." if scope else "")
        for key, option in options.items():
            if key == "_target_":
                continue
            doc = option.doc.replace("|", "\\|")
            lines.append(f"| `{prefix}{key}` | `{shown_default(option)}` | {option.allowed(markdown=True)} "
                         f"| {doc} |")
    return "\n".join(lines)


def help_lines() -> list[str]:
    """One line per option for ``python -m drlmpi --help``."""
    register()
    out = []
    for scope, options in SCHEMA.items():
        out.append("")
        out.append(f"  [{scope.replace('/', '=') or 'top level'}]")
        prefix = scope.split("/")[0] + "." if scope else ""
        for key, option in options.items():
            if key in ("_target_", "name"):
                continue
            setting = f"{prefix}{key}={shown_default(option)}"
            out.append(f"    {setting:38} {option.allowed():28} {option.doc}")
    return out

if __name__ == "__main__":  # pragma: no cover
    print(reference_table())
