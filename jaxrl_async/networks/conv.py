"""Convolutions written as shifted slices + one matmul, fast on XLA:CPU.

XLA:CPU runs ``lax.conv_general_dilated`` (what flax's ``nn.Conv`` calls) through a generic
convolution kernel that is slow for the small images, few channels and large batches of RL
torsos, and its backward pass (the kernel's gradient, itself a convolution over the batch) is
slower still: the MinAtar torso ran ~40x slower than an MLP. Here a VALID convolution gathers
its ``kh * kw`` shifted (strided) views of the input side by side on the channel axis
(``[..., oh, ow, kh*kw*C]``, in the kernel's HWIO order) and multiplies them by the kernel as one
``[kh*kw*C, O]`` matrix: one plain matmul forward, one for the kernel's gradient, which is
XLA:CPU's fast path. A strided conv whose kernel is a multiple of its stride (the Nature-DQN's
8x8/4, 4x4/2) first moves each stride x stride block onto the channel axis
(``space_to_depth``): fewer, wider slices. (``lax.conv_general_dilated_patches`` builds the
same patches with a convolution and is as slow as the convolution itself here.) A forward pass
over a large batch (PPO's value pass over a whole rollout) runs in chunks whose patches fit in
a core's cache; its gradient is the unchunked one. Figures: docs/results.md.

``Conv`` has the parameters of ``nn.Conv(features, kernel_size, strides, padding="VALID")``
(``kernel [kh, kw, C, O]``, ``bias [O]``, the same initializers, the same names), so the two
are interchangeable on the same params.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

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


def space_to_depth(x: jax.Array, kernel: jax.Array, stride: int) -> tuple[jax.Array, jax.Array]:
    """A stride-``s`` convolution with a kernel of a multiple of ``s`` as a stride-1 one:
    ``x [..., H, W, C] -> [..., H/s, W/s, s*s*C]`` (each s x s block on the channel axis) and
    ``kernel [kh, kw, C, O] -> [kh/s, kw/s, s*s*C, O]`` in the same order, so the patches are
    ``(kh/s) * (kw/s)`` wide slices instead of ``kh * kw`` narrow ones (the Nature-DQN's 8x8/4
    conv: 4 slices of 64 channels, not 64 of 4)."""
    kh, kw, c, o = kernel.shape
    height, width = x.shape[-3], x.shape[-2]
    oh, ow = (height - kh) // stride + 1, (width - kw) // stride + 1
    bh, bw = oh + kh // stride - 1, ow + kw // stride - 1  # the blocks the outputs read
    x = x[..., :bh * stride, :bw * stride, :]
    x = x.reshape(*x.shape[:-3], bh, stride, bw, stride, c)
    x = jnp.moveaxis(x, -4, -3).reshape(*x.shape[:-5], bh, bw, stride * stride * c)
    kernel = kernel.reshape(kh // stride, stride, kw // stride, stride, c, o)
    kernel = jnp.moveaxis(kernel, 1, 2).reshape(kh // stride, kw // stride, stride * stride * c, o)
    return x, kernel


# Forward passes over a large batch (PPO's value pass over a whole rollout, 4096+ MinAtar
# frames) run in chunks whose patches fit in a core's cache: materialised at once, the patches
# of 4096 frames are 38 MB, and building and reading them from memory made the convolution cost
# 4x the dense layer after it. The gradient is the unchunked one (chunking under the gradient,
# as a loop, was 1.7x slower: its transpose accumulates the kernel's gradient chunk by chunk).
CHUNK_ABOVE_BYTES = 16 << 20  # chunk the forward when the patches would exceed this
CHUNK_BYTES = 2 << 20  # the patches of one chunk


def _conv2d(x: jax.Array, kernel: jax.Array, bias: jax.Array,
            strides: tuple[int, int]) -> jax.Array:
    kh, kw, c, o = kernel.shape
    (sh, sw) = strides
    if sh == sw > 1 and kh % sh == 0 and kw % sw == 0 and min(x.shape[-3:-1]) >= max(kh, kw):
        x, kernel = space_to_depth(x, kernel, sh)
        kh, kw, c, _ = kernel.shape
        strides = (1, 1)
    cols = patches(x, (kh, kw), strides)
    # The barrier keeps XLA from fusing the gather into the matmul: a fused operand sends the
    # dot to XLA:CPU's naive loop emitter (~30x slower than the library matmul on the
    # materialised patches). As a 2-D matmul the kernel's gradient is one library matmul too.
    cols = lax.optimization_barrier(cols)
    y = (cols.reshape(-1, kh * kw * c) @ kernel.reshape(kh * kw * c, o)).reshape(
        *cols.shape[:-1], o)
    return y + bias


@partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _chunked_conv2d(x: jax.Array, kernel: jax.Array, bias: jax.Array,
                    strides: tuple[int, int], chunk: int) -> jax.Array:
    """``_conv2d`` over ``x [N, H, W, C]`` in ``chunk``-frame pieces (``N`` padded up to a
    multiple of ``chunk``, the padding's outputs dropped); its gradient is ``_conv2d``'s."""
    n = x.shape[0]
    pad = -n % chunk
    xs = jnp.pad(x, ((0, pad), (0, 0), (0, 0), (0, 0))) if pad else x
    y = lax.map(lambda piece: _conv2d(piece, kernel, bias, strides),
                xs.reshape(-1, chunk, *x.shape[1:]))
    return y.reshape(-1, *y.shape[2:])[:n]


def _chunked_fwd(x, kernel, bias, strides, chunk):
    return _chunked_conv2d(x, kernel, bias, strides, chunk), (x, kernel, bias)


def _chunked_bwd(strides, chunk, residuals, cotangent):
    return jax.vjp(lambda *args: _conv2d(*args, strides), *residuals)[1](cotangent)


_chunked_conv2d.defvjp(_chunked_fwd, _chunked_bwd)


def conv2d(x: jax.Array, kernel: jax.Array, bias: jax.Array | None = None,
           strides: Sequence[int] = (1, 1)) -> jax.Array:
    """VALID 2-D convolution ``x [..., H, W, C] * kernel [kh, kw, C, O] (+ bias [O])
    -> [..., oh, ow, O]``, equal to ``lax.conv_general_dilated`` with NHWC/HWIO/NHWC."""
    kh, kw, c, o = kernel.shape
    chex.assert_axis_dimension(x, -1, c)
    if bias is None:
        bias = jnp.zeros((o,), jnp.result_type(x, kernel))
    strides = (int(strides[0]), int(strides[1]))
    height, width = x.shape[-3], x.shape[-2]
    frame_bytes = (((height - kh) // strides[0] + 1) * ((width - kw) // strides[1] + 1)
                   * kh * kw * c * x.dtype.itemsize)  # one frame's patches
    frames = math.prod(x.shape[:-3])
    if frames * frame_bytes <= CHUNK_ABOVE_BYTES or frames < 2:
        return _conv2d(x, kernel, bias, strides)
    chunk = max(1, min(frames // 2, CHUNK_BYTES // max(frame_bytes, 1)))
    y = _chunked_conv2d(x.reshape(frames, *x.shape[-3:]), kernel, bias, strides, chunk)
    return y.reshape(*x.shape[:-3], *y.shape[1:])


def scale_frames(x: jax.Array) -> jax.Array:
    """uint8 frames (0..255) as float32 in [0, 1], inside the network, so they travel as bytes
    from the env to the learner; other observations as they are."""
    return x.astype(jnp.float32) / 255.0 if x.dtype == jnp.uint8 else x


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
