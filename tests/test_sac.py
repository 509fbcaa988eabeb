"""SAC: improves Pendulum (fixed seeds), the squashed Gaussian, config errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.networks import TanhGaussian
from jaxrl_async.run.sinks import window_returns

# The SACConfig defaults: 4 envs x 8 steps per update, 32 gradient steps of 128 per update
# (samples_per_insert 128: one gradient step per env step), 64x64 networks.
PENDULUM = jra.SACConfig(env="Pendulum-v1", total_timesteps=8_000)


def test_sac_improves_pendulum_in_8k_steps():
    # Budget: 8k env steps (40 episodes), 7k gradient steps. A random policy scores about
    # -1200 to -1400; -400 is a policy that swings up and balances in most episodes.
    out = jax.jit(jax.vmap(jra.make_train(PENDULUM)))(jax.random.split(jax.random.key(0), 2))
    returns = np.asarray(out.metrics["episode_return"])  # [seeds, updates]
    assert np.all(np.nanmean(returns[:, :40], 1) < -1000), "it starts from random play"
    last = window_returns(out.metrics, 10)
    assert np.all(last >= -400), last
    sampled = np.asarray(out.state.learner.replay.value.sampled).sum(1)  # rows drawn, counted
    inserted = np.asarray(out.state.learner.replay.value.inserted).sum(1)
    started = np.asarray(out.metrics["replay_size"]) >= PENDULUM.learning_starts
    np.testing.assert_array_equal(inserted, PENDULUM.num_updates * PENDULUM.steps_per_update)
    np.testing.assert_array_equal(sampled, 128.0 * started.sum(1) * PENDULUM.steps_per_update)


def test_tanh_gaussian_log_prob_is_the_density_of_the_squashed_sample():
    mean, log_std = jnp.array([0.3, -0.5]), jnp.log(jnp.array([0.7, 1.2]))
    keys = jax.random.split(jax.random.key(0), 4)
    actions, log_probs = jax.vmap(TanhGaussian(mean, log_std).sample_and_log_prob)(keys)
    assert np.all(np.abs(actions) < 1)
    u = np.arctanh(np.asarray(actions, np.float64))
    std = np.exp(np.asarray(log_std, np.float64))
    normal = -0.5 * ((u - np.asarray(mean)) / std) ** 2 - np.log(std) - 0.5 * math.log(2 * math.pi)
    expected = (normal - np.log(1 - np.tanh(u) ** 2)).sum(-1)
    np.testing.assert_allclose(log_probs, expected, rtol=1e-4, atol=1e-4)


def test_rejects_discrete_envs():
    with pytest.raises(ValueError, match="SACConfig.env must have continuous actions"):
        jra.SACConfig(env="CartPole-v1")
    with pytest.raises(ValueError, match="SACConfig.samples_per_insert"):
        jra.SACConfig(samples_per_insert=1.0)
