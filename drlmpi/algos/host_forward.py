"""Acting on a simulator's core without torch's per-call cost: a plain MLP's forward pass in numpy.

A simulator acts once a step on a handful of observations. For DQN's and TD3's 256x256 MLPs
torch spends most of such a call in its dispatcher (tensor wrapping, three ``linear`` calls, the
copy back: ~75 us on a 2-core development machine, several times that on a loaded 16-rank
host), while the arithmetic is a few microseconds. :class:`HostMLP` runs the same layers with
numpy on views of the network's own parameters - which live in the algorithm's flat buffer
(:class:`~drlmpi.algos.params.FlatParams`), so weights received into that buffer are what the
next call uses, no copy.

It is used for calls of at most :data:`MAX_HOST_ROWS` observations. Only what it can run
exactly as torch does is taken: a CPU ``nn.Sequential`` of float32
``Linear`` layers each followed by nothing, ``ReLU`` or ``Tanh``. Anything else (a GPU network,
an image encoder, a custom module) gets ``None`` from :meth:`HostMLP.of` and the algorithm acts
through torch. The two agree to float32 rounding (different summation order); a job acts with
one or the other throughout, so runs repeat exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


def _tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x, out=x)


#: the most observations a call acts on in numpy: OpenBLAS's single-thread products of 8 rows by
#: 256x256 take about as long as torch's whole call (``python -m drlmpi.bench.act --envs 8`` on an
#: H200 host: 1.02-1.16x), of 1-4 a third to a half of it (2.05-3.77x;
#: docs/results/h200host_numpy_act/); larger batches act through torch
MAX_HOST_ROWS = 4

Activation = Callable[[np.ndarray], np.ndarray]
ACTIVATIONS: dict[type[nn.Module], Activation] = {nn.ReLU: _relu, nn.Tanh: _tanh}


class HostMLP:
    """``x -> activation(x @ W.T + b)`` layer by layer, on numpy views of the layers' parameters."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray, Activation | None]]) -> None:
        self.layers = layers

    @classmethod
    def of(cls, net: nn.Module) -> HostMLP | None:
        """The numpy twin of ``net``, or ``None`` if ``net`` is not a plain float32 MLP on the
        CPU (see the module docstring)."""
        if not isinstance(net, nn.Sequential):
            return None
        layers: list = []
        for module in net:
            if isinstance(module, nn.Linear):
                w, b = module.weight, module.bias
                if b is None or w.device.type != "cpu" or w.dtype != torch.float32:
                    return None
                layers.append([w.detach().numpy(), b.detach().numpy(), None])
            elif type(module) in ACTIVATIONS and layers and layers[-1][2] is None:
                layers[-1][2] = ACTIVATIONS[type(module)]
            else:
                return None
        return cls([tuple(layer) for layer in layers]) if layers else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The network's output for the float32 batch ``x`` ``(n, in_features)``."""
        h = np.asarray(x, dtype=np.float32)
        for w, b, activation in self.layers:
            h = h @ w.T
            h += b
            if activation is not None:
                h = activation(h)
        return h
