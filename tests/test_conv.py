"""The convolution as patches + one matmul (``conv.Conv``) against flax's ``nn.Conv`` on the
same parameters: outputs and gradients to 1e-5, the same init; and the Nature-DQN torso."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.networks import ActorCritic, NatureCNN, init_params, orthogonal
from jaxrl_async.networks import conv as conv_module
from jaxrl_async.networks.conv import Conv

# (input [..., H, W, C], features, kernel, stride): the MinAtar conv; the Nature-DQN's 8x8/4
# (on a smaller image that leaves rows and columns over, to keep the test fast) and 4x4/2, both
# through space_to_depth; a 3x3/2 conv (not through it) with extra leading axes ([T, B, ...]
# minibatches); one observation
CASES = [
    ((5, 10, 10, 4), 16, 3, 1),
    ((2, 39, 38, 4), 6, 8, 4),
    ((2, 9, 9, 8), 4, 4, 2),
    ((2, 3, 11, 9, 3), 5, 3, 2),
    ((10, 10, 4), 16, 3, 1),
]


@pytest.mark.parametrize("shape, features, size, stride", CASES)
def test_conv_equals_flax_conv(shape, features, size, stride):
    check_against_flax_conv(shape, features, size, stride)


def test_chunked_forward_equals_lax_conv(monkeypatch):
    """Large batches run the forward in chunks (here 3 x 3 MinAtar frames in chunks of 2, the
    last padded); outputs and gradients stay those of ``lax.conv_general_dilated``."""
    monkeypatch.setattr(conv_module, "CHUNK_ABOVE_BYTES", 0)
    monkeypatch.setattr(conv_module, "CHUNK_BYTES", 2 * 8 * 8 * 36 * 4)  # 2 MinAtar frames' patches
    rng = np.random.default_rng(0)  # numpy draws: no eager jax op to compile
    x, kernel, bias, cotangent = (rng.standard_normal(shape, np.float32) for shape in
                                  [(3, 3, 10, 10, 4), (3, 3, 4, 16), (16,), (3, 3, 8, 8, 16)])

    def reference(x, kernel, bias):
        y = jax.lax.conv_general_dilated(x.reshape(9, 10, 10, 4), kernel, (1, 1), "VALID",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return y.reshape(3, 3, 8, 8, 16) + bias

    assert "custom_vjp_call" in str(jax.make_jaxpr(conv_module.conv2d)(x, kernel, bias))  # chunked

    def value_and_grads(f):
        return jax.jit(jax.value_and_grad(lambda *a: jnp.sum(f(*a) * cotangent), (0, 1, 2)))(
            x, kernel, bias)

    (loss, grads), (loss_ref, grads_ref) = (value_and_grads(conv_module.conv2d),
                                            value_and_grads(reference))
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-5)
    y_ref = jax.jit(reference)(x, kernel, bias)
    for g, g_ref in zip(grads, grads_ref):
        np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-5 * float(np.abs(g_ref).max()))
    y = jax.jit(lambda *a: conv_module.conv2d(*a))(x, kernel, bias)  # a fresh trace
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)


def check_against_flax_conv(shape, features, size, stride):
    ours = Conv(features, (size, size), (stride, stride), kernel_init=orthogonal())
    flax = nn.Conv(features, (size, size), (stride, stride), padding="VALID",
                   kernel_init=orthogonal())
    x = jax.random.normal(jax.random.key(0), shape)
    params = ours.init(jax.random.key(1), x)
    flax_params = flax.init(jax.random.key(1), x)  # the same init: the same draws, names
    assert jax.tree.structure(params) == jax.tree.structure(flax_params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(flax_params)):
        np.testing.assert_array_equal(a, b)
    params = jax.tree.map(lambda p: p + 0.1, params)  # a non-zero bias

    y = jax.jit(lambda p, x: ours.apply(p, x))(params, x)  # a fresh trace (no cached one)
    y_ref = jax.jit(flax.apply)(params, x)
    assert y.shape == y_ref.shape
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)

    cotangent = jax.random.normal(jax.random.key(2), y.shape)

    def grads(module):
        return jax.jit(jax.grad(lambda p, x: jnp.sum(module.apply(p, x) * cotangent),
                                (0, 1)))(params, x)

    for g, g_ref in zip(jax.tree.leaves(grads(ours)), jax.tree.leaves(grads(flax))):
        np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-5 * float(np.abs(g_ref).max()))


def test_nature_cnn_scales_uint8_frames_inside_and_has_the_nature_shapes():
    frames = jax.random.randint(jax.random.key(0), (2, 4, 84, 84), 0, 256).astype(jnp.uint8)
    net = ActorCritic(True, 6, "nature", (64,), "relu")  # (512 in the paper: a slower init)
    params = jax.jit(lambda k: init_params(net, k, frames[0]))(jax.random.key(1))
    shapes = {"/".join(k.key for k in path): leaf.shape
              for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
    for conv, shape in [("Conv_0", (8, 8, 4, 32)), ("Conv_1", (4, 4, 32, 64)),
                        ("Conv_2", (3, 3, 64, 64))]:
        assert shapes[f"params/actor_torso/{conv}/kernel"] == shape
    assert shapes["params/actor_torso/Dense_0/kernel"] == (7 * 7 * 64, 64)
    apply = jax.jit(net.apply)
    pi, value = apply(params, frames)
    assert pi.logits.shape == (2, 6) and value.shape == (2,)
    # uint8 frames give what the same frames as floats in [0, 1] give
    pi_f, value_f = apply(params, frames.astype(jnp.float32) / 255.0)
    np.testing.assert_allclose(pi.logits, pi_f.logits, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(value, value_f, rtol=1e-6, atol=1e-6)

    # the torso against lax.conv_general_dilated: the frames axis is the channel axis
    def reference(tp, frames):
        h = jnp.moveaxis(frames.astype(jnp.float32) / 255.0, -3, -1)
        for i, stride in enumerate([4, 2, 1]):
            conv = tp["params"][f"Conv_{i}"]
            h = nn.relu(jax.lax.conv_general_dilated(
                h, conv["kernel"], (stride, stride), "VALID",
                dimension_numbers=("NHWC", "HWIO", "NHWC")) + conv["bias"])
        dense = tp["params"]["Dense_0"]
        return nn.relu(h.reshape(h.shape[0], -1) @ dense["kernel"] + dense["bias"])

    torso = NatureCNN((32,))
    tp = jax.tree.map(lambda p: p + 0.01, torso.init(jax.random.key(2), frames))
    np.testing.assert_allclose(jax.jit(torso.apply)(tp, frames), jax.jit(reference)(tp, frames),
                               rtol=1e-5, atol=1e-5)
