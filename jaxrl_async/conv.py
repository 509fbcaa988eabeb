"""Convolutions written as shifted slices + one matmul, fast on XLA:CPU.

XLA:CPU runs ``lax.conv_general_dilated`` (what flax's ``nn.Conv`` calls) through a generic
convolution kernel that is slow for the small images, few channels and large batches of RL
torsos, and its backward pass (the kernel's gradient, itself a convolution over the batch) is
slower still: the MinAtar torso ran ~40x slower than an MLP. Here a VALID convolution gathers
its ``kh * kw`` shifted (strided) views of the input side by side on the channel axis
(``[..., oh, ow, kh*kw*C]``, in the kernel's HWIO order) and multiplies them by the kernel as one
``[kh*kw*C, O]`` matrix: one plain matmul forward, one for the kernel's gradient, which is
XLA:CPU's fast path. (``lax.conv_general_dilated_patches`` builds the same patches with a
convolution and is as slow as the convolution itself here.) Docs: docs/results.md.

``Conv`` has the parameters of ``nn.Conv(features, kernel_size, strides, padding="VALID")``
(``kernel [kh, kw, C, O]``, ``bias [O]``, the same initializers, the same names), so the two
are interchangeable on the same params.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax


def patches(x: jax.Array, kernel_size: Sequence[int], strides: Sequence[int]) -> jax.Array:
    """``x [..., H, W, C] -> [..., oh, ow, kh*kw*C]``: the VALID patches, ordered (i, j, c) like
    a flattened HWIO kernel; ``oh = (H - kh) // sh + 1`` (likewise ``ow``)."""
    (kh, kw), (sh, sw) = kernel_size, strides
    height, width = x.shape[-3], x.shape[-2]
    if height < kh or width < kw:
        raise ValueError(f"conv: input {height}x{width} is smaller than the kernel {kh}x{kw}")
    oh, ow = (height - kh) // sh + 1, (width - kw) // sw + 1
    views = [x[..., i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :]
             for i in range(kh) for j in range(kw)]
    return jnp.concatenate(views, -1) if len(views) > 1 else views[0]


def conv2d(x: jax.Array, kernel: jax.Array, bias: jax.Array | None = None,
           strides: Sequence[int] = (1, 1)) -> jax.Array:
    """VALID 2-D convolution ``x [..., H, W, C] * kernel [kh, kw, C, O] (+ bias [O])
    -> [..., oh, ow, O]``, equal to ``lax.conv_general_dilated`` with NHWC/HWIO/NHWC."""
    kh, kw, c, o = kernel.shape
    chex.assert_axis_dimension(x, -1, c)
    cols = patches(x, (kh, kw), tuple(strides))
    # The barrier keeps XLA from fusing the gather into the matmul: a fused operand sends the
    # dot to XLA:CPU's naive loop emitter (~30x slower than the library matmul on the
    # materialised patches). As a 2-D matmul the kernel's gradient is one library matmul too.
    cols = lax.optimization_barrier(cols)
    y = (cols.reshape(-1, kh * kw * c) @ kernel.reshape(kh * kw * c, o)).reshape(
        *cols.shape[:-1], o)
    return y if bias is None else y + bias


class Conv(nn.Module):
    """``nn.Conv(features, kernel_size, strides, padding="VALID")`` computed by ``conv2d``:
    the same parameters, initializers and outputs (to float rounding), much faster on a CPU."""

    features: int
    kernel_size: Sequence[int]
    strides: Sequence[int] = (1, 1)
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [..., H, W, C]
        kh, kw = self.kernel_size
        kernel = self.param("kernel", self.kernel_init, (kh, kw, x.shape[-1], self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        dtype = jnp.result_type(x, kernel)  # as flax promotes (bool or int frames -> float32)
        return conv2d(x.astype(dtype), kernel.astype(dtype), bias.astype(dtype), self.strides)
