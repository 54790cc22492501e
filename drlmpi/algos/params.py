"""A network's parameters in flat buffers: :class:`FlatParams` (parameters and gradients in ONE
contiguous float32 buffer each, so a weight broadcast or a gradient all-reduce is one message
that writes straight into the model), :class:`ParamGroup` (a network with its optimizer over
that buffer), frozen flat target networks and plain MLPs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from drlmpi.algos.adam import FlatAdam
from drlmpi.device.compiled import Compiled


class ParamGroup:
    """One network with its optimizer; parameters and gradients live in flat buffers.

    Args:
        module: the network (its parameters are re-seated into :attr:`flat`).
        lr: Adam learning rate.
        max_grad_norm: clip the global gradient norm to this before stepping (``None``: no clip).
        adam_eps: Adam's epsilon.
        with_optimizer: ``False`` on ranks that only act (no optimizer state is allocated).
        scheduled_lr: the learning rate will change during the run (:meth:`set_lr`). On CUDA it
            is then a device tensor the fused optimizer reads, so a captured step follows the
            schedule (a float would be baked into the graph at capture).

    On CUDA the optimizer is ``torch.optim.Adam`` built with ``capturable=True`` (its step counter
    lives on the device), so the same optimizer state serves eager updates and captured ones; on
    the CPU it is :class:`~drlmpi.algos.adam.FlatAdam` (the same numbers and state layout).
    """

    def __init__(self, module: nn.Module, lr: float, max_grad_norm: float | None = None,
                 adam_eps: float = 1e-8, with_optimizer: bool = True,
                 scheduled_lr: bool = False) -> None:
        self.module = module
        self.flat = FlatParams(module)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self.optimizer = None
        self._fused_step: Compiled | None = None
        #: the learning rate now, on the host (what logs read: no device synchronisation)
        self.lr_value = float(lr)
        self._lr_tensor: torch.Tensor | None = None
        #: the gradient norm before clipping of the latest step, a device scalar written in
        #: place by :meth:`apply_gradients` (so a captured update writes it too); ``None`` when
        #: the group does not clip (the norm is then never computed).
        self.grad_norm: torch.Tensor | None = None
        if with_optimizer:
            # The optimizer sees ONE tensor, the flat buffer (whose .grad is the flat gradient
            # buffer): Adam's update is then a handful of vector operations over the whole
            # network instead of a loop over its parameter tensors.
            # On the CPU it is FlatAdam: torch.optim.Adam's arithmetic and state layout, without
            # the second of start-up that building a torch.optim optimizer costs a process.
            self.flat.params.grad = self.flat.grads
            if self.flat.params.device.type == "cpu":
                self.optimizer = FlatAdam(self.flat.params, lr=float(lr), eps=float(adam_eps))
            else:
                extra = {"capturable": True, "fused": True} if self.flat.params.is_cuda else {}
                rate: float | torch.Tensor = float(lr)
                if scheduled_lr and self.flat.params.is_cuda:
                    rate = self._lr_tensor = torch.tensor(float(lr), device=self.flat.params.device)
                self.optimizer = torch.optim.Adam([self.flat.params], lr=rate, eps=float(adam_eps), **extra)
            if self.max_grad_norm is not None:
                self.grad_norm = torch.full((), float("nan"), device=self.flat.params.device)

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of later steps (into the device tensor a captured step reads,
        when there is one)."""
        self.lr_value = float(lr)
        if self.optimizer is None:
            return
        if self._lr_tensor is not None:
            self._lr_tensor.fill_(self.lr_value)
        else:
            self.optimizer.param_groups[0]["lr"] = self.lr_value

    def load_optimizer_state(self, state: dict) -> None:
        """Load an optimizer state (from :meth:`torch.optim.Optimizer.state_dict`, saved on any
        device) keeping this group's learning-rate tensor, filled with the saved rate."""
        self.optimizer.load_state_dict(state)
        saved = self.optimizer.param_groups[0]["lr"]
        self.lr_value = float(saved.item() if isinstance(saved, torch.Tensor) else saved)
        if self._lr_tensor is not None:
            self.optimizer.param_groups[0]["lr"] = self._lr_tensor
        self.set_lr(self.lr_value)

    def backward(self, loss: torch.Tensor) -> None:
        """Zero the flat gradients and backpropagate ``loss`` into them (into this network's
        parameters only: a loss through another network, TD3's actor loss through its critic,
        leaves that network's gradients alone)."""
        self.flat.zero_grad()
        loss.backward(inputs=self.flat.leaves)

    def fuse(self, compiler: Callable[..., Any] = torch.compile) -> None:
        """Take later steps as ONE compiled program (``algo.capture=fused``): :func:`clip_adam`
        on the optimizer's own state, so eager steps, checkpoints and compiled steps share it
        (the first step runs the optimizer itself, which creates that state)."""
        if self.optimizer is not None:
            self._fused_step = Compiled(clip_adam, "optimizer step", compiler)

    def warm_up(self) -> None:
        """Compile the fused step now (after :meth:`fuse`) on scratch copies of the tensors it
        writes, shaped as the optimizer's state will be."""
        if self._fused_step is None:
            return
        flat, options = self.flat, self.optimizer.param_groups[0]
        scratch = [flat.params.clone(), flat.grads.clone(), torch.zeros_like(flat.params),
                   torch.zeros_like(flat.params), torch.zeros((), device=flat.params.device)]
        norm = None if self.grad_norm is None else self.grad_norm.clone()
        self._fused_step(*scratch, options["lr"], options["betas"], options["eps"], norm, self.max_grad_norm)

    def apply_gradients(self) -> None:
        """Clip (if configured) and take one optimizer step with the current gradients.

        Clipping is branch-free, ``grads *= min(1, max_norm / (norm + 1e-6))``: no host
        synchronisation on a device (and exactly the old ``if scale < 1`` result). The norm is
        computed into :attr:`grad_norm` (``out=``: no extra kernel, and captured with the step).
        After :meth:`fuse`, both are one compiled program."""
        if self.optimizer is None:
            raise RuntimeError("this ParamGroup was built without an optimizer (acting only)")
        if self._fused_step is not None and self.optimizer.state:
            state = self.optimizer.state[self.flat.params]
            options = self.optimizer.param_groups[0]
            self._fused_step(self.flat.params, self.flat.grads, state["exp_avg"], state["exp_avg_sq"],
                             state["step"], options["lr"], options["betas"], options["eps"],
                             self.grad_norm, self.max_grad_norm)
            return
        if self.max_grad_norm is not None:
            grads = self.flat.grads
            norm = torch.linalg.vector_norm(grads, out=self.grad_norm)
            grads.mul_((self.max_grad_norm / (norm + 1e-6)).clamp_(max=1.0))
        self.optimizer.step()


