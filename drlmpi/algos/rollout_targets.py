"""A frozen PPO rollout made ready to train on (:class:`RolloutTargets`, a part of
:class:`~drlmpi.algos.ppo.PPO`): its values, advantages and value targets (GAE, or V-trace with
the proximal policy's log-probabilities and weights), its minibatch table and the schedule of its
minibatches, all on the learner's device.

When a rollout's first update runs, the learner computes ``V(obs)`` and ``V(next_obs)`` of every
row with its current value function and the advantages per environment stream in time order.
Where the topology built the rows itself, each stream's in step order (central), a row's next
observation is the next row's unless the row ended its stream in the rollout or was truncated:
only those rows' ``V(next_obs)`` are evaluated, the others take the next row's ``V(obs)`` (on
Breakout's rollouts of 32 steps per game, 1 row in 32 is evaluated twice instead of every row).
``algo.vtrace=false``: GAE(lambda)::

    delta_t = r_t + gamma * V(s'_t) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}      (done = terminated or truncated)

with ``A_{t+1} = 0`` at the last row of a stream in the rollout (the rollout's cut bootstraps
through ``V(s'_t)``, as does a time-limit truncation). Value targets are ``A_t + V(s_t)``.

``algo.vtrace=true`` (the default) also evaluates the *proximal* policy
``pi_prox`` - the learner's policy as the rollout starts - on every row, and with the truncated
ratios ``rho_t = min(rho_clip, pi_prox/mu)``, ``c_t = lambda * min(c_clip, pi_prox/mu)``::

    A_t = rho_t * delta_t + gamma * c_t * (1 - done_t) * A_{t+1}       (V-trace: v_t = V(s_t) + A_t)
    P_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}             (policy advantage)

Value targets are V-trace's ``v_t`` (the value of ``pi_prox``, for ``rho_clip = 1``), and the
policy advantage is IMPALA's ``r_t + gamma v_{t+1} - V(s_t)`` with the next target mixed by
lambda (:mod:`drlmpi.algos.advantages` derives both). Rows acted by ``pi_prox`` itself (ratio 1)
give ``rho = 1``, ``c = lambda``: exactly GAE's advantages and targets. The recursions run on
the device as a parallel scan (:func:`gae_tensor`, :func:`~drlmpi.algos.advantages.vtrace_tensor`;
:func:`~drlmpi.algos.advantages.compute_gae`, :func:`~drlmpi.algos.advantages.compute_vtrace`
are the plain references), so no transfer happens per rollout.

The minibatch schedule is drawn then too: ``epochs`` permutations of the rollout's rows, cut
into minibatches (:mod:`drlmpi.algos.ppo`, "Minibatches").
"""

from __future__ import annotations

import numpy as np
import torch

from drlmpi.algos.actor_critic import ActorCritic
from drlmpi.algos.advantages import gae_tensor, stream_order_tensor, vtrace_tensor
from drlmpi.algos.rollouts import Rollout, RolloutStore, table_views
from drlmpi.data.layout import ExperienceLayout

#: rows per forward pass when a rollout's values are computed (images: bounded activations)
EVAL_CHUNK_ROWS = 4096


