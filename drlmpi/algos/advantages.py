"""Advantages and value targets for rows of interleaved environment streams: GAE(lambda)
(:func:`compute_gae`, :func:`gae_tensor`) and V-trace (Espeholt et al. 2018, IMPALA).

A learner whose rows were acted by older policies ``mu`` (an asynchronous simulator's weights
lag the learner's) evaluates a *target* policy ``pi`` (for PPO: the learner's policy when the
rollout starts training) from them. With the per-row importance ratio
``ratio_s = pi(a_s|x_s) / mu(a_s|x_s)`` and the truncation levels ``rho_clip`` (rho bar) and
``c_clip`` (c bar)::

    rho_s   = min(rho_clip, ratio_s)
    c_s     = lambda * min(c_clip, ratio_s)              (the lambda-weighted traces IMPALA mentions)
    delta_s = r_s + gamma * V(x'_s) * (1 - terminated_s) - V(x_s)
    A_s     = rho_s * delta_s + gamma * c_s * (1 - done_s) * A_{s+1}       (done = terminated or truncated)
    v_s     = V(x_s) + A_s                               (the value target)

which is the recursion ``v_s - V(x_s) = sum_{t>=s} gamma^{t-s} (c_s ... c_{t-1}) rho_t delta_t``.
As in GAE, ``A_{s+1} = 0`` at the last row of a stream in the rollout and at an episode end: a
rollout cut or a time-limit truncation bootstraps through ``V(x'_s)``, a termination does not.
``rho_clip`` bounds the value function's fixed point (``rho_clip = 1``: the value of ``pi``,
larger values move it towards ``mu``'s), ``c_clip`` bounds how far corrections propagate back.

The policy-gradient advantage is IMPALA's ``rho_s (r_s + gamma v_{s+1} - V(x_s))`` with the
target at ``s + 1`` mixed by lambda, ``q_s = r_s + gamma ((1 - lambda) V(x_{s+1}) + lambda v_{s+1})``::

    P_s = delta_s + gamma * lambda * (1 - done_s) * A_{s+1}

returned *without* the factor ``rho_s``: the caller weights the policy loss by the truncated
ratio (PPO's decoupled objective does, see :mod:`drlmpi.algos.ppo`). On-policy rows
(``ratio = 1``, ``rho_clip, c_clip >= 1``) give ``rho = 1``, ``c = lambda`` and so
``A_s = P_s = `` GAE(lambda) and ``v_s`` = GAE's value target, operation for operation the same
as :func:`compute_gae` in the plain reference (:func:`compute_vtrace`).

:func:`vtrace_tensor` computes the same on the learner's device with :func:`reverse_scan`, the
parallel scan :func:`gae_tensor` uses too.
"""

from __future__ import annotations

import numpy as np
import torch


def compute_gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray,
                terminated: np.ndarray, truncated: np.ndarray, streams: np.ndarray,
                gamma: float, lam: float) -> np.ndarray:
    """GAE(lambda) advantages of rows that are in time order within each stream.

    Streams may be interleaved in any way; the recursion is cut at an episode end
    (``terminated`` or ``truncated``) and at the last row of each stream. All arguments are
    1-D arrays of the same length; returns float32 advantages in the rows' order.
    """
    n = len(rewards)
    delta, done = td_errors(rewards, values, next_values, terminated, truncated, gamma)
    # Sorting by stream (stably, so time order is kept) makes each stream contiguous; a zero
    # continuation factor at each stream's last row then lets one backward pass do them all.
    order, last_of_stream = stream_order(streams)
    cont = (gamma * lam * (1.0 - done[order]) * ~last_of_stream).tolist()
    delta_sorted = delta[order].tolist()
    adv_sorted = [0.0] * n
    running = 0.0
    for i in range(n - 1, -1, -1):
        running = delta_sorted[i] + cont[i] * running
        adv_sorted[i] = running
    advantages = np.empty(n, dtype=np.float32)
    advantages[order] = adv_sorted
    return advantages


def gae_tensor(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
               terminated: torch.Tensor, truncated: torch.Tensor, streams: torch.Tensor,
               gamma: float, lam: float) -> torch.Tensor:
    """:func:`compute_gae` on tensors, on their device (float64 inside, float32 out).

    After the same stable sort by stream, the backward recursion ``A_i = delta_i + c_i A_{i+1}``
    is a linear recurrence, solved by a parallel (doubling) scan
    (:func:`~drlmpi.algos.advantages.reverse_scan`): ``log2(n)`` rounds of a few vector operations
    instead of ``n`` sequential steps, no host loop over rows, no transfer.
    """
    n = rewards.shape[0]
    delta, done = td_errors_tensor(rewards, values, next_values, terminated, truncated, gamma)
    order, last_of_stream = stream_order_tensor(streams)
    factor = (gamma * lam) * (1.0 - done[order]) * (~last_of_stream).to(torch.float64)
    acc = reverse_scan(delta[order], factor)
    advantages = torch.empty(n, dtype=torch.float32, device=rewards.device)
    advantages[order] = acc.to(torch.float32)
    return advantages


