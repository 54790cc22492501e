"""The one update path: every update of every topology runs through :meth:`UpdatePath.run_updates`
(a part of :class:`~drlmpi.algos.base.Algorithm`), in blocks, eagerly or replayed from a captured
graph, each update checked against the algorithm's ``sync_schedule``.

An update is the algorithm's hooks in order: :meth:`~drlmpi.algos.base.Algorithm.next_batch`,
:meth:`~drlmpi.algos.base.Algorithm.learn` (loss, backward, the exchange, the optimizer step),
then :meth:`~drlmpi.algos.base.Algorithm.after_update_device` (the target networks). With
``algo.capture`` an update replays a captured graph (DQN, TD3: compiled kernels) without host
synchronisation, an exchange across ranks running between graph segments. Metrics come back as
:class:`~drlmpi.device.metrics.Metrics`: one device tensor, floats when read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from drlmpi.algos.exchange import LOCAL, CheckedExchange, GradientExchange
from drlmpi.algos.params import ParamGroup
from drlmpi.device.capture import CapturedUpdate
from drlmpi.device.metrics import Metrics
from drlmpi.device.staging import synchronize


class UpdatePath:
    """The update half of an algorithm: it runs blocks of updates through the hooks
    :class:`~drlmpi.algos.base.Algorithm` declares (``sync_schedule``, ``stage_block``,
    ``next_batch``, ``learn``, ``after_update_device``; ``prepare_capture`` and
    ``capture_generators`` before a capture), and reads the attributes below, which the
    algorithm sets (``capturable`` and ``updates_per_graph`` are its class attributes)."""

    groups: dict[str, ParamGroup]
    cfg: Mapping[str, Any]
    device: torch.device
    #: the capture mode updates use (resolved ``algo.capture``)
    capture: str
    capturable: bool
    updates_per_graph: int
    metric_names: tuple[str, ...]
    #: updates done (host count) and the device counter each block starts from it
    updates: int
    update_number: torch.Tensor
    #: captured blocks by (schedules, crosses ranks, steps locally)
    _captures: dict[tuple, CapturedUpdate]

    def run_updates(self, n: int, exchange: GradientExchange = LOCAL) -> Mapping[str, float]:
        """``n`` updates, gradients reaching the optimizers through ``exchange``; returns the last
        one's metrics. The one update path: every update of every topology runs here.

        An update is: :meth:`next_batch`, :meth:`learn` (loss, backward, ``exchange`` of each
        network its :meth:`sync_schedule` names, the optimizer step), then
        :meth:`after_update_device`. A parameter server's exchange brings gradients computed
        elsewhere (:attr:`~GradientExchange.computes_gradients` false): its updates exchange the
        scheduled networks and follow with the target networks. Updates run in blocks of
        ``algo.updates_per_graph`` (one with an exchange that crosses ranks), each block eagerly
        or, with :attr:`capturable` and ``algo.capture`` on, replayed from a captured graph
        (:class:`~drlmpi.device.capture.CapturedUpdate`; cut into segments around an exchange
        that crosses ranks). Eager and captured updates share the same tensors and state.

        Every update is checked against :meth:`sync_schedule` (:class:`CheckedExchange`):
        ranks that reduce gradients together (allgather, a parameter server and its workers)
        must enter the same collectives in the same order, so an update that skips or adds a
        sync (an early stop on KL, say) raises :class:`SyncScheduleError` *before* the
        unexpected collective, or as soon as it returns with one missing, and the job is ended
        with that message instead of hanging. The check runs wherever an update's Python runs:
        eager updates and a captured block's warm-up calls; a replay repeats that checked
        sequence (one capture per sequence of schedules).
        """
        metrics: Mapping[str, float] = {}
        block = self.updates_per_graph if not exchange.crosses_ranks else 1
        while n > 0:
            k = block if n >= block else 1
            metrics = self._update_block(k, exchange)
            n -= k
        return metrics

    def update(self, exchange: GradientExchange = LOCAL) -> Mapping[str, float]:
        return self._update_block(1, exchange)  # one update (run_updates of 1)

    def update_on(self, batch: Mapping[str, torch.Tensor],
                  exchange: GradientExchange = LOCAL) -> Mapping[str, float]:
        """One update on a given minibatch (eager, checked, as any other)."""
        return self._update_block(1, exchange, batch)

    def _update_block(self, k: int, exchange: GradientExchange,
                      batch: Mapping[str, torch.Tensor] | None = None) -> Mapping[str, float]:
        first = self.updates
        schedules = tuple(tuple(self.sync_schedule(first + j)) for j in range(k))
        checked = CheckedExchange(exchange, first, schedules, self._schedule_mismatch)
        self.update_number.fill_(first)
        runner = None
        if batch is None and exchange.computes_gradients:
            same_shapes = self.stage_block(k)
            if same_shapes and self.capturable and self.capture != "off":
                runner = self._runner(schedules, exchange)
        if runner is None:
            values = self._updates(schedules, checked, batch)
        elif runner.runs_eagerly(exchange):
            values = runner(checked)
        else:
            values = runner(exchange)  # a capture or replay of the sequence the warm-up checked
            checked = None
        if checked is not None:
            checked.finish()
        self.updates += k
        return Metrics(self.metric_names, values) if values is not None else {}

    def _updates(self, schedules: tuple[tuple[str, ...], ...], exchange: GradientExchange,
                 batch: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor | None:
        """The body of a block: one update per schedule (captured as it is)."""
        values = None
        for synced in schedules:
            if exchange.computes_gradients:
                values = self.learn(self.next_batch() if batch is None else batch, exchange, synced)
            else:
                for name in synced:
                    exchange(name, self.groups[name])
            exchange.end_update()
            self.update_number.add_(1)
            self.after_update_device(synced)
        return values

    def _runner(self, schedules: tuple[tuple[str, ...], ...], exchange: GradientExchange) -> CapturedUpdate:
        key = (schedules, exchange.crosses_ranks, exchange.steps_locally)
        runner = self._captures.get(key)
        if runner is None:
            def body(exchange: GradientExchange) -> torch.Tensor:
                return self._updates(schedules, exchange)

            label = f"{self.config_name(self.cfg)} {' '.join('+'.join(s) for s in schedules)}"
            self.prepare_capture()
            runner = self._captures[key] = CapturedUpdate(body, self.capture, self.device, label,
                                                          generators=self.capture_generators())
        return runner

    def _schedule_mismatch(self, index: int, expected: tuple[str, ...], seen: tuple[str, ...]) -> str:
        return (f"algo={self.config_name(self.cfg)} update {index} synced {list(seen)} but "
                f"sync_schedule({index}) promised {list(expected)}: ranks averaging gradients would "
                f"wait for each other forever. Make sync_schedule() return exactly the networks "
                f"update() syncs, in order")

    @property
    def queues_updates(self) -> bool:  # updates are queued on an accelerator, finishing later
        return self.device.type == "cuda"

    def synchronize(self) -> None:
        """Wait for the updates queued on the learner's device (no-op on the CPU): a caller
        timing updates calls this once after a batch of them, never per update."""
        synchronize(self.device)
