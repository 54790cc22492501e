"""The gradient of a loss that can be written over a network's flat parameter buffer:
:class:`LossGradient`.

DQN's and TD3's losses are functions ``loss_fn(params, *inputs) -> (loss, metrics)``, where
``params`` is ``None`` (the network's own parameters, which are views into its flat buffer) or a
dict of views into a flat tensor (:meth:`~drlmpi.algos.params.FlatParams.views`, evaluated through
:func:`torch.func.functional_call`: :func:`forward`). Two ways to take the gradient:

* eager: ``loss_fn(None, ...)`` and backward into the group's flat gradient buffer
  (:meth:`~drlmpi.algos.params.ParamGroup.backward`);
* ``fused`` (``algo.capture=fused``): ``torch.compile`` (inductor) of
  ``torch.func.grad`` of the loss over the flat buffer: forward and backward become one generated
  program whose elementwise work (biases, activations and their masks in the backward, the loss,
  the target) is fused into few kernels around the matrix products, and whose gradient is ONE
  flat tensor copied into the flat gradient buffer (no zeroing, no per-parameter accumulation).
  The captured update records these kernels in its CUDA graph (``fused`` captures as ``graph``
  does). Compiling happens at the first call (an eager warm-up call of the capture); if it fails,
  one warning, and the same functional gradient runs uncompiled: a failed compile never ends a run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from drlmpi.algos.params import ParamGroup
from drlmpi.device.compiled import Compiled

LossFn = Callable[..., tuple[torch.Tensor, tuple[torch.Tensor, ...]]]


def forward(module: torch.nn.Module, params: Mapping[str, torch.Tensor] | None, *args: Any,
            **kwargs: Any) -> Any:
    """``module(*args, **kwargs)`` with its own parameters (``params`` ``None``) or with
    ``params`` in their place."""
    if params is None:
        return module(*args, **kwargs)
    return torch.func.functional_call(module, params, args, kwargs)


#: the modules :func:`paired_forward` runs: linear layers and parameter-free elementwise activations
PAIRED_ACTIVATIONS = (torch.nn.ReLU, torch.nn.Tanh, torch.nn.ELU, torch.nn.LeakyReLU, torch.nn.SiLU,
                      torch.nn.GELU, torch.nn.Identity)


def pairable(module: torch.nn.Module) -> bool:
    """Whether :func:`paired_forward` can run ``module``: an ``nn.Sequential`` of ``nn.Linear``
    layers and elementwise activations (a plain MLP, :func:`~drlmpi.algos.params.mlp`)."""
    return isinstance(module, torch.nn.Sequential) and all(
        isinstance(m, (torch.nn.Linear, *PAIRED_ACTIVATIONS)) for m in module)


def paired_forward(module: torch.nn.Module, first: Mapping[str, torch.Tensor],
                   second: Mapping[str, torch.Tensor], x: torch.Tensor,
                   x_second: torch.Tensor | None = None) -> torch.Tensor:
    """``module`` (:func:`pairable`) with two parameter sets at once: ``out[0]`` is ``module(x)``
    with ``first``, ``out[1]`` ``module(x_second)`` (default ``x``) with ``second`` (both sets map
    the module's parameter names to tensors; both inputs have one shape): each parameter pair
    stacked, then :func:`stacked_forward`. Gradients flow to whichever set requires them."""
    return stacked_forward(module, {name: torch.stack((first[name], second[name])) for name in first},
                           x, x_second)


def stacked_forward(module: torch.nn.Module, stacked: Mapping[str, torch.Tensor], x: torch.Tensor,
                    x_second: torch.Tensor | None = None) -> torch.Tensor:
    """``module`` (:func:`pairable`) with two parameter sets given stacked: ``stacked`` maps each
    parameter name to a ``[2, *shape]`` tensor; ``out[0]`` is ``module(x)`` with the first set,
    ``out[1]`` ``module(x_second)`` (default ``x``) with the second.

    Each linear layer is ONE batched matrix product over the two sets' weights, so an online
    and a target network cost a GPU the kernels of one network: at the batch sizes of an
    off-policy update a matrix product's time is its launch and tiling, not its arithmetic.
    Views of one ``[2, numel]`` stack of two flat buffers (:meth:`~drlmpi.algos.params.FlatParams.views`)
    need no copy per layer: :class:`LossGradient` with ``pair_with`` passes those."""
    if x_second is None:
        h = x.unsqueeze(0).expand(2, *x.shape).contiguous()  # a batched product copies a broadcast input
    else:
        h = torch.stack((x, x_second))
    for index, layer in enumerate(module):
        if not isinstance(layer, torch.nn.Linear):
            h = layer(h)
            continue
        weights = stacked[f"{index}.weight"].transpose(1, 2)
        if layer.bias is None:
            h = torch.bmm(h, weights)
        else:
            h = torch.baddbmm(stacked[f"{index}.bias"].unsqueeze(1), h, weights)
    return h


class LossGradient:
    """``d loss_fn / d params`` of ``group``, written into ``group.flat.grads``.

    Args:
        group: the network whose flat parameters the loss differentiates.
        loss_fn: ``loss_fn(params, *inputs) -> (loss, metrics)``; ``params`` is ``None`` or maps
            each parameter name of ``group.module`` to a view into a flat tensor (:func:`forward`
            takes either); ``metrics`` is a tuple of detached tensors returned alongside.
        name: shown in the warning if compiling fails.
        pair_with: a second flat buffer laid out as the group's (its target network's): the
            fused gradient then passes ``loss_fn`` views of both buffers stacked, each
            ``[2, *shape]`` (the group's set first; :func:`stacked_forward` runs them), made by
            ONE stacking of the two buffers where stacking each parameter pair costs a kernel
            apiece. Only the group's set is differentiated. The eager gradient passes ``None``
            as ever.

    Calling it with the inputs returns ``(loss.detach(), *metrics)``: by backward through the
    network, or after :meth:`fuse` as the compiled ``torch.func.grad`` of the loss over the flat
    buffer.
    """

    def __init__(self, group: ParamGroup, loss_fn: LossFn, name: str,
                 pair_with: torch.Tensor | None = None) -> None:
        self.group, self.loss_fn, self.name, self.pair_with = group, loss_fn, name, pair_with
        self.program: Compiled | None = None

    def fuse(self, compiler: Callable[..., Any] = torch.compile) -> None:
        """Take later gradients functionally, compiled by ``compiler`` (uncompiled, after one
        warning, if compiling fails: :class:`~drlmpi.device.compiled.Compiled`)."""
        self.program = Compiled(torch.func.grad(self._flat_loss, has_aux=True), f"{self.name} gradient",
                                compiler)

    def _flat_loss(self, flat: torch.Tensor, *inputs: Any) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        both = flat if self.pair_with is None else torch.stack((flat, self.pair_with))
        loss, metrics = self.loss_fn(self.group.flat.views(both), *inputs)
        return loss, (loss.detach(), *metrics)

    @property
    def fused(self) -> bool:
        """Whether gradients are the functional ones (compiled, unless compiling failed)."""
        return self.program is not None

    def __call__(self, *inputs: Any) -> tuple[torch.Tensor, ...]:
        if self.program is not None:
            grads, metrics = self.program(self.group.flat.params, *inputs)
            self.group.flat.grads.copy_(grads)
            return metrics
        loss, metrics = self.loss_fn(None, *inputs)
        self.group.backward(loss)
        return (loss.detach(), *metrics)