def td_errors(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray,
              terminated: np.ndarray, truncated: np.ndarray,
              gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """``(delta, done)`` in float64: ``delta = r + gamma V(x') (1 - terminated) - V(x)`` (a
    truncation bootstraps) and ``done = terminated or truncated`` (where a recursion stops)."""
    terminated = np.asarray(terminated, dtype=np.float64)
    done = np.maximum(terminated, np.asarray(truncated, dtype=np.float64))
    delta = (np.asarray(rewards, dtype=np.float64)
             + gamma * np.asarray(next_values, dtype=np.float64) * (1.0 - terminated)
             - np.asarray(values, dtype=np.float64))
    return delta, done


def td_errors_tensor(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
                     terminated: torch.Tensor, truncated: torch.Tensor,
                     gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`td_errors` on tensors, on their device (float64)."""
    f64 = torch.float64
    terminated = terminated.to(f64)
    done = torch.maximum(terminated, truncated.to(f64))
    delta = rewards.to(f64) + gamma * next_values.to(f64) * (1.0 - terminated) - values.to(f64)
    return delta, done


def stream_order(streams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stable sort of the rows by stream (time order kept within each) and, in that order,
    which rows are the last of their stream."""
    order = np.argsort(np.asarray(streams), kind="stable")
    s_sorted = np.asarray(streams)[order]
    last_of_stream = np.ones(len(order), dtype=bool)
    last_of_stream[:-1] = s_sorted[1:] != s_sorted[:-1]
    return order, last_of_stream


def stream_order_tensor(streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`stream_order` on a tensor, on its device."""
    order = torch.sort(streams, stable=True).indices
    s_sorted = streams[order]
    last_of_stream = torch.ones(streams.shape[0], dtype=torch.bool, device=streams.device)
    last_of_stream[:-1] = s_sorted[1:] != s_sorted[:-1]
    return order, last_of_stream


def reverse_scan(acc: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Solve ``x_i = acc_i + factor_i * x_{i+1}`` (``x_n = 0``) by a parallel (doubling) scan.

    After round k every position holds the sum over the next ``2^k`` rows and the product of
    their factors, so ``log2(n)`` rounds of a few vector operations replace ``n`` sequential
    steps (no host loop over rows, no transfer). Products of factors ``<= 1`` only shrink, so
    the scan is as stable as the loop (V-trace's factors are ``gamma * lambda * min(c_clip,
    ratio)``: ``<= 1`` for ``c_clip <= 1/(gamma lambda)``).
    """
    n = acc.shape[0]
    shift = 1
    while shift < n:
        new_acc = acc.clone()
        new_acc[:-shift].addcmul_(factor[:-shift], acc[shift:])
        new_factor = factor.clone()
        new_factor[:-shift].mul_(factor[shift:])
        acc, factor = new_acc, new_factor
        shift *= 2
    return acc


def compute_vtrace(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray,
                   terminated: np.ndarray, truncated: np.ndarray, streams: np.ndarray,
                   log_ratios: np.ndarray, gamma: float, lam: float, rho_clip: float = 1.0,
                   c_clip: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """V-trace of rows in time order within each stream (streams interleaved in any way).

    ``log_ratios`` is ``log pi(a|x) - log mu(a|x)`` per row. Returns float32
    ``(value_advantages, policy_advantages)``: ``A_s = v_s - V(x_s)`` (add ``values`` for the
    value targets) and ``P_s`` (not multiplied by ``rho_s``), in the rows' order.
    """
    n = len(rewards)
    delta, done = td_errors(rewards, values, next_values, terminated, truncated, gamma)
    ratio = np.exp(np.asarray(log_ratios, dtype=np.float64))
    order, last_of_stream = stream_order(streams)
    open_ = (1.0 - done[order]) * ~last_of_stream  # 1 where the stream goes on at the next row
    cont = (gamma * lam * np.minimum(c_clip, ratio[order]) * open_).tolist()
    pg_cont = (gamma * lam * open_).tolist()
    weighted = (np.minimum(rho_clip, ratio[order]) * delta[order]).tolist()
    delta_sorted = delta[order].tolist()
    value_adv, policy_adv = [0.0] * n, [0.0] * n
    running = 0.0  # A_{i+1}
    for i in range(n - 1, -1, -1):
        policy_adv[i] = delta_sorted[i] + pg_cont[i] * running
        running = weighted[i] + cont[i] * running
        value_adv[i] = running
    out_value, out_policy = np.empty(n, dtype=np.float32), np.empty(n, dtype=np.float32)
    out_value[order] = value_adv
    out_policy[order] = policy_adv
    return out_value, out_policy


def vtrace_tensor(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
                  terminated: torch.Tensor, truncated: torch.Tensor, streams: torch.Tensor,
                  log_ratios: torch.Tensor, gamma: float, lam: float, rho_clip: float = 1.0,
                  c_clip: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`compute_vtrace` on tensors, on their device (float64 inside, float32 out)."""
    n = rewards.shape[0]
    delta, done = td_errors_tensor(rewards, values, next_values, terminated, truncated, gamma)
    ratio = log_ratios.to(torch.float64).exp()
    order, last_of_stream = stream_order_tensor(streams)
    open_ = (1.0 - done[order]) * (~last_of_stream).to(torch.float64)
    ratio_sorted = ratio[order]
    delta_sorted = delta[order]
    value_adv = reverse_scan(ratio_sorted.clamp(max=rho_clip) * delta_sorted,
                             gamma * lam * ratio_sorted.clamp(max=c_clip) * open_)
    following = torch.zeros_like(value_adv)  # A_{i+1} (0 past a stream's end: open_ is 0 there)
    following[:-1] = value_adv[1:]
    policy_adv = delta_sorted + gamma * lam * open_ * following
    out_value = torch.empty(n, dtype=torch.float32, device=rewards.device)
    out_policy = torch.empty(n, dtype=torch.float32, device=rewards.device)
    out_value[order] = value_adv.to(torch.float32)
    out_policy[order] = policy_adv.to(torch.float32)
    return out_value, out_policy
