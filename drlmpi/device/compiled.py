"""A function compiled by inductor that falls back to itself: :class:`Compiled`.

``algo.capture=fused`` compiles the small device functions of an off-policy update (the loss and
its gradient, clipping with the Adam step, the replay's index-and-gather, the target copy) so that
each becomes one or two generated kernels instead of a chain of small ones; the captured CUDA graph
then replays those kernels. Compiling may fail where inductor cannot run (no Triton, no C++
compiler): the function then runs as written, after one warning line, and the run goes on.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from drlmpi.device.capture import first_line


class Compiled:
    """``fn`` compiled with ``compiler`` (``torch.compile``, whole graph, static shapes).

    Calling it runs the compiled program (compiling at the first call); if compiling or running it
    raises, ONE warning line names ``what`` and every later call runs ``fn`` itself. ``fn`` must
    be traceable as one graph: device tensors and Python constants in, no host reads of device
    values. Tests pass ``compiler=lambda fn, **_: fn`` to run the same function uncompiled.
    """

    def __init__(self, fn: Callable[..., Any], what: str,
                 compiler: Callable[..., Any] = torch.compile) -> None:
        self.fn, self.what = fn, what
        self.program: Callable[..., Any] | None = compiler(own_code(fn), fullgraph=True, dynamic=False)
        self.failure: str | None = None

    @property
    def compiled(self) -> bool:
        """Whether calls run the compiled program (no failure so far)."""
        return self.program is not None

    def __call__(self, *args: Any) -> Any:
        if self.program is not None:
            try:
                return self.program(*args)
            except Exception as exc:  # noqa: BLE001 (any failure: run fn itself, never a crash)
                self.program, self.failure = None, first_line(exc)
                warnings.warn(f"drlmpi: algo.capture=fused could not compile the {self.what} "
                              f"({self.failure}); running it uncompiled", stacklevel=2)
        return self.fn(*args)


def own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A function calling ``fn`` through a code object no other function has, so that what torch
    compiles for it counts against a limit of its own (the module docstring says why)."""
    def call(*args: Any) -> Any:
        return fn(*args)
    call.__code__ = call.__code__.replace()  # a copy: a distinct code object, its own compile cache
    return call