def clip_adam(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
              step: torch.Tensor, lr: float | torch.Tensor, betas: tuple[float, float], eps: float,
              norm_out: torch.Tensor | None, max_norm: float | None) -> None:
    """Gradient clipping (as :meth:`ParamGroup.apply_gradients`) and one Adam step (as
    ``torch.optim.Adam``: no weight decay, no AMSGrad) on flat tensors, in place: written for
    inductor, which compiles it into a norm reduction and one elementwise kernel."""
    if max_norm is not None:
        norm = torch.linalg.vector_norm(grad)
        norm_out.copy_(norm)
        grad.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
    beta1, beta2 = betas
    step.add_(1)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias_correction1 = 1 - beta1**step
    bias_correction2_sqrt = (1 - beta2**step).sqrt()
    denom = exp_avg_sq.sqrt() / bias_correction2_sqrt + eps
    param.sub_(lr / bias_correction1 * exp_avg / denom)


def under(named: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The entries of ``named`` whose keys start with ``prefix.``, keyed by the rest: a
    submodule's parameters or saved tensors out of its parent's (``under(state, "q_target")``)."""
    start = f"{prefix}."
    return {key[len(start):]: value for key, value in named.items() if key.startswith(start)}


def flat_target(module: nn.Module) -> tuple[nn.Module, torch.Tensor]:
    """A frozen copy of ``module`` (a target network) whose parameters are views into one flat
    buffer, returned with it: a hard copy is then ``flat.copy_(online)`` and a Polyak step
    ``flat.lerp_(online, tau)``, one kernel each, in the online :class:`FlatParams` order."""
    target = copy.deepcopy(module)
    params = [p for p in target.parameters() if p.requires_grad]
    flat = torch.cat([p.detach().reshape(-1) for p in params]) if params else torch.zeros(0)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    target.requires_grad_(False)
    return target, flat


def mlp(in_dim: int, out_dim: int, hidden: tuple[int, ...], activation: type[nn.Module] = nn.ReLU,
        out_activation: type[nn.Module] | None = None) -> nn.Sequential:
    """A plain multilayer perceptron ``in_dim -> hidden... -> out_dim``."""
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layers += [nn.Linear(last, width), activation()]
        last = width
    layers.append(nn.Linear(last, out_dim))
    if out_activation is not None:
        layers.append(out_activation())
    return nn.Sequential(*layers)


class FlatParams:
    """A module's parameters re-seated as views into one contiguous float32 buffer.

    After construction ``p.data`` of every parameter is a view into :attr:`params` and
    ``p.grad`` a view into :attr:`grads`, so writing into :attr:`params` (an MPI receive)
    updates the model and one collective on :attr:`grads` reduces every gradient at once.
    Build the optimizer *after* this, or at least do not rely on ``p.data`` identity before.
    """

    def __init__(self, module: nn.Module) -> None:
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        params = [p for _, p in named]
        device = params[0].device if params else torch.device("cpu")
        total = sum(p.numel() for p in params)
        #: ``(name, shape, offset)`` of each parameter in the buffer (:meth:`views`)
        self.layout: list[tuple[str, torch.Size, int]] = []
        self.params = torch.zeros(total, dtype=torch.float32, device=device)
        self.grads = torch.zeros(total, dtype=torch.float32, device=device)
        offset = 0
        for name, p in named:
            n = p.numel()
            self.layout.append((name, p.shape, offset))
            self.params[offset : offset + n].copy_(p.data.reshape(-1))
            p.data = self.params[offset : offset + n].view_as(p)
            p.grad = self.grads[offset : offset + n].view_as(p)
            offset += n
        self.numel = total
        #: the module's parameters (the autograd leaves whose gradients are views of :attr:`grads`)
        self.leaves = params
        self._host: dict[str, torch.Tensor] = {}  # pinned host mirrors (device buffers only)

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each parameter as a view into ``flat`` (a tensor laid out as :attr:`params`), keyed by
        its name in the module: what :func:`torch.func.functional_call` takes, so a loss written
        over ``flat`` differentiates into one flat gradient. Leading dimensions are kept: views
        of a ``[2, numel]`` pair of buffers are ``[2, *shape]`` (the two parameter sets that
        :func:`~drlmpi.algos.gradients.stacked_forward` runs at once)."""
        lead = flat.shape[:-1]
        return {name: flat[..., offset : offset + shape.numel()].view(*lead, *shape)
                for name, shape, offset in self.layout}

    def _to_host(self, name: str, tensor: torch.Tensor) -> np.ndarray:
        """One device-to-host copy of ``tensor`` into a preallocated pinned buffer, returned as
        numpy (the same array every call: read or copy it before the next call)."""
        host = self._host.get(name)
        if host is None:
            host = self._host[name] = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor.detach())  # blocking: the values are there when this returns
        return host.numpy()

    def zero_grad(self) -> None:
        """Zero the flat gradient buffer (keeps the views; never sets ``p.grad = None``)."""
        self.grads.zero_()

    def params_numpy(self) -> np.ndarray:
        """The parameters as a float32 numpy array: a view on the CPU; from an accelerator, one
        copy into a preallocated pinned host buffer (reused by every call, no allocation)."""
        if self.params.device.type == "cpu":
            return self.params.numpy()
        return self._to_host("params", self.params)

    def grads_numpy(self) -> np.ndarray:
        """The gradients as a float32 numpy array: a view on the CPU; from an accelerator, one
        copy into a preallocated pinned host buffer (reused by every call)."""
        if self.grads.device.type == "cpu":
            return self.grads.numpy()
        return self._to_host("grads", self.grads)

    def load_params(self, flat: np.ndarray) -> None:
        """Copy a flat float32 array into the parameters (no-op when it is already the view)."""
        if self.params.device.type == "cpu" and np.shares_memory(flat, self.params.numpy()):
            return
        with torch.no_grad():
            self.params.copy_(torch.from_numpy(np.ascontiguousarray(flat)))

    def load_grads(self, flat: np.ndarray) -> None:
        """Copy a flat float32 array into the gradient buffer (no-op when it is the view)."""
        if self.grads.device.type == "cpu" and np.shares_memory(flat, self.grads.numpy()):
            return
        self.grads.copy_(torch.from_numpy(np.ascontiguousarray(flat)))

    def checksum(self) -> float:
        """A cheap fingerprint of the parameters (float64 sum of values and of squares)."""
        p = self.params.detach().double()
        return float(p.sum() + (p * p).sum())
