"""Brax environments behind make_env (optional extra): contract, truncation, config."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("brax")

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.envs import env_spec, make_env  # noqa: E402


def test_brax_env_steps_resets_and_truncates():
    env = make_env("brax/inverted_pendulum", episode_length=3, backend="positional")
    spec = env.spec
    assert spec.obs_shape == (4,) and spec.action_shape == (1,) and not spec.discrete
    assert spec.max_episode_steps == 3
    step = jax.jit(env.step)
    obs, state = jax.jit(env.reset)(jax.random.split(jax.random.key(0), 2))
    assert obs.shape == (2, 4)
    for t in range(3):
        keys = jax.random.split(jax.random.key(t + 1), 2)
        obs, state, reward, terminated, truncated, info = step(keys, state, jnp.zeros((2, 1)))
    assert reward.shape == (2,) and reward.dtype == jnp.float32
    # zero torque keeps the pole up for 3 steps: a time limit, not a termination, and the
    # next observation is a fresh reset while the final one is kept in the info
    assert np.all(np.asarray(truncated)) and not np.any(np.asarray(terminated))
    assert np.all(np.asarray(info["episode_done"]))
    assert np.abs(np.asarray(info["final_observation"] - obs)).max() > 0
    assert np.all(np.asarray(state.env_state.steps) == 0)


def test_brax_ids_are_valid_config_envs():
    assert "brax/ant" in jra.envs.known_env_ids()
    cfg = jra.SACConfig(env="brax/inverted_pendulum")
    assert not cfg.is_discrete and env_spec(cfg.env).action_high == (1.0,)
    with pytest.raises(ValueError, match="DQNConfig.env must have discrete actions"):
        jra.DQNConfig(env="brax/inverted_pendulum")
