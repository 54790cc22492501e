"""Captured updates: :class:`CapturedUpdate` runs an update body eagerly a few times, captures it
once (a CUDA graph, or ``torch.compile(mode="reduce-overhead")``) and replays it for every
later update, falling back to eager execution with one warning line if capturing fails; an
update whose gradients cross ranks through a host exchange is replayed as segments around it.
Nothing here knows an algorithm; on ``device=cpu`` updates run eagerly (``algo.capture=auto``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch

CAPTURE_MODES = ("auto", "graph", "compile", "off")


def resolve_capture(mode: str, device: torch.device) -> str:
    """The capture mode an update actually uses on ``device``: ``auto`` is ``graph`` on CUDA
    and ``off`` elsewhere; ``graph``/``compile`` asked for on a CPU learner give ``off`` with
    one warning (a CPU update has nothing to capture: kernel launches are not its cost)."""
    if mode not in CAPTURE_MODES:
        raise ValueError(f"algo.capture must be one of {list(CAPTURE_MODES)}, got {mode!r}")
    if mode == "auto":
        return "graph" if device.type == "cuda" else "off"
    if mode != "off" and device.type != "cuda":
        warnings.warn(f"drlmpi: algo.capture={mode} needs a CUDA device, the learner is on "
                      f"{device}: running eager updates", stacklevel=3)
        return "off"
    return mode


class CaptureError(RuntimeError):
    """Raised inside :class:`CapturedUpdate` when a body cannot be captured (then eager)."""


def exchange_of(sync: object) -> Callable[[str, object], None] | None:
    """The host part of a gradient sync that can be cut out of a captured update: a sync
    with an ``exchange(name, group)`` method and a ``steps_locally`` flag (see
    :class:`~drlmpi.topologies.data_parallel.syncs.ExchangeSync`); ``None`` for any other sync."""
    if getattr(sync, "steps_locally", None) is None:
        return None
    return getattr(sync, "exchange", None)


class CapturedUpdate:
    """An update body, run eagerly for ``warmup`` calls, then captured and replayed.

    ``body(sync)`` must do its updates on static tensors (its inputs are sampled inside it into
    preallocated buffers; parameters and optimizer state are updated in place), call
    ``sync(name, group)`` between each network's backward and its step, and return a 1-D tensor
    of metrics. Every call ``runner(sync)`` runs the body's updates exactly once:

    * calls ``1..warmup``: ``body(sync)`` eagerly (on a side stream for ``graph``, as capture
      needs: it also lets the optimizer allocate its state);
    * call ``warmup + 1``: capture, then replay;
    * later calls: replay.

    **Gradient collectives.** A local sync (one that steps the group itself) is captured with
    the rest. A sync with a host part (:func:`exchange_of`: MPI ``Allreduce`` of the gradients,
    a parameter server's round trip) cannot be inside a graph, so the body is captured as
    *segments* cut at each ``sync`` call: segment 1 runs up to the first network's backward;
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
        mode: ``graph``, ``compile`` or ``off`` (eager, e.g. on the CPU).
        device: where the body runs.
        name: shown in the warning (``dqn q``, ``td3 critic+actor``...).
        generators: non-default device generators the body draws from (registered with the
            graph so each replay advances them).
        warmup: eager calls before capturing.
    """

    def __init__(self, body: Callable[[Callable], torch.Tensor], mode: str, device: torch.device,
                 name: str, generators: Sequence[torch.Generator] = (), warmup: int = 3) -> None:
        self.body = body
        self.mode = mode
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

    @property
    def captured(self) -> bool:
        """Whether later calls replay a capture (rather than run the body eagerly)."""
        return bool(self.graphs) or self.compiled is not None

    def __call__(self, sync: Callable) -> torch.Tensor:
        self.calls += 1
        exchange = exchange_of(sync)
        if self.mode == "off" or self.failure is not None or (exchange and self.mode == "compile"):
            return self.body(sync)
        if self.graphs:
            return self._replay(exchange)
        if self.compiled is not None:
            return self._run_compiled(sync)
        if self.calls <= self.warmup:
            return self._warm(sync)
        try:
            if self.mode == "graph":
                self._capture_graphs(sync)
                return self._replay(exchange)
            if self.mode == "compile":
                self.compiled = torch.compile(lambda: self.body(sync), mode="reduce-overhead",
                                              dynamic=False)
                return self._run_compiled(sync)
            raise CaptureError(f"unknown capture mode {self.mode!r}")
        except Exception as exc:  # noqa: BLE001 (any failure: fall back, never crash)
            return self._fall_back(exc, sync)

    def _replay(self, exchange: Callable | None) -> torch.Tensor:
        for index, graph in enumerate(self.graphs):
            if index:
                exchange(*self.cuts[index - 1])
            graph.replay()
        return self.static_out.clone()

    def _warm(self, sync: Callable) -> torch.Tensor:
        if self.device.type != "cuda" or self.mode != "graph":
            return self.body(sync)
        side = torch.cuda.Stream(self.device)
        current = torch.cuda.current_stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            out = self.body(sync)
        current.wait_stream(side)
        return out

    def _new_graph(self) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        for gen in self.generators:
            if not hasattr(graph, "register_generator_state"):
                raise CaptureError("this torch cannot register a non-default generator with a graph")
            graph.register_generator_state(gen)
        return graph

    def _capture_graphs(self, sync: Callable) -> None:
        """Capture the body as one graph, or as one graph per segment between exchanges."""
        if self.device.type != "cuda":
            raise CaptureError(f"CUDA graphs need a CUDA device, the learner is on {self.device}")
        steps_locally = bool(getattr(sync, "steps_locally", True))
        graphs: list[torch.cuda.CUDAGraph] = []
        cuts: list[tuple[str, object]] = []
        torch.cuda.synchronize(self.device)
        entry = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(entry)
        capturing = False

        def cut(name: str, group: object) -> None:
            nonlocal capturing
            graphs[-1].capture_end()
            capturing = False
            cuts.append((name, group))
            graphs.append(self._new_graph())
            graphs[-1].capture_begin()
            capturing = True
            if steps_locally:
                group.apply_gradients()

        try:
            with torch.cuda.stream(side):
                try:
                    graphs.append(self._new_graph())
                    graphs[-1].capture_begin()
                    capturing = True
                    out = self.body(cut if exchange_of(sync) else sync)
                    graphs[-1].capture_end()
                    capturing = False
                except BaseException:
                    if capturing:  # end the broken capture (on its own stream) so CUDA works on
                        try:
                            graphs[-1].capture_end()
                        except Exception:  # noqa: BLE001 (the capture's own error is raised)
                            pass
                    raise
        finally:
            torch.cuda.set_stream(entry)
        entry.wait_stream(side)
        self.graphs, self.cuts, self.static_out = graphs, cuts, out

    def _run_compiled(self, sync: Callable) -> torch.Tensor:
        try:
            mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
            if mark is not None:
                mark()
            return self.compiled().clone()
        except Exception as exc:  # noqa: BLE001
            return self._fall_back(exc, sync)

    def _fall_back(self, exc: BaseException, sync: Callable) -> torch.Tensor:
        self.graphs, self.cuts, self.compiled, self.static_out = [], [], None, None
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        self.failure = f"{type(exc).__name__}: {first}"
        warnings.warn(f"drlmpi: capture={self.mode} failed for {self.name} ({self.failure}); "
                      f"running eager updates", stacklevel=3)
        if self.device.type == "cuda":
            try:
                torch.cuda.synchronize(self.device)
            except Exception:  # noqa: BLE001 (an error left by the capture; the body will tell)
                pass
        return self.body(sync)
