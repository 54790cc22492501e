"""A run's pace after its first moments: env steps/s over the second half of its training.

A run's first seconds can step far slower than the rest - a CUDA learner captures its graphs and
cuDNN chooses its kernels at each batch size, ``algo.capture=compile`` compiles the update at its
first call, the first rollout or round has to arrive before anything trains (PPO Breakout, central
on 16 ranks: about 2,100 env steps/s over its first 6 s, 7,000-9,000 later) - so a short run's
``env_steps_per_s`` mixes the warm-up into the pace. The learner notes ``(training seconds, env
steps)`` as its episodes end (:class:`PaceNotes`, at most one note every :data:`NOTE_EVERY_S`);
:func:`second_half` reads the pace over the second half of a launch's training from them
(``summary.json``'s ``second_half``; the planner's calibration compares it with its model).
"""

from __future__ import annotations

from typing import Any

#: seconds between two notes of the pace (episodes ending more often are not all noted)
NOTE_EVERY_S = 0.25


class PaceNotes:
    """``(training seconds, env steps)`` as the learner's episodes end, one every
    :data:`NOTE_EVERY_S` at most."""

    def __init__(self) -> None:
        self.points: list[tuple[float, int]] = []

    def note(self, seconds: float, env_steps: int) -> None:
        if not self.points or seconds >= self.points[-1][0] + NOTE_EVERY_S:
            self.points.append((float(seconds), int(env_steps)))


def second_half(points: list[tuple[float, int]], begin_s: float, end_s: float) -> dict[str, Any] | None:
    """Env steps/s between the last note at or before the middle of ``[begin_s, end_s]`` (a
    launch's training) and the last note: ``{"from_train_seconds", "from_env_steps",
    "train_seconds", "env_steps", "env_steps_per_s"}``; ``None`` where the notes do not span the
    second half (none in the first half of the launch, or none in its last quarter)."""
    middle = (begin_s + end_s) / 2
    early = [p for p in points if begin_s <= p[0] <= middle]
    if not early or not points:
        return None
    (t0, s0), (t1, s1) = early[-1], points[-1]
    if t1 < middle + (end_s - begin_s) / 4 or s1 <= s0:
        return None
    return {"from_train_seconds": t0, "from_env_steps": s0, "train_seconds": t1, "env_steps": s1,
            "env_steps_per_s": (s1 - s0) / (t1 - t0)}
