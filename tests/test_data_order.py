"""One run's data stays one run's data: in free-running async mode every replay row holds one
env's steps in time order, and n-step windows never cross a gap left by a dropped batch."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async import runners
from jaxrl_async.algos import replay as replay_buffer
from jaxrl_async.run.evaluate import obs_moments

UPDATES, ENVS, STEPS = 24, 4, 8
GAMMA, N = 0.9, 3


def free_running_dqn(stale_policy: str, max_staleness: int) -> jra.DQNConfig:
    """DQN on CartPole whose ring holds the whole run, 2 free-running actor streams."""
    runner = jra.AsyncConfig(actors_per_device=2, deterministic=False, lag=0,
                             max_staleness=max_staleness, stale_policy=stale_policy)
    return jra.DQNConfig(env="CartPole-v1", num_envs=ENVS, num_steps=STEPS,
                         total_timesteps=ENVS * STEPS * UPDATES, buffer_size=ENVS * STEPS * UPDATES,
                         batch_size=32, samples_per_insert=1.0, learning_starts=64, n_step=N,
                         gamma=GAMMA, log_every=UPDATES, fast_compile=True, runner=runner)


def reference_n_step(row: replay_buffer.Transition, start: int) -> tuple[float, float, np.ndarray]:
    """(return, discount, next_obs) of the window at ``start``, by hand: it ends at an episode's
    end, after N steps, or before a jump in the step index."""
    ret, k = 0.0, 0
    while True:
        ret += GAMMA**k * row.reward[start + k]
        t = start + k
        gap = t + 1 < len(row.step) and row.step[t + 1] != row.step[t] + 1
        if row.terminated[t] or row.truncated[t] or gap or k == N - 1:
            break
        k += 1
    discount = 0.0 if row.terminated[t] else GAMMA ** (k + 1)
    return ret, discount, row.next_obs[t]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stale_policy, max_staleness", [("drop", 0), ("correct", 1)])
def test_free_running_replay_rows_hold_one_env_in_order(stale_policy, max_staleness):
    cfg = free_running_dqn(stale_policy, max_staleness)
    out = runners.run(cfg, jax.random.key(0))
    replay = jax.device_get(out.state.learner.replay.value)
    assert int(replay.size[0]) == STEPS * UPDATES and int(replay.pos[0]) == 0  # the whole run
    dropped = int(out.metrics["dropped_batches"][-1])
    if stale_policy == "correct":
        assert dropped == 0
    gaps = np.diff(replay.data.step, axis=1) != 1  # [B, C-1]
    assert gaps.any() == (dropped > 0)  # a dropped batch leaves a gap in its stream's envs
    for b in range(ENVS):
        row = jax.tree.map(lambda x, b=b: np.asarray(x[b]), replay.data)
        assert np.all(row.env_id == b), row.env_id  # env b's steps only
        jumps = np.diff(row.step)
        assert np.all(jumps >= 1) and np.all(jumps % STEPS == 1), row.step  # in time order
        if stale_policy == "correct":
            assert np.all(jumps == 1)
        # within a stretch without a gap, each obs is the previous step's next_obs
        ends = row.terminated[:-1] | row.truncated[:-1] | (jumps != 1)
        np.testing.assert_array_equal(row.obs[1:][~ends], row.next_obs[:-1][~ends])

    starts = np.arange(STEPS * UPDATES - N + 1)
    windows = jax.jit(replay_buffer.n_step_windows, static_argnums=2)(
        out.state.learner.replay.value, jnp.broadcast_to(jnp.asarray(starts), (ENVS, len(starts))),
        N, GAMMA)
    _, _, ret, discount, next_obs = jax.device_get(windows)
    for b in range(ENVS):
        row = jax.tree.map(lambda x, b=b: np.asarray(x[b]), replay.data)
        for i in starts:
            want = reference_n_step(row, i)
            np.testing.assert_allclose(ret[b, i], want[0], rtol=1e-6, err_msg=f"env {b} slot {i}")
            np.testing.assert_allclose(discount[b, i], want[1], rtol=1e-6)
            np.testing.assert_array_equal(next_obs[b, i], want[2])


# --------------------------------------------------------------------------- obs normalisation
PENDULUM = jra.PPOConfig(env="Pendulum-v1", num_envs=8, num_steps=16, num_minibatches=2,
                         update_epochs=2, total_timesteps=8 * 16 * 6, log_every=3,
                         normalize_obs=True, fast_compile=True)


@pytest.fixture(scope="module")
def one_device():
    return jra.train(PENDULUM, seed=1, progress=False)


def assert_same_params(a, b):
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.state.obs_moments.mean, b.state.obs_moments.mean, rtol=1e-5)
    np.testing.assert_allclose(a.state.obs_moments.var, b.state.obs_moments.var, rtol=1e-5)


def test_obs_statistics_are_merged_over_every_env(one_device):
    moments = one_device.state.obs_moments  # the reset obs and every step's, of all envs
    assert float(moments.count) == pytest.approx(8 + PENDULUM.num_updates * 8 * 16, abs=1e-3)
    copies = one_device.state.env.env_state.moments  # what the envs act with: the same
    np.testing.assert_array_equal(copies.mean, np.broadcast_to(moments.mean, copies.mean.shape))
    assert obs_moments(one_device.state) is moments  # evaluation uses them too


def test_two_devices_normalise_like_one(one_device):
    cfg = dataclasses.replace(PENDULUM, runner=jra.SyncConfig(num_devices=2))
    assert_same_params(jra.train(cfg, seed=1, progress=False), one_device)


@pytest.mark.timeout(300)
def test_async_streams_at_lag_0_normalise_like_sync(one_device, devices):
    cfg = dataclasses.replace(PENDULUM, runner=jra.AsyncConfig(
        lag=0, max_staleness=0, actors_per_device=2, learner_devices=2))
    assert_same_params(runners.run(cfg, jax.random.key(1), devices=devices[:3]), one_device)
