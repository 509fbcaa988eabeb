"""IMPALA: behaviour log-probs agree with the learner's (discrete and continuous), and the
V-trace correction is active when the data is a step old."""

import jax
import numpy as np
import pytest

import jaxrl_async as jra


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_on_policy_importance_weights_are_one(env):
    # Under the sync runner the learner sees the params that acted: pi / mu = 1 everywhere.
    cfg = jra.ImpalaConfig(env=env, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3)
    out = jax.jit(jra.make_train(cfg))(jax.random.key(0))
    np.testing.assert_allclose(out.metrics["rho_mean"], 1.0, atol=1e-5)
    for name in ("loss", "policy_loss", "value_loss", "entropy"):
        assert np.all(np.isfinite(out.metrics[name])), name
    assert not np.allclose(out.metrics["loss"][0], out.metrics["loss"][-1])  # it updates


def test_bad_impala_values_name_the_field():
    with pytest.raises(ValueError, match="ImpalaConfig.optimizer"):
        jra.ImpalaConfig(optimizer="sgd")
    with pytest.raises(ValueError, match="ImpalaConfig.clip_rho"):
        jra.ImpalaConfig(clip_rho=0.0)
