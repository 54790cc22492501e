"""Captured updates: :class:`CapturedUpdate` runs an update body eagerly a few times, captures it
once (a CUDA graph, or ``torch.compile(mode="reduce-overhead")``) and replays it for every
later update, falling back to eager execution with one warning line if capturing fails; an
update whose gradients cross ranks through a host exchange is replayed as segments around it;
a batched forward pass is replayed by :mod:`drlmpi.device.forward`. Nothing here knows an
algorithm; on ``device=cpu`` an update runs eagerly (``algo.capture=auto``). ``fused`` is
captured as ``graph`` (its body runs kernels that :mod:`drlmpi.device.compiled` generated).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

CAPTURE_MODES = ("auto", "fused", "graph", "compile", "off")


def resolve_capture(mode: str, device: torch.device, fusable: bool = False) -> str:
    """The capture mode an update actually uses on ``device``: ``auto`` is ``fused`` (for an
    update whose gradients can be compiled, ``fusable``) or ``graph`` on CUDA and ``off``
    elsewhere; ``fused``/``graph``/``compile`` asked for on a CPU learner give ``off`` with one
    warning (a CPU update has nothing to capture: kernel launches are not its cost), and
    ``fused`` for an update that cannot fuse is refused."""
    if mode not in CAPTURE_MODES or (mode == "fused" and not fusable):
        allowed = [m for m in CAPTURE_MODES if fusable or m != "fused"]
        raise ValueError(f"algo.capture must be one of {allowed}, got {mode!r}")
    if mode == "auto":
        return ("fused" if fusable else "graph") if device.type == "cuda" else "off"
    if mode != "off" and device.type != "cuda":
        warnings.warn(f"drlmpi: algo.capture={mode} needs a CUDA device, the learner is on "
                      f"{device}: running eager updates", stacklevel=3)
        return "off"
    return mode


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (160 characters at most): a failure in one line."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"


def on_side_stream(device: torch.device, fn: Callable[[], Any]) -> Any:
    """``fn()`` on a fresh CUDA stream ordered after the current one, which waits for it: the
    eager warm-up calls a capture needs (allocations off the capturing stream)."""
    side = torch.cuda.Stream(device)
    current = torch.cuda.current_stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        out = fn()
    current.wait_stream(side)
    return out


class CaptureError(RuntimeError):
    """Raised inside :class:`CapturedUpdate` when a body cannot be captured (then eager)."""


class Exchange(Protocol):
    """What a captured body is handed between each network's backward and its step (drlmpi's
    :class:`~drlmpi.algos.exchange.GradientExchange`): calling it exchanges and steps;
    :meth:`exchange` is the part that crosses ranks, run on the host between captured segments
    when :attr:`crosses_ranks`."""

    steps_locally: bool
    crosses_ranks: bool
    computes_gradients: bool

    def exchange(self, name: str, group: Any) -> None: ...

    def end_update(self) -> None: ...

    def __call__(self, name: str, group: Any) -> None: ...


class _Cut:
    """Handed to the body while its segments are captured: each call ends a segment, records the
    exchange to run there, and starts the next segment (with the local step, if any)."""

    def __init__(self, runner: CapturedUpdate, steps_locally: bool) -> None:
        self.runner, self.steps_locally = runner, steps_locally
        self.crosses_ranks = True
        self.computes_gradients = True  # only updates that compute gradients are captured

    def exchange(self, name: str, group: Any) -> None:
        raise CaptureError("a captured body calls its exchange, never exchange() itself")

    def end_update(self) -> None:
        """Nothing to check while capturing."""

    def __call__(self, name: str, group: Any) -> None:
        self.runner._cut(name, group, self.steps_locally)


class CapturedUpdate:
    """An update body, run eagerly for ``warmup`` calls, then captured and replayed.

    ``body(sync)`` must do its updates on static tensors (its inputs are sampled inside it into
    preallocated buffers; parameters and optimizer state are updated in place), call
    ``sync(name, group)`` between each network's backward and its step, and return a 1-D tensor
    of metrics. Every call ``runner(sync)`` runs the body's updates exactly once:

    * calls ``1..warmup``: ``body(sync)`` eagerly (on a side stream for ``graph``, as capture
      needs: it also lets the optimizer allocate its state); :meth:`runs_eagerly` says
      beforehand whether the next call runs the body's Python;
    * call ``warmup + 1``: capture, then replay;
    * later calls: replay.

    **Gradient collectives.** A local exchange is captured with the rest. An exchange that
    :attr:`~Exchange.crosses_ranks` (MPI ``Allreduce`` of the gradients, a parameter server's
    round trip, a NCCL all-reduce) cannot be inside a graph, so the body is captured as
    *segments* cut at each exchange call: segment 1 runs up to the first network's backward;
    the exchange runs on the host; segment 2 starts with that network's optimizer step (if the
    sync ``steps_locally``) and runs to the next sync, and so on. Capturing executes nothing, so
    every segment is captured before the first replay, and a capture that fails has exchanged
    nothing: the eager fallback then does the whole update, collectives included, and no rank
    is left waiting. ``compile`` mode captures local updates only (a body with an exchange runs
    eagerly under it).

    Returns a copy of the metrics vector (one small device copy, so later replays cannot
    overwrite what the caller keeps). If capturing or compiling raises, ONE warning line is
    issued and every later call runs the body eagerly: a failed capture never crashes a run.

    Args:
        body: the update(s), taking the sync to call.
        mode: ``graph`` (``fused`` is captured the same way: its body runs compiled kernels),
            ``compile`` or ``off`` (eager, e.g. on the CPU).
        device: where the body runs.
        name: shown in the warning (``dqn q``, ``td3 critic+actor``...).
        generators: non-default device generators the body draws from (registered with the
            graph so each replay advances them).
        warmup: eager calls before capturing.
    """

    def __init__(self, body: Callable[[Exchange], torch.Tensor], mode: str, device: torch.device,
                 name: str, generators: Sequence[torch.Generator] = (), warmup: int = 3) -> None:
        self.body = body
        self.mode = "graph" if mode == "fused" else mode  # fused: a graph of compiled kernels
        self.device = device
        self.name = name
        self.generators = tuple(generators)
        self.warmup = warmup
        self.calls = 0
        #: the captured segments (one when the body has no exchange) and, between them, the
        #: ``(name, group)`` of each exchange.
        self.graphs: list[torch.cuda.CUDAGraph] = []
        self.cuts: list[tuple[str, object]] = []
        self.compiled: Callable[[], torch.Tensor] | None = None
        self.static_out: torch.Tensor | None = None
        self.failure: str | None = None
        self._capturing = False

    @property
    def captured(self) -> bool:
        """Whether later calls replay a capture (rather than run the body eagerly)."""
        return bool(self.graphs) or self.compiled is not None

    def runs_eagerly(self, sync: Exchange) -> bool:
        """Whether the next call with ``sync`` runs the body eagerly (its Python runs, checks in
        it included) rather than capturing or replaying."""
        return self._eager_only(sync) or (not self.captured and self.calls < self.warmup)

    def _eager_only(self, sync: Exchange) -> bool:
        return (self.mode == "off" or self.failure is not None
                or (sync.crosses_ranks and self.mode == "compile"))

    def __call__(self, sync: Exchange) -> torch.Tensor:
        self.calls += 1
        if self._eager_only(sync):
            return self.body(sync)
        if self.graphs:
            return self._replay(sync)
        if self.compiled is not None:
            return self._run_compiled(sync)
        if self.calls <= self.warmup:
            return self._warm(sync)
        try:
            if self.mode == "graph":
                self._capture_graphs(sync)
                return self._replay(sync)
            if self.mode == "compile":
                self.compiled = torch.compile(lambda: self.body(sync), mode="reduce-overhead",
                                              dynamic=False)
                return self._run_compiled(sync)
            raise CaptureError(f"unknown capture mode {self.mode!r}")
        except Exception as exc:  # noqa: BLE001 (any failure: fall back, never crash)
            return self._fall_back(exc, sync)

    def _replay(self, sync: Exchange) -> torch.Tensor:
        for index, graph in enumerate(self.graphs):
            if index:
                sync.exchange(*self.cuts[index - 1])
            graph.replay()
        return self.static_out.clone()

    def _warm(self, sync: Exchange) -> torch.Tensor:
        if self.device.type != "cuda" or self.mode != "graph":
            return self.body(sync)
        return on_side_stream(self.device, lambda: self.body(sync))

    def _new_graph(self) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        for gen in self.generators:
            if not hasattr(graph, "register_generator_state"):
                raise CaptureError("this torch cannot register a non-default generator with a graph")
            graph.register_generator_state(gen)
        return graph

    def _capture_graphs(self, sync: Exchange) -> None:
        """Capture the body as one graph, or as one graph per segment between exchanges."""
        if self.device.type != "cuda":
            raise CaptureError(f"CUDA graphs need a CUDA device, the learner is on {self.device}")
        self._segments: list[torch.cuda.CUDAGraph] = []
        self._cut_at: list[tuple[str, object]] = []
        torch.cuda.synchronize(self.device)
        entry = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(entry)
        try:
            with torch.cuda.stream(side):
                try:
                    self._begin_segment()
                    out = self.body(_Cut(self, sync.steps_locally) if sync.crosses_ranks else sync)
                    self._segments[-1].capture_end()
                    self._capturing = False
                except BaseException:
                    if self._capturing:  # end the broken capture (on its own stream) so CUDA works on
                        try:
                            self._segments[-1].capture_end()
                        except Exception:  # noqa: BLE001 (the capture's own error is raised)
                            pass
                        self._capturing = False
                    raise
        finally:
            torch.cuda.set_stream(entry)
        entry.wait_stream(side)
        self.graphs, self.cuts, self.static_out = self._segments, self._cut_at, out

    def _begin_segment(self) -> None:
        self._segments.append(self._new_graph())
        self._segments[-1].capture_begin()
        self._capturing = True

    def _cut(self, name: str, group: Any, steps_locally: bool) -> None:
        """End the segment being captured at an exchange of ``name`` and begin the next one."""
        self._segments[-1].capture_end()
        self._capturing = False
        self._cut_at.append((name, group))
        self._begin_segment()
        if steps_locally:
            group.apply_gradients()

    def _run_compiled(self, sync: Exchange) -> torch.Tensor:
        try:
            mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
            if mark is not None:
                mark()
            return self.compiled().clone()
        except Exception as exc:  # noqa: BLE001
            return self._fall_back(exc, sync)

    def _fall_back(self, exc: BaseException, sync: Exchange) -> torch.Tensor:
        self.graphs, self.cuts, self.compiled, self.static_out = [], [], None, None
        self.failure = first_line(exc)
        warnings.warn(f"drlmpi: capture={self.mode} failed for {self.name} ({self.failure}); "
                      f"running eager updates", stacklevel=3)
        if self.device.type == "cuda":
            try:
                torch.cuda.synchronize(self.device)
            except Exception:  # noqa: BLE001 (an error left by the capture; the body will tell)
                pass
        return self.body(sync)
