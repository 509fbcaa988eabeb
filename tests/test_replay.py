"""The replay buffer: insert/sample semantics, wraparound, uniform sampling, n-step windows,
samples-per-insert, and the per-env sharding over devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
import jaxrl_async.config.shared
from jaxrl_async.algos import replay as replay_buffer
from jaxrl_async.algos.base import PerEnv, Trajectory
from jaxrl_async.algos.returns import n_step_return
from jaxrl_async.runners.common import with_env_axis

insert = jax.jit(replay_buffer.insert)
sample = jax.jit(replay_buffer.sample, static_argnums=(3, 4))
gather = jax.jit(replay_buffer.gather)


def ring(num_envs: int, capacity: int) -> replay_buffer.Replay:
    """Rings of integer stamps: item = 1000 * env + time, so every sample says where it was."""
    empty = replay_buffer.init(jnp.zeros((), jnp.int32), capacity)
    return with_env_axis(PerEnv(empty), num_envs).value


def stamps(t0: int, num_steps: int, num_envs: int) -> jax.Array:  # [T, B]
    return 1000 * jnp.arange(num_envs)[None] + t0 + jnp.arange(num_steps)[:, None]


def fill(replay: replay_buffer.Replay, num_inserts: int, num_steps: int) -> replay_buffer.Replay:
    num_envs = replay.pos.shape[0]
    for i in range(num_inserts):
        replay = insert(replay, stamps(i * num_steps, num_steps, num_envs))
    return replay


@pytest.mark.parametrize("capacity", [12, 10])  # a multiple of T (no wrap inside an insert), not
def test_insert_wraps_around_and_keeps_the_newest(capacity):
    replay = fill(ring(3, capacity), 5, 4)  # 20 items per env into `capacity` slots
    assert int(replay.size[0]) == capacity and int(replay.inserted[0]) == 20
    assert int(replay.pos[0]) == 20 % capacity
    for env in range(3):
        held = sorted(np.asarray(replay.data[env]) - 1000 * env)
        assert held == list(range(20 - capacity, 20))  # the newest `capacity` items


def test_never_samples_empty_slots_or_across_the_write_position():
    replay = fill(ring(2, 16), 3, 4)  # 12 of 16 slots written
    window = 3
    slots = sample(replay, jax.random.key(0), jnp.arange(2), 5000, window)
    items = np.asarray(gather(replay, slots[..., None] + jnp.arange(window)))  # [B, K, w]
    times = items - 1000 * np.arange(2)[:, None, None]
    assert times.min() == 0 and times.max() == 11  # nothing unwritten (zeros would be time 0 of
    assert np.all(np.diff(times, axis=-1) == 1)  # env 0 only; env 1's would be -1000)
    # once wrapped, windows never straddle the newest/oldest boundary
    replay = fill(ring(1, 16), 7, 4)  # times 12..27 held
    slots = sample(replay, jax.random.key(1), jnp.arange(1), 5000, window)
    times = np.asarray(gather(replay, slots[..., None] + jnp.arange(window)))
    assert times.min() == 12 and times.max() == 27 and np.all(np.diff(times, axis=-1) == 1)


def test_sampling_is_uniform_over_the_held_items():
    replay = fill(ring(2, 16), 6, 4)  # wrapped: times 8..23 held
    n = 32_000
    slots = sample(replay, jax.random.key(2), jnp.arange(2), n)
    times = np.asarray(gather(replay, slots)) - 1000 * np.arange(2)[:, None]
    counts = np.stack([np.bincount(t - 8, minlength=16) for t in times])  # [B, 16]
    assert counts.shape == (2, 16) and counts.sum() == 2 * n
    # chi-square with 15 degrees of freedom: P(chi2 > 37.7) = 0.001
    expected = n / 16
    chi2 = ((counts - expected) ** 2 / expected).sum(1)
    assert np.all(chi2 < 37.7), chi2


def test_each_env_samples_with_its_own_key():
    # env 1 alone (as on a second device) draws what it draws next to env 0
    both = fill(ring(2, 8), 2, 4)
    alone = jax.tree.map(lambda x: x[1:], both)
    a = sample(both, jax.random.key(3), jnp.array([0, 1]), 50)[1]
    b = sample(alone, jax.random.key(3), jnp.array([1]), 50)[0]
    np.testing.assert_array_equal(a, b)


def numpy_n_step(reward, terminated, truncated, gamma):
    ret, k = 0.0, 0
    for k in range(len(reward)):
        ret += gamma**k * reward[k]
        if terminated[k] or truncated[k]:
            break
    return ret, 0.0 if terminated[k] else gamma ** (k + 1), k


@pytest.mark.parametrize("ends", [(), (("term", 1),), (("trunc", 1),), (("trunc", 0),),
                                  (("term", 2), ("trunc", 1)), (("term", 3),)])
def test_n_step_return_stops_at_episode_end_and_bootstraps_truncation(ends):
    reward = np.array([1.0, 2.0, 3.0, 4.0])
    term, trunc = np.zeros(4, bool), np.zeros(4, bool)
    for kind, t in ends:
        (term if kind == "term" else trunc)[t] = True
    got = n_step_return(jnp.asarray(reward), jnp.asarray(term), jnp.asarray(trunc), 0.9)
    want = numpy_n_step(reward, term, trunc, 0.9)
    np.testing.assert_allclose([float(g) for g in got], want, rtol=1e-6)


def test_n_step_matches_rlax_with_per_step_lambda():
    rlax = pytest.importorskip("rlax")
    rng = np.random.default_rng(0)
    n, T = 3, 12
    reward = rng.normal(size=T).astype(np.float32)
    next_value = rng.normal(size=T).astype(np.float32)
    term = np.zeros(T, bool)
    trunc = np.zeros(T, bool)
    term[4], trunc[8] = True, True
    # rlax: discount 0 at termination, lambda 0 at truncation (bootstrap from V(final obs))
    ref = rlax.n_step_bootstrapped_returns(reward, 0.97 * (1 - term), next_value, n,
                                           lambda_t=1.0 - trunc)
    for t in range(T - n + 1):
        ret, discount, last = n_step_return(jnp.asarray(reward[t:t + n]),
                                            jnp.asarray(term[t:t + n]),
                                            jnp.asarray(trunc[t:t + n]), 0.97)
        target = ret + discount * next_value[t + int(last)]
        np.testing.assert_allclose(target, ref[t], rtol=1e-5, atol=1e-5)


def make_traj(t0, num_steps, num_envs):
    time = stamps(t0, num_steps, num_envs).astype(jnp.float32)
    zeros = jnp.zeros((num_steps, num_envs), bool)
    return Trajectory(obs=time[..., None], action=jnp.zeros((num_steps, num_envs), jnp.int32),
                      reward=time, terminated=zeros, truncated=zeros,
                      next_obs=time[..., None] + 1, extras={},
                      env_id=jnp.broadcast_to(jnp.arange(num_envs), (num_steps, num_envs)),
                      policy_version=jnp.zeros((num_steps, num_envs), jnp.int32),
                      step=time.astype(jnp.int32) % 1000)


def test_samples_per_insert_is_fixed_by_the_config():
    cfg = jra.DQNConfig(num_envs=2, num_steps=4, batch_size=4, samples_per_insert=3.0,
                        buffer_size=64, learning_starts=16, n_step=2, gamma=0.5)
    assert cfg.gradient_steps == 3 * 8 // 4
    item = replay_buffer.Transition(jnp.zeros(1), jnp.zeros((), jnp.int32), 0.0, False, False,
                                    jnp.zeros(1))
    replay = with_env_axis(PerEnv(replay_buffer.init(item, cfg.capacity_per_env)), 2).value

    def count_step(seen, batch):  # a "gradient step" that records the batch
        return seen + 1, {"obs": batch.obs[:, 0], "ret": batch.n_step_return,
                          "next": batch.next_obs[:, 0]}

    learn = jax.jit(replay_buffer.insert_then_train, static_argnums=0)
    steps = jnp.int32(0)
    for update in range(4):
        steps, replay, metrics = learn(count_step, steps, replay, make_traj(4 * update, 4, 2),
                                       jax.random.key(update), cfg)
        ready = (update + 1) * 8 >= cfg.learning_starts
        assert int(steps) == (update >= 1) * (update) * cfg.gradient_steps
        assert float(metrics["samples_per_insert"]) == (3.0 if ready else 0.0)
    # a 2-step target: r_t + 0.5 r_{t+1}, bootstrapping from next_obs of step t+1
    obs, ret, nxt = (np.asarray(metrics[k]) for k in ("obs", "ret", "next"))
    np.testing.assert_allclose(ret, obs + 0.5 * (obs + 1))
    np.testing.assert_allclose(nxt, obs + 2)


def test_a_batch_does_not_depend_on_which_envs_share_a_device():
    cfg = jra.SACConfig(num_envs=2, num_steps=4, batch_size=8, samples_per_insert=8.0,
                        buffer_size=64, learning_starts=8, n_step=2)
    item = replay_buffer.Transition(jnp.zeros(1), jnp.zeros(1), 0.0, False, False, jnp.zeros(1))
    both = with_env_axis(PerEnv(replay_buffer.init(item, cfg.capacity_per_env)), 2).value
    for update in range(3):
        traj = make_traj(4 * update, 4, 2)
        both = insert(both, replay_buffer.transitions(traj._replace(action=traj.obs)))
    alone = jax.tree.map(lambda x: x[1:], both)  # env 1's ring, as on a second device
    batch = jax.jit(replay_buffer.sample_batch, static_argnums=3)
    a = batch(both, jax.random.key(0), jnp.array([0, 1]), cfg)
    b = batch(alone, jax.random.key(0), jnp.array([1]), cfg)
    per_env = cfg.batch_size // cfg.num_envs
    for x, y in zip(a[:-1], b[:-1]):
        np.testing.assert_array_equal(x[per_env:], y)
    np.testing.assert_array_equal(jax.random.key_data(a.key[per_env:]), jax.random.key_data(b.key))
    assert len(set(np.asarray(jax.random.key_data(a.key))[:, 0].tolist())) == 8  # all distinct


@pytest.mark.timeout(300)
def test_samples_per_insert_holds_under_the_async_runner():
    # Free-running: actors run ahead and batches past max_staleness are dropped; the learner
    # inserts each trajectory it trains on and then takes cfg.gradient_steps sampled steps.
    # The counters count rows inserted and drawn; the expectations come from elsewhere: the
    # run's own update count and the gradient steps DQN counted.
    cfg = jra.DQNConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 20, buffer_size=128,
                        batch_size=16, samples_per_insert=4.0, learning_starts=64,
                        runner=jaxrl_async.config.shared.AsyncConfig(deterministic=False, lag=0,
                                                              max_staleness=0))
    out = jra.train(cfg, seed=0, progress=False)
    replay = out.state.learner.replay.value
    updates, steps_taken = int(out.state.update), int(out.state.learner.gradient_steps)
    inserted, sampled = int(np.sum(replay.inserted)), int(np.sum(replay.sampled))
    assert inserted == updates * cfg.num_steps * cfg.num_envs
    assert sampled == steps_taken * cfg.batch_size
    first_trained = -(-cfg.learning_starts // cfg.steps_per_update)  # ceil
    trained_rows = (updates - first_trained + 1) * cfg.steps_per_update
    assert sampled == cfg.samples_per_insert * trained_rows
    # the env steps the actors collected include dropped ones: drawn rows per collected step
    # stay at or below the ratio
    assert sampled <= cfg.samples_per_insert * out.timing["env_steps_collected"]
    spi = np.asarray(out.metrics["samples_per_insert"])
    assert np.all(spi[first_trained - 1:] == cfg.samples_per_insert)
    assert np.all(spi[:first_trained - 1] == 0)