class RolloutTargets:
    """The start of a rollout's training (:meth:`_start`, which PPO's ``stage_block`` calls on a
    rollout's first update). It reads the attributes below, which
    :class:`~drlmpi.algos.ppo.PPO` sets from its config."""

    layout: ExperienceLayout
    store: RolloutStore
    net: ActorCritic
    device: torch.device
    rng: np.random.Generator
    reward_scale: float
    gamma: float
    gae_lambda: float
    vtrace: bool
    rho_clip: float
    c_clip: float
    epochs: int
    batch_size: int
    #: draws the minibatch permutations; seeded from ``rng`` on the first rollout
    _generator: torch.Generator
    _generator_seeded: bool

    @torch.no_grad()
    def _start(self, rollout: Rollout) -> None:
        """Values, advantages and value targets (GAE, or V-trace with the proximal log-probs and
        weights: on the learner's device, nothing crosses the bus) and the minibatch schedule
        of a rollout about to be trained on."""
        layout = self.layout
        rows = rollout.rows

        def col(name: str) -> torch.Tensor:
            return rows[:, layout.slices[name]]

        obs, next_obs, action = col("obs"), col("next_obs"), col("action")
        values, proximal = self._evaluate(obs, action)
        if rollout.boundary_rows is None:
            next_values, _ = self._evaluate(next_obs, None)
        else:  # rows that follow their streams: V(next_obs) is the next row's V(obs)
            order, at = boundary_positions(col("stream")[:, 0], col("truncated")[:, 0], rollout.boundary_rows)
            following = torch.zeros_like(values)
            following[:-1] = values[order][1:]
            following[at] = self._evaluate(next_obs[order[at]], None)[0]
            next_values = torch.empty_like(values)
            next_values[order] = following
        columns = (col("reward")[:, 0] * self.reward_scale, values, next_values,
                   col("terminated")[:, 0], col("truncated")[:, 0], col("stream")[:, 0])
        log_prob = col("log_prob")  # behaviour
        weight = None
        if self.vtrace:
            log_ratio = proximal - log_prob[:, 0]
            value_adv, advantages = vtrace_tensor(*columns, log_ratio, self.gamma, self.gae_lambda,
                                                  self.rho_clip, self.c_clip)
            log_prob = proximal[:, None]  # the clip is around the proximal policy
            weight = log_ratio.exp().clamp(max=self.rho_clip)[:, None]
        else:
            advantages = value_adv = gae_tensor(*columns, self.gamma, self.gae_lambda)
        parts = {"obs": obs, "action": action, "log_prob": log_prob,
                 "advantage": advantages[:, None], "return": (value_adv + values)[:, None],
                 "value": values[:, None]}
        if weight is not None:
            parts["weight"] = weight
        rollout.table = torch.cat(list(parts.values()), dim=1)
        rollout.views = table_views({name: part.shape[1] for name, part in parts.items()})
        n = rows.shape[0]
        per_epoch = rollout.n_updates // self.epochs
        if not self._generator_seeded:  # from rng, which a topology may reseed per rank
            self._generator.manual_seed(int(self.rng.integers(2**62)))
            self._generator_seeded = True
        size = min(n, self.batch_size)
        rollout.schedule = [
            part for _ in range(self.epochs)
            for part in torch.randperm(n, generator=self._generator, device=self.device)
            [: per_epoch * size].split(size)
        ]
        rollout.rows = None  # the table holds what training needs

    def successive_rows(self) -> None:
        """The topology builds every row itself, each stream's in step order
        (:meth:`drlmpi.algos.rollouts.RolloutStore.follow_streams`)."""
        slices = self.layout.slices
        self.store.follow_streams(slices["stream"].start, slices["truncated"].start)

    def _evaluate(self, obs: torch.Tensor, action: torch.Tensor | None,
                  chunk: int = EVAL_CHUNK_ROWS) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``V(obs)`` and, with ``action`` and V-trace, the current policy's log-probabilities of
        ``action``: in chunks of ``chunk`` rows, so a rollout of many images does not need all
        their activations at once."""
        values, log_probs = [], []
        want_log_prob = action is not None and self.vtrace
        for first in range(0, obs.shape[0], chunk):
            part = slice(first, first + chunk)
            if want_log_prob:
                dist, value = self.net.distribution_value(obs[part])
                log_probs.append(self.net.log_prob(dist, action[part]))
            else:
                value = self.net.value(obs[part])
            values.append(value)
        cat = (lambda parts: parts[0] if len(parts) == 1 else torch.cat(parts))  # noqa: E731
        return cat(values), (cat(log_probs) if want_log_prob else None)


def boundary_positions(streams: torch.Tensor, truncated: torch.Tensor,
                       count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(order, at)``: the rows in stream order (:func:`stream_order_tensor`) and the positions
    in it of the ``count`` rows whose next observation is not the next row's - the last of each
    stream and the truncated ones (a terminated row's next value is never used). ``count`` comes
    from the host (:func:`drlmpi.algos.rollouts.boundary_count`), so the positions are found
    by a stable sort, not by ``nonzero``, whose size the host would wait for."""
    order, last_of_stream = stream_order_tensor(streams)
    boundary = last_of_stream | (truncated[order] > 0)
    at = torch.sort((~boundary).to(torch.int8), stable=True).indices[:count]
    return order, at
