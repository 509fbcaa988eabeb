"""GAE against a plain NumPy reference, with terminations and truncations mixed."""

import jax.numpy as jnp
import numpy as np

from jaxrl_async.algos.returns import gae


def gae_numpy(reward, value, next_value, terminated, truncated, gamma, lam):
    """GAE by a plain loop over [T, B] (also the reference of tests/test_lag.py)."""
    T, B = reward.shape
    adv = np.zeros((T, B))
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t, b] else next_value[t, b]
            delta = reward[t, b] + gamma * bootstrap - value[t, b]
            if terminated[t, b] or truncated[t, b]:
                running = 0.0  # a new episode starts after this step
            running = delta + gamma * lam * running
            adv[t, b] = running
    return adv, adv + value


def test_gae_matches_numpy_reference():
    rng = np.random.default_rng(0)
    T, B = 12, 3
    reward = rng.normal(size=(T, B))
    value = rng.normal(size=(T, B))
    next_value = rng.normal(size=(T, B))
    terminated = np.zeros((T, B), bool)
    truncated = np.zeros((T, B), bool)
    terminated[3, 0] = terminated[7, 1] = terminated[T - 1, 2] = True
    truncated[5, 0] = truncated[2, 1] = truncated[9, 2] = True
    args = (reward, value, next_value, terminated, truncated, 0.97, 0.9)
    adv, target = gae(*map(jnp.asarray, args[:5]), *args[5:])
    ref_adv, ref_target = gae_numpy(*args)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(target, ref_target, rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_and_termination_does_not():
    # One env, one step: the episode ends either way; only truncation adds gamma * V(final obs).
    reward, value, next_value = (jnp.array([[1.0]]), jnp.array([[0.5]]), jnp.array([[10.0]]))
    no, yes = jnp.array([[False]]), jnp.array([[True]])
    adv_trunc, _ = gae(reward, value, next_value, no, yes, 0.9, 0.95)
    adv_term, _ = gae(reward, value, next_value, yes, no, 0.9, 0.95)
    assert float(adv_trunc[0, 0]) == np.float32(1.0 + 0.9 * 10.0 - 0.5)
    assert float(adv_term[0, 0]) == np.float32(1.0 - 0.5)


def test_advantage_does_not_leak_across_episode_boundary():
    # A huge reward right after a truncation must not change the advantage before it.
    reward = jnp.array([[0.0], [1000.0]])
    value = jnp.zeros((2, 1))
    next_value = jnp.zeros((2, 1))
    truncated = jnp.array([[True], [False]])
    terminated = jnp.zeros((2, 1), bool)
    adv, _ = gae(reward, value, next_value, terminated, truncated, 0.99, 0.95)
    assert float(adv[0, 0]) == 0.0
    assert float(adv[1, 0]) == 1000.0
