"""Observation encoders: what turns an observation into features for an algorithm's heads.

``algo.encoder``:

* ``mlp`` - the observation flattened (uint8 images scaled to ``[0, 1]``) into the MLP trunk
  given by ``algo.hidden``;
* ``cnn`` - the Nature-DQN convolution stack (Mnih et al. 2015: 32 8x8 filters stride 4, 64 4x4
  stride 2, 64 3x3 stride 1, ReLU) on ``(C, H, W)`` images scaled to ``[0, 1]``, flattened into
  the ``algo.hidden`` fully connected layers (``[512]`` in the Atari configs). It needs images
  of at least 36x36;
* ``impala`` - the residual stack of IMPALA (Espeholt et al. 2018): three stages of 16, 32 and
  32 channels, each a 3x3 convolution, a 3x3 max-pool of stride 2 and two residual blocks
  (ReLU, 3x3 convolution, ReLU, 3x3 convolution, plus the block's input), then ReLU and the
  ``algo.hidden`` layers (``[256]`` in its setups). About 6x the Nature stack's multiply-adds
  per 84x84 frame (54M against 9M), for more learning per sample on Atari;
* ``auto`` (default) - ``cnn`` for images of at least 36x36, ``mlp`` otherwise.

Images reach the networks as uint8 (acting: the simulator's observations; learning: the packed
byte columns of :class:`~drlmpi.data.layout.ExperienceLayout`, unpacked by :class:`ImageInput`), and
are converted to float on the network's device, inside the forward pass (so inside a captured
update too). Flat vector observations pass through unchanged: their networks are exactly the
plain MLPs (same parameters and state-dict keys as before encoders existed).
"""

from __future__ import annotations

import torch
from torch import nn

from drlmpi.algos.params import mlp
from drlmpi.config.errors import ConfigError
from drlmpi.data.layout import ExperienceLayout, unpack_obs
from drlmpi.envs.spec import EnvSpec

CNN_MIN_SIZE = 36  # the smallest square image the Nature stack's three convolutions take


def image_chw(shape: tuple[int, ...]) -> tuple[int, int, int, bool]:
    """``(C, H, W, channels_last)`` of an image observation shape: ``(H, W)`` is one channel;
    ``(H, W, C)`` when the last axis has at most 4 entries and the first more (RGB/RGBA, a
    short frame stack last), ``(C, H, W)`` otherwise."""
    if len(shape) == 2:
        return 1, shape[0], shape[1], False
    if shape[-1] <= 4 < shape[0]:
        return shape[2], shape[0], shape[1], True
    return shape[0], shape[1], shape[2], False


def resolve_encoder(spec: EnvSpec, choice: str, algo_name: str) -> str:
    """The encoder ``choice`` (``algo.encoder``: auto, mlp, cnn or impala) means for ``spec``
    (``auto`` resolved); refuses in one line a convolution stack for flat observations or for
    images smaller than the stack takes."""
    if not spec.image:
        if choice in CONV_STACKS:
            raise ConfigError(f"algo={algo_name} algo.encoder={choice} needs image observations, but "
                              f"{spec.env_id} has a {spec.describe_obs()}: use algo.encoder=mlp (or auto)")
        return "mlp"
    _, h, w, _ = image_chw(spec.obs_shape)
    big_enough = min(h, w) >= CNN_MIN_SIZE
    if choice in CONV_STACKS and not big_enough:
        raise ConfigError(f"algo={algo_name} algo.encoder={choice} needs images of at least "
                          f"{CNN_MIN_SIZE}x{CNN_MIN_SIZE}, but {spec.env_id} has an {spec.describe_obs()}: "
                          f"use algo.encoder=mlp")
    if choice == "auto":
        return "cnn" if big_enough else "mlp"
    return choice


