"""PPO under the sync runner: learning (fixed seeds), device-count invariance, host-level train."""

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.run.sinks import final_return, window_returns

# PureJaxRL's reference CartPole-v1 settings (the PPOConfig defaults).
CARTPOLE = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=128, total_timesteps=500_000,
                         update_epochs=4, num_minibatches=4, lr=2.5e-4, anneal_lr=True,
                         gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01)


@pytest.fixture(scope="module")
def cartpole_8_seeds():
    train = jax.jit(jax.vmap(jra.make_train(CARTPOLE)))  # 8 seeds, one compile
    return train(jax.random.split(jax.random.key(42), 8))


def test_ppo_learns_cartpole_7_of_8_seeds(cartpole_8_seeds):
    returns = np.asarray(cartpole_8_seeds.metrics["episode_return"])  # [seeds, updates]
    assert returns.shape == (8, CARTPOLE.num_updates)  # one row per update
    last10 = window_returns(cartpole_8_seeds.metrics, 10)
    assert (last10 >= 450).sum() >= 7, last10
    assert np.all(np.nanmean(returns[:, :5], 1) < 100)  # and it started from a random policy


def test_metrics_are_per_update_scalars(cartpole_8_seeds):
    m = cartpole_8_seeds.metrics
    for name in ["episode_return", "loss", "entropy", "approx_kl", "clip_frac", "env_steps"]:
        assert m[name].shape == (8, CARTPOLE.num_updates), name
    np.testing.assert_array_equal(m["env_steps"][0, :3], [512, 1024, 1536])
    assert np.all(np.asarray(cartpole_8_seeds.state.update) == CARTPOLE.num_updates)


def test_continuous_ppo_improves_on_pendulum():
    # Budget: 100k env steps. A random policy scores about -1200 to -1400 on Pendulum-v1 (we
    # check the first updates too); -400 is a policy that swings up and balances in most
    # episodes. Value clipping is off: with Pendulum's return scale (-1000s) it stalls the
    # value function; gamma 0.95 and observation normalisation as usual for this task.
    cfg = jra.PPOConfig(env="Pendulum-v1", total_timesteps=100_352, num_envs=16, num_steps=64,
                        lr=1e-3, update_epochs=10, num_minibatches=8, ent_coef=0.0,
                        activation="relu", clip_value=False, gamma=0.95, normalize_obs=True)
    # Four seeds, three of which must balance: a seed's fate hangs on float rounding (the same
    # seed ended at -173 on one CPU and -473 on another, CI 2026-12-04), one seed in about 20
    # stalls near -450, and a PPO that does not learn Pendulum stays near -1200 on every seed.
    out = jax.jit(jax.vmap(jra.make_train(cfg)))(jax.random.split(jax.random.key(1), 4))
    returns = np.asarray(out.metrics["episode_return"])
    first, last = np.nanmean(returns[:, :8]), window_returns(out.metrics, 10)
    assert first < -1000, first
    assert np.sum(last >= -400) >= 3 and np.all(last >= -800), last


SMALL = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                      update_epochs=2, total_timesteps=4 * 16 * 4)


