"""Networks: the LAPACK-free orthogonal init, its one-draw form, and the batched-QR deadlock."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.algos.base import on_rows
from jaxrl_async.networks import ActorCritic, Categorical, DiagGaussian, QNetwork
from jaxrl_async.networks.initializers import _orthonormal_columns, init_params, orthogonal


def test_gram_schmidt_equals_lapack_qr():
    a = jax.random.normal(jax.random.key(1), (64, 16))
    q, r = jnp.linalg.qr(a)
    np.testing.assert_allclose(_orthonormal_columns(a, 16), q * jnp.sign(jnp.diag(r)), atol=1e-5)


def test_orthogonal_matches_flax_for_the_same_key():
    import flax.linen as nn

    for shape in [(4, 64), (64, 64), (64, 2), (3, 3, 4, 16)]:
        ours = orthogonal(1.3)(jax.random.key(7), shape)
        flax = nn.initializers.orthogonal(1.3)(jax.random.key(7), shape)
        np.testing.assert_allclose(ours, flax, atol=1e-5)


@pytest.mark.parametrize("torso, obs", [("mlp", jnp.zeros(4)), ("cnn", jnp.zeros((10, 10, 4)))])
def test_init_params_gives_scaled_orthogonal_kernels(torso, obs):
    net = ActorCritic(True, 3, torso)
    params = jax.jit(lambda k: init_params(net, k, obs))(jax.random.key(0))
    scales = {"policy_head": 0.01, "value_head": 1.0}
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        names = [p.key for p in path]
        if names[-1] == "bias":
            assert np.all(np.asarray(leaf) == 0)
        if names[-1] != "kernel":
            continue
        scale = next((s for n, s in scales.items() if n in names), np.sqrt(2))
        w = np.asarray(leaf).reshape(-1, leaf.shape[-1]) / scale
        gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
        np.testing.assert_allclose(gram, np.eye(len(gram)), atol=1e-5, err_msg=str(names))
    # same key, same params; other key, other params; vmap == one by one
    again = jax.jit(lambda k: init_params(net, k, obs))(jax.random.key(0))
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(again)):
        np.testing.assert_array_equal(a, b)
    batched = jax.vmap(lambda k: init_params(net, k, obs))(jax.random.split(jax.random.key(0), 2))
    single = init_params(net, jax.random.split(jax.random.key(0), 2)[1], obs)
    for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(single)):
        np.testing.assert_allclose(a[1], b, atol=1e-6)


def test_init_params_stream_is_unchanged():
    """A few kernel entries of seed 0, as every earlier version drew them (the normal draw
    became one flat draw to compile faster: the same numbers). Rounding may differ between
    jax versions; a changed stream would not be near these."""
    net = ActorCritic(True, 3, "mlp")
    params = jax.jit(lambda k: init_params(net, k, jnp.zeros(4)))(jax.random.key(0))["params"]
    expected = {("actor_torso", "Dense_0"): [-0.37844986, 0.26410297, -0.08422489],
                ("critic_torso", "Dense_1"): [-0.06373539, -0.06372110, 0.12237106],
                ("value_head",): [0.06839749, -0.17151332, 0.02741262]}
    for path, values in expected.items():
        kernel = params
        for name in path:
            kernel = kernel[name]
        np.testing.assert_allclose(np.asarray(kernel["kernel"]).ravel()[[0, 1, -1]], values,
                                   atol=1e-5, err_msg=str(path))


@pytest.mark.timeout(120)
def test_vmapped_orthogonal_init_in_two_threads_does_not_deadlock():
    """Regression for the XLA:CPU batched-QR deadlock (docs/design.md): this exact program with
    flax's ``nn.initializers.orthogonal()`` hangs jaxlib 0.10.2 (checked by hand: both threads
    still alive after 20 s). Ours has no LAPACK call."""
    init = orthogonal()

    def many(key):
        def body(i, acc):
            keys = jax.random.split(jax.random.fold_in(key, i), 4)
            return acc + jax.vmap(lambda k: init(k, (64, 64)))(keys).sum()

        return jax.lax.fori_loop(0, 200, body, 0.0)

    f = jax.jit(many)
    jax.block_until_ready(f(jax.random.key(0)))
    done = []
    threads = [threading.Thread(target=lambda i=i: done.append(
        jax.block_until_ready(f(jax.random.key(i)))), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "concurrent vmapped init deadlocked"
    assert len(done) == 2


def test_distributions():
    logits = jnp.array([0.0, 1.0, -1.0])
    cat = Categorical(logits)
    p = jax.nn.softmax(logits)
    np.testing.assert_allclose(jnp.exp(cat.log_prob(jnp.array(1))), p[1], rtol=1e-6)
    np.testing.assert_allclose(cat.entropy(), -(p * jnp.log(p)).sum(), rtol=1e-6)
    samples = jax.vmap(cat.sample)(jax.random.split(jax.random.key(0), 20000))
    np.testing.assert_allclose(np.bincount(samples, minlength=3) / 20000, p, atol=0.015)
    g = DiagGaussian(jnp.array([0.5, -1.0]), jnp.log(jnp.array([2.0, 0.5])))
    x = jnp.array([1.0, 0.0])
    from scipy.stats import norm

    ref = norm.logpdf(1.0, 0.5, 2.0) + norm.logpdf(0.0, -1.0, 0.5)
    np.testing.assert_allclose(g.log_prob(x), ref, rtol=1e-5)
    np.testing.assert_allclose(g.entropy(), norm.entropy(0.5, 2.0) + norm.entropy(-1, 0.5),
                               rtol=1e-5)


@pytest.mark.parametrize("network, obs_shape", [
    (ActorCritic(discrete=True, action_dim=3), (5,)),
    (ActorCritic(discrete=False, action_dim=2), (5,)),
    (QNetwork(num_actions=4, torso="cnn", hidden_sizes=(16,)), (6, 6, 2)),
])
def test_on_rows_gives_what_applying_on_time_and_env_axes_gives(network, obs_shape):
    """``on_rows`` (IMPALA's forward pass: rows ``[T*B, ...]``, reshaped back) gives what the
    network gives on ``[T, B, ...]``: the same values and shapes, distributions included."""
    obs = jax.random.normal(jax.random.key(1), (7, 3, *obs_shape))  # [T, B, ...]
    params = init_params(network, jax.random.key(0), obs[0, 0])
    direct = network.apply(params, obs)
    rows = on_rows(lambda x: network.apply(params, x), obs)
    assert jax.tree.structure(rows) == jax.tree.structure(direct)
    for got, want in zip(jax.tree.leaves(rows), jax.tree.leaves(direct)):
        assert got.shape == want.shape and got.shape[:2] == (7, 3)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
