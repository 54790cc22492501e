"""The exceptions a run ends with in one line, without a traceback: :class:`ConfigError`, a
configuration that cannot run (refused before any rank starts working), and
:class:`NonFiniteError`, a value that must be finite was not (the run stops where it saw it); and
the "did you mean" of a refused typo (:func:`did_you_mean`), which every such refusal words alike.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
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


def nearest(word: str, choices: Iterable[str], n: int = 1) -> list[str]:
    """The choices a typo ``word`` most likely meant, nearest first, at most ``n``: the one that
    differs from it only in case, else :func:`difflib.get_close_matches`' (none: nothing near)."""
    choices = sorted({str(choice) for choice in choices})
    same = [choice for choice in choices if choice.lower() == word.lower()]
    return same[:1] if same else difflib.get_close_matches(word, choices, n=n)


def did_you_mean(word: str, choices: Iterable[str], spell: Callable[[str], str] = str, n: int = 1) -> str:
    """``did you mean X?`` (``X or Y?`` for several) for typo ``word``, each of the
    :func:`nearest` choices written as ``spell`` writes it (``env.atari.frame_stack``,
    ``env=lunarlander``); ``""`` when none is near."""
    near = [spell(choice) for choice in nearest(word, choices, n)]
    if not near:
        return ""
    return f"did you mean {' or '.join([', '.join(near[:-1]), near[-1]] if len(near) > 1 else near)}?"
