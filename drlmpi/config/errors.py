"""The one exception every refusal raises: :class:`ConfigError`, a configuration that cannot
run, reported in one line before any rank starts working.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration that cannot run (reported in one line before any rank starts work)."""