class ImageInput(nn.Module):
    """uint8 images, or their packed byte columns (float32 slots), to float ``[0, 1]`` on the
    module's device: ``(B, C, H, W)``, or ``(B, C*H*W)`` with ``flatten``. ``nhwc``: the images
    laid out channels-last in memory (``torch.channels_last``; the same values and shape), so the
    convolutions after it run on cuDNN's NHWC kernels - the layout its tensor-core kernels take.
    The bytes are rearranged before the conversion to float (a quarter of the memory traffic)."""

    def __init__(self, layout: ExperienceLayout, flatten: bool, nhwc: bool = False) -> None:
        super().__init__()
        self.layout = layout
        self.flatten = flatten
        self.nhwc = nhwc
        self.chw = image_chw(layout.obs_shape)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.dtype == torch.float32 and obs.dim() == 2 and obs.shape[1] == self.layout.obs_slots:
            obs = unpack_obs(obs, self.layout)  # the packed columns of stored rows
        if self.flatten:
            return (obs.to(torch.float32) * (1.0 / 255.0)).reshape(obs.shape[0], -1)
        c, h, w, stored_hwc = self.chw
        images = obs.permute(0, 3, 1, 2) if stored_hwc else obs.reshape(obs.shape[0], c, h, w)
        if self.nhwc:
            images = images.contiguous(memory_format=torch.channels_last)
        return images.to(torch.float32) * (1.0 / 255.0)


def nature_cnn(channels: int) -> nn.Sequential:
    """The Nature-DQN convolution stack (flattened output)."""
    return nn.Sequential(
        nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        nn.Flatten(),
    )


class ResidualBlock(nn.Module):
    """IMPALA's residual block: ``x + conv(relu(conv(relu(x))))``, 3x3 convolutions that keep
    the channels and the size."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def impala_cnn(channels: int, stages: tuple[int, ...] = (16, 32, 32)) -> nn.Sequential:
    """IMPALA's residual convolution stack (flattened output, after a final ReLU)."""
    layers: list[nn.Module] = []
    for out in stages:
        layers += [nn.Conv2d(channels, out, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1),
                   ResidualBlock(out), ResidualBlock(out)]
        channels = out
    return nn.Sequential(*layers, nn.ReLU(), nn.Flatten())


#: the encoders that are convolution stacks (they need images), each its maker
CONV_STACKS = {"cnn": nature_cnn, "impala": impala_cnn}


def conv_features(channels: int, h: int, w: int, kind: str = "cnn") -> int:
    """Output width of the convolution stack ``kind`` on ``(channels, h, w)`` images."""
    with torch.no_grad():
        return int(CONV_STACKS[kind](channels)(torch.zeros(1, channels, h, w)).shape[1])


def encoder(spec: EnvSpec, layout: ExperienceLayout, kind: str,
            nhwc: bool = False) -> tuple[nn.Module | None, int]:
    """The module mapping observations to features, and its output width: ``None`` and
    ``obs_dim`` for flat vectors (the trunk takes them as they are); ``nhwc``: a convolution
    stack's activations channels-last (:class:`ImageInput`)."""
    if not spec.image:
        return None, spec.obs_dim
    if kind == "mlp":
        return ImageInput(layout, flatten=True), spec.obs_dim
    c, h, w, _ = image_chw(spec.obs_shape)
    stack = nn.Sequential(ImageInput(layout, flatten=False, nhwc=nhwc), CONV_STACKS[kind](c))
    return stack, conv_features(c, h, w, kind)


def network(spec: EnvSpec, layout: ExperienceLayout, kind: str, out_dim: int, hidden: tuple[int, ...],
            activation: type[nn.Module] = nn.ReLU,
            out_activation: type[nn.Module] | None = None) -> nn.Module:
    """The encoder followed by an MLP ``features -> hidden... -> out_dim``; the plain MLP for
    flat observations."""
    enc, features = encoder(spec, layout, kind)
    head = mlp(features, out_dim, hidden, activation, out_activation)
    return head if enc is None else nn.Sequential(enc, head)
