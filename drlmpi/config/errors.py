"""The exceptions a run ends with in one line, without a traceback: :class:`ConfigError`, a
configuration that cannot run (refused before any rank starts working), and
:class:`NonFiniteError`, a value that must be finite was not (the run stops where it saw it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ConfigError(ValueError):
    """A configuration that cannot run (reported in one line before any rank starts work)."""


class NonFiniteError(RuntimeError):
    """Experience (an observation, a reward...), a loss or the policy's weights that must be
    finite were not. The message says what, where it came from and at which env step;
    ``policy`` is the learner's policy state when its weights are all still finite (the run
    writes it as ``policy.pt``), else ``None``."""

    def __init__(self, message: str, policy: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.policy = policy
