"""The torsos a network's heads sit on: the MLP, the MinAtar CNN and the Nature-DQN CNN;
``resolve_torso`` picks one for an observation shape."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_async.networks.conv import Conv, scale_frames
from jaxrl_async.networks.initializers import orthogonal

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


class MLP(nn.Module):
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    layer_norm: bool = False  # Dense -> LayerNorm -> activation (PQN)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for size in self.hidden_sizes:
            x = nn.Dense(size, kernel_init=orthogonal())(x)
            x = ACTIVATIONS[self.activation](nn.LayerNorm()(x) if self.layer_norm else x)
        return x


class MinAtarCNN(nn.Module):
    """The MinAtar paper's torso: one 3x3 conv with 16 channels, then dense layers. The conv is
    ``conv.Conv`` (the parameters of ``nn.Conv``, fast on a CPU)."""

    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [..., H, W, C]
        act = ACTIVATIONS[self.activation]
        norm = (lambda y: nn.LayerNorm()(y)) if self.layer_norm else (lambda y: y)
        x = act(norm(Conv(16, (3, 3), kernel_init=orthogonal())(scale_frames(x))))
        x = x.reshape(*x.shape[:-3], -1)
        for size in self.hidden_sizes:
            x = act(norm(nn.Dense(size, kernel_init=orthogonal())(x)))
        return x


class NatureCNN(nn.Module):
    """The Nature-DQN torso (Mnih et al. 2015) on stacked Atari frames ``[..., F, 84, 84]``
    (frames first, as EnvPool and ALE stack them; uint8, scaled inside): convs 8x8/4 (32),
    4x4/2 (64), 3x3/1 (64), then the dense layers (512 in the paper; ``hidden_sizes``).
    ReLU after the convs; ``activation`` after the dense layers."""

    hidden_sizes: Sequence[int] = (512,)
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [..., F, H, W]
        act = ACTIVATIONS[self.activation]
        norm = (lambda y: nn.LayerNorm()(y)) if self.layer_norm else (lambda y: y)
        x = jnp.moveaxis(scale_frames(x), -3, -1)  # [..., H, W, F]
        for features, size, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = nn.relu(norm(Conv(features, (size, size), (stride, stride),
                                  kernel_init=orthogonal())(x)))
        x = x.reshape(*x.shape[:-3], -1)
        for size in self.hidden_sizes:
            x = act(norm(nn.Dense(size, kernel_init=orthogonal())(x)))
        return x


TORSOS = {"mlp": MLP, "cnn": MinAtarCNN, "nature": NatureCNN}


def resolve_torso(torso: str, obs_shape: Sequence[int]) -> str:
    """``"auto"``: the Nature-DQN CNN for stacked Atari frames ``[F, 84, 84]``, the MinAtar CNN
    for other image observations ``[H, W, C]``, else the MLP."""
    if torso == "auto":
        if len(obs_shape) == 3 and tuple(obs_shape[1:]) == (84, 84):
            return "nature"
        return "cnn" if len(obs_shape) == 3 else "mlp"
    return torso
