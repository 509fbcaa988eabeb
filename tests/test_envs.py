"""Environments: every classic-control and MinAtar id, wrappers, specs, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.envs import env_spec, known_env_ids, make_env, merge_moments, obs_sums, set_moments

CLASSIC = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0",
           "MountainCarContinuous-v0"]
MINATAR = ["Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar",
           "SpaceInvaders-MinAtar"]


def random_actions(spec, key, batch):
    if spec.discrete:
        return jax.random.randint(key, (batch,), 0, spec.num_actions)
    return jax.random.uniform(key, (batch, *spec.action_shape), minval=-3.0, maxval=3.0)


@pytest.mark.parametrize("env_id", CLASSIC + MINATAR)
def test_every_classic_and_minatar_id_steps(env_id):
    env = make_env(env_id)
    spec = env.spec
    obs, state = env.reset(jax.random.split(jax.random.key(0), 3))
    assert obs.shape == (3, *spec.obs_shape)
    action = random_actions(spec, jax.random.key(1), 3)
    obs, state, reward, terminated, truncated, info = env.step(
        jax.random.split(jax.random.key(2), 3), state, action
    )
    assert obs.shape == (3, *spec.obs_shape)
    assert reward.shape == terminated.shape == truncated.shape == (3,)
    assert terminated.dtype == truncated.dtype == jnp.bool_
    assert info["final_observation"].shape == obs.shape
    if env_id in MINATAR:
        assert len(spec.obs_shape) == 3 and spec.discrete
        assert env_spec(env_id, flatten_obs=True).obs_shape == (int(np.prod(spec.obs_shape)),)


def test_specs():
    cart, pend = env_spec("CartPole-v1"), env_spec("Pendulum-v1")
    assert cart.discrete and cart.num_actions == 2 and cart.obs_shape == (4,)
    assert cart.max_episode_steps == 500
    assert not pend.discrete and pend.action_shape == (1,)
    assert pend.action_low == (-2.0,) and pend.action_high == (2.0,)


def test_unknown_id_lists_known_ones():
    with pytest.raises(ValueError) as e:
        make_env("CartPole-v9")
    assert "CartPole-v9" in str(e.value)
    for known in ["CartPole-v1", "Breakout-MinAtar", "Pendulum-v1"]:
        assert known in str(e.value)
    assert set(CLASSIC + MINATAR) <= set(known_env_ids())


def _run(env, steps, batch, seed=0):
    spec = env.spec
    obs, state = env.reset(jax.random.split(jax.random.key(seed), batch))

    def step(carry, key):
        state, obs = carry
        k1, k2 = jax.random.split(key)
        action = random_actions(spec, k1, batch)
        keys = jax.random.split(k2, batch)
        obs2, state, reward, term, trunc, info = env.step(keys, state, action)
        return (state, obs2), (obs, obs2, reward, term, trunc, info)

    keys = jax.random.split(jax.random.key(seed + 1), steps)
    (state, _), out = jax.jit(lambda s, o: jax.lax.scan(step, (s, o), keys))(state, obs)
    return obs, state, jax.tree.map(np.asarray, out)


def test_episode_statistics_are_correct_across_auto_reset():
    env = make_env("CartPole-v1")
    _, _, (_, _, reward, term, trunc, info) = _run(env, 300, 4)
    done = term | trunc
    assert done.sum() > 10  # random CartPole episodes are short
    for b in range(4):
        running, length = 0.0, 0
        for t in range(300):
            running += reward[t, b]
            length += 1
            if done[t, b]:
                assert info["episode_done"][t, b]
                assert info["episode_return"][t, b] == pytest.approx(running)
                assert info["episode_length"][t, b] == length
                running, length = 0.0, 0


def test_auto_reset_returns_true_final_observation():
    env = make_env("CartPole-v1")
    _, _, (obs, next_obs, _, term, trunc, info) = _run(env, 200, 2)
    final = info["final_observation"]
    done = term | trunc
    # where not done, the final observation is the next observation
    np.testing.assert_allclose(final[~done], next_obs[~done], rtol=1e-6, atol=1e-6)
    # where terminated, the final observation is out of bounds; the returned one is a fresh reset
    t, b = np.argwhere(term)[0]
    assert abs(final[t, b, 0]) > 2.4 or abs(final[t, b, 2]) > 0.2094
    assert np.all(np.abs(next_obs[t, b]) <= 0.05)


def test_normalize_observation_sums_raw_obs_and_merges_them_into_moments():
    raw_env, norm_env = make_env("Pendulum-v1"), make_env("Pendulum-v1", normalize_obs=True)
    first_raw, _, (_, raw_next, *_), = _run(raw_env, 50, 8)
    _, state, (_, norm_next, *_), = _run(norm_env, 50, 8)
    seen = np.concatenate([np.asarray(first_raw)[None], raw_next]).reshape(-1, 3)
    # within a rollout the moments stay frozen (the initial ones: 0 mean, unit variance) ...
    np.testing.assert_allclose(norm_next[-1], np.clip(raw_next[-1], -10, 10), atol=1e-4)
    sums = obs_sums(state)  # ... and the wrapper sums every raw observation, over its envs
    assert float(sums.count) == seen.shape[0]
    np.testing.assert_allclose(sums.total, seen.sum(0), rtol=1e-4)
    first = jax.tree.map(lambda x: x[0], state.moments)
    m = merge_moments(first, sums)  # what a runner does once per rollout, over all shards
    np.testing.assert_allclose(m.mean, seen.mean(0), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(m.var, seen.var(0), rtol=1e-3, atol=1e-3)
    obs, state = set_moments(norm_next[-1], state, m)
    assert np.all(np.asarray(state.moments.mean) == np.asarray(m.mean))  # one copy per env
    assert float(obs_sums(state).count) == 0
    # the current observation is the raw one standardised with the merged moments
    expected = (raw_next[-1] - m.mean) / np.sqrt(m.var + 1e-8)
    np.testing.assert_allclose(obs, np.clip(expected, -10, 10), rtol=1e-4, atol=1e-4)


def test_clip_action_and_flatten():
    env = make_env("Pendulum-v1")
    obs, state = env.reset(jax.random.split(jax.random.key(0), 2))
    keys = jax.random.split(jax.random.key(1), 2)
    big = env.step(keys, state, jnp.full((2, 1), 100.0))
    clipped = env.step(keys, state, jnp.full((2, 1), 2.0))
    np.testing.assert_array_equal(big[0], clipped[0])  # an action of 100 acts like the bound 2
    flat = make_env("Breakout-MinAtar", flatten_obs=True)
    obs, _ = flat.reset(jax.random.split(jax.random.key(0), 2))
    assert obs.shape == (2, 400) and flat.spec.obs_shape == (400,)
