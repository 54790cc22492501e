"""Adam on one flat CPU tensor, without ``torch.optim`` (:class:`FlatAdam`).

``torch.optim.Adam`` is the optimizer everywhere a learner's storage is on an accelerator. On the
CPU a learner steps :class:`FlatAdam` instead: the same arithmetic as ``torch.optim.Adam``'s
single-tensor CPU path (so the same numbers, bit for bit) and the same ``state_dict`` layout (so a
checkpoint written on either loads on the other), but building it costs nothing. Constructing any
``torch.optim`` optimizer imports ``torch._dynamo`` (its methods are wrapped to be skipped by the
compiler), about a second of CPU in every learner process - a quarter of a small job's start-up.
"""

from __future__ import annotations

from typing import Any

import torch

#: the options ``torch.optim.Adam`` writes into its one parameter group, as this optimizer uses
#: them (no weight decay, no AMSGrad, not maximising): a saved state names them all
GROUP_OPTIONS = {"weight_decay": 0, "amsgrad": False, "maximize": False, "foreach": None,
                 "capturable": False, "differentiable": False, "fused": None,
                 "decoupled_weight_decay": False}


class FlatAdam:
    """Adam over ONE CPU tensor whose ``.grad`` is its gradient (a :class:`FlatParams` buffer).

    The attributes a caller of ``torch.optim.Adam`` reads are the same: :attr:`param_groups`
    (one group: ``lr``, ``betas``, ``eps``, ...), :attr:`state` (keyed by the tensor:
    ``step``, ``exp_avg``, ``exp_avg_sq``, created by the first :meth:`step`), :meth:`step`,
    :meth:`state_dict` and :meth:`load_state_dict`.
    """

    def __init__(self, param: torch.Tensor, lr: float, eps: float = 1e-8,
                 betas: tuple[float, float] = (0.9, 0.999)) -> None:
        if param.device.type != "cpu":
            raise ValueError(f"FlatAdam steps a CPU tensor, not one on {param.device}")
        self.param = param
        self.param_groups: list[dict[str, Any]] = [
            {"lr": float(lr), "betas": tuple(betas), "eps": float(eps), **GROUP_OPTIONS,
             "params": [param]}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step with ``param.grad`` (``torch.optim.Adam``'s CPU arithmetic, in order)."""
        group = self.param_groups[0]
        param, grad = self.param, self.param.grad
        state = self.state.get(param)
        if state is None:
            state = self.state[param] = {"step": torch.tensor(0.0),
                                         "exp_avg": torch.zeros_like(param),
                                         "exp_avg_sq": torch.zeros_like(param)}
        beta1, beta2 = group["betas"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        state["step"] += 1
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = state["step"].item()
        step_size = group["lr"] / (1 - beta1**step)
        denom = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(group["eps"])
        param.addcdiv_(exp_avg, denom, value=-step_size)

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam.state_dict()``'s layout: the state under index 0, the group's
        options with ``params: [0]`` (the tensors themselves, not copies)."""
        group = {key: value for key, value in self.param_groups[0].items() if key != "params"}
        state = self.state.get(self.param)
        return {"state": {} if state is None else {0: dict(state)},
                "param_groups": [{**group, "params": [0]}]}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Load a state from :meth:`state_dict` or from ``torch.optim.Adam`` of one tensor (saved on
        any device; a device tensor's ``lr`` or ``step`` becomes a CPU value)."""
        groups = saved["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != 1:
            raise ValueError(f"an optimizer state of one tensor was expected, not {len(groups)} "
                             f"group(s) of {[len(g['params']) for g in groups]} tensors")
        options = {key: value for key, value in groups[0].items() if key != "params"}
        if isinstance(options.get("lr"), torch.Tensor):
            options["lr"] = float(options["lr"].item())
        options["betas"] = tuple(float(b) for b in options["betas"])
        self.param_groups[0].update(options, capturable=False, fused=None)
        self.state.clear()
        state = saved["state"].get(groups[0]["params"][0])
        if state:
            self.state[self.param] = {
                "step": state["step"].detach().to("cpu", torch.float32).reshape(()).clone(),
                "exp_avg": state["exp_avg"].detach().to("cpu").clone(),
                "exp_avg_sq": state["exp_avg_sq"].detach().to("cpu").clone()}