def test_two_devices_compute_what_one_device_computes(devices):
    one = jax.jit(jra.make_train(SMALL))(jax.random.key(3))
    two_cfg = jra.PPOConfig(**{**SMALL.__dict__, "runner": jra.SyncConfig(num_devices=2)})
    two = jax.jit(jra.make_train(two_cfg))(jax.random.key(3))
    for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(two.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    for name in one.metrics:
        np.testing.assert_allclose(one.metrics[name], two.metrics[name], rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    # and the env states, sharded over devices, come back in the same global order
    np.testing.assert_allclose(one.state.env.obs, two.state.env.obs, rtol=1e-5, atol=1e-5)


def test_host_level_train_returns_what_make_train_returns(tmp_path):
    cfg = jra.PPOConfig(**{**SMALL.__dict__, "log_every": 3})
    pure = jax.jit(jra.make_train(cfg))(jax.random.key(0))
    host = jra.train(cfg, seed=0, run_dir=tmp_path / "run", progress=False)
    for a, b in zip(jax.tree.leaves(pure.params), jax.tree.leaves(host.params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for name in pure.metrics:
        np.testing.assert_allclose(pure.metrics[name], host.metrics[name], rtol=1e-5, atol=1e-6)
    assert host.timing["sps"] > 0 and host.timing["compile_s"] > 0
    files = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"config.json", "metrics.jsonl", "learning_curve.png", "summary.json"} <= files
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == cfg.num_updates
    assert final_return(host.metrics) == pytest.approx(final_return(pure.metrics))


def test_gradient_accumulation_gives_the_full_batch_result():
    full = jax.jit(jra.make_train(SMALL))(jax.random.key(4))
    accum_cfg = jra.PPOConfig(**{**SMALL.__dict__, "grad_accum_steps": 4})
    accum = jax.jit(jra.make_train(accum_cfg))(jax.random.key(4))
    for a, b in zip(jax.tree.leaves(full.params), jax.tree.leaves(accum.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(full.metrics["loss"], accum.metrics["loss"], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="PPOConfig.grad_accum_steps must divide"):
        jra.PPOConfig(**{**SMALL.__dict__, "grad_accum_steps": 3})


def test_sample_layout_minibatches_partition_the_rollout(devices):
    # minibatch_layout="sample": every env's time steps permuted on their own, a minibatch
    # takes N/M of each env's: every (step, env) sample exactly once per epoch, minibatches
    # mixing times across envs, and the same when the envs are split over 2 devices.
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    from jaxrl_async.algos.base import shuffled_minibatches

    n, b, m = 16, 6, 4
    ids = np.arange(n * b).reshape(n, b)  # sample id = step * b + env
    data = (ids, np.stack([ids, -ids], -1))  # a trailing feature axis too
    key = jax.random.key(7)
    ids_mb, feat_mb = jax.jit(lambda d: shuffled_minibatches(key, d, m, "sample"))(data)
    ids_mb, feat_mb = np.asarray(ids_mb), np.asarray(feat_mb)
    assert ids_mb.shape == (m, n // m, b) and feat_mb.shape == (m, n // m, b, 2)
    np.testing.assert_array_equal(feat_mb, np.stack([ids_mb, -ids_mb], -1))
    np.testing.assert_array_equal(np.sort(ids_mb.ravel()), np.arange(n * b))  # each once
    np.testing.assert_array_equal(ids_mb % b, np.broadcast_to(np.arange(b), ids_mb.shape))
    steps = ids_mb // b  # [m, n/m, b]: the time step each slot holds, per env
    assert (steps != steps[..., :1]).any(), "the envs share their time steps: 'time' layout"
    # each env's slots, minibatch after minibatch, are a permutation of its own n steps
    np.testing.assert_array_equal(np.sort(steps.reshape(n, b), 0),
                                  np.broadcast_to(np.arange(n)[:, None], (n, b)))
    # "time" layout, for contrast: one permutation shared by all envs
    time_mb = np.asarray(shuffled_minibatches(key, ids, m, "time"))
    np.testing.assert_array_equal(time_mb // b, np.broadcast_to((time_mb // b)[..., :1],
                                                                time_mb.shape))
    # the envs split over 2 devices (global env ids along the axis): the same minibatches
    mesh = Mesh(np.array(devices[:2]), ("d",))
    split = jax.jit(jax.shard_map(lambda x: shuffled_minibatches(key, x, m, "sample", "d"),
                                  mesh=mesh, in_specs=P(None, "d"),
                                  out_specs=P(None, None, "d")))
    np.testing.assert_array_equal(np.asarray(split(ids)), ids_mb)


def test_minibatch_layout_is_validated():
    with pytest.raises(ValueError, match="minibatch_layout"):
        jra.PPOConfig(minibatch_layout="env")
    with pytest.raises(ValueError, match="minibatch_layout.*bptt_length"):
        jra.RecurrentPPOConfig(env="CartPole-v1", minibatch_layout="sample")
