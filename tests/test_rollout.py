"""The rollout: trajectory layout, device-invariant keys, recurrent memory handling."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.algos.base import Algorithm, memoryless
from jaxrl_async.envs import make_env
from jaxrl_async.runners.rollout import reset, rollout, step_keys


def counting_algorithm(recurrent: bool) -> Algorithm:
    """Random CartPole actions; as a recurrent policy, memory counts steps since episode start."""

    def act_ff(params, obs, key):
        return jax.random.bernoulli(key).astype(jnp.int32), {"score": obs.sum()}

    def act_rnn(params, obs, key, memory, first):
        memory = jnp.where(first, 0, memory) + 1
        action, extras = act_ff(params, obs, key)
        return action, extras, memory

    if recurrent:
        return Algorithm(init=lambda k: None, act=act_rnn, learn=lambda *a, **k: None,
                         init_memory=lambda: jnp.zeros((), jnp.int32))
    return Algorithm(init=lambda k: None, act=memoryless(act_ff), learn=lambda *a, **k: None)


def run(recurrent: bool, env_id, num_steps=300):
    env, algo = make_env("CartPole-v1"), counting_algorithm(recurrent)
    carry = reset(env, algo, jax.random.key(0), env_id)
    return jax.jit(lambda c: rollout(env, algo, None, c, jax.random.key(1), num_steps, env_id, 7))(
        carry)


def test_trajectory_layout_and_episode_sums():
    carry, traj, sums = run(False, jnp.arange(4))
    for leaf in jax.tree.leaves(traj):
        assert leaf.shape[:2] == (300, 4)
    assert np.all(np.asarray(traj.policy_version) == 7)
    np.testing.assert_array_equal(traj.env_id[0], np.arange(4))
    done = np.asarray(traj.terminated | traj.truncated)
    assert int(sums.count) == done.sum() > 0
    assert float(sums.length_sum) <= 300 * 4
    # obs[t+1] is next_obs[t] unless the episode ended at t
    np.testing.assert_allclose(traj.obs[1:][~done[:-1]], traj.next_obs[:-1][~done[:-1]], atol=1e-6)
    assert carry.first.shape == (4,)


def test_env_streams_do_not_depend_on_which_envs_share_a_rollout():
    _, whole, _ = run(False, jnp.arange(4))
    _, half, _ = run(False, jnp.arange(2, 4))  # envs 2 and 3 alone, as on a second device
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(half)):
        np.testing.assert_allclose(np.asarray(a)[:, 2:], b, atol=1e-6)


def test_recurrent_memory_resets_at_episode_start():
    _, traj, _ = run(True, jnp.arange(3))
    memory, first = np.asarray(traj.extras["memory"]), np.asarray(traj.extras["first"])
    done = np.asarray(traj.terminated | traj.truncated)
    assert first[0].all()  # the first step after reset starts an episode
    np.testing.assert_array_equal(first[1:], done[:-1])
    # the memory handed to act at step t counts the steps of this episode before t
    for b in range(3):
        count = None
        for t in range(300):
            if t > 0:
                assert memory[t, b] == count
            count = 1 if first[t, b] else count + 1


def test_step_keys_are_split_of_fold_in_step_then_env():
    """The flat form ``step_keys`` hashes in gives, for every step t and env b, exactly
    ``split(fold_in(fold_in(key, t), env_id[b]))``: the stream runs have always used."""
    key, env_id, num_steps = jax.random.key(3), jnp.array([5, 0, 17]), 4
    keys = jax.random.key_data(jax.jit(step_keys, static_argnums=1)(key, num_steps, env_id))
    assert keys.shape[:3] == (num_steps, 3, 2)
    for t in range(num_steps):
        for b, e in enumerate(env_id):
            expected = jax.random.split(jax.random.fold_in(jax.random.fold_in(key, t), e))
            np.testing.assert_array_equal(keys[t, b], jax.random.key_data(expected))
