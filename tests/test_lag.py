"""PPO under lag: every return estimate takes both of its values from one critic, and learning
still works when the data is one update old."""

import dataclasses

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.algos import ppo, recurrent_ppo
from jaxrl_async.envs import make_env
from jaxrl_async.networks import RecurrentActorCritic, actor_critic_for
from jaxrl_async.run.sinks import final_return
from tests.test_returns import gae_numpy  # the plain-loop reference, independent of returns.gae

SMALL = jra.PPOConfig(env="CartPole-v1", num_envs=8, num_steps=16, num_minibatches=2,
                      update_epochs=2, total_timesteps=8 * 16 * 6, log_every=3,
                      fast_compile=True)


def record_learner_estimates(monkeypatch, module) -> list[dict]:
    """Wrap ``module.advantages_and_targets`` (what its ``learn`` calls; its last two outputs are
    the advantages and targets) so that every update sends the trajectory, the learner's params
    and the advantages and targets it computed to the host; returns the list they go into."""
    records, original = [], module.advantages_and_targets

    def keep(traj, params, advantages, targets):
        records.append(jax.tree.map(np.asarray, dict(traj=traj, params=params,
                                                     advantages=advantages, targets=targets)))

    def recorded(network, params, traj, cfg):
        out = original(network, params, traj, cfg)
        jax.debug.callback(keep, traj, params, *out[-2:])
        return out

    monkeypatch.setattr(module, "advantages_and_targets", recorded)
    return records


def assert_one_critic(seen: dict, value, next_value, cfg, update: int) -> None:
    """The advantages and targets the learner used equal a NumPy GAE on ``value`` and
    ``next_value``, both from the learner's params."""
    traj = seen["traj"]
    advantages, targets = gae_numpy(traj.reward, value, next_value, traj.terminated,
                                    traj.truncated, cfg.gamma, cfg.gae_lambda)
    np.testing.assert_allclose(seen["advantages"], advantages, rtol=1e-5, atol=1e-5,
                               err_msg=f"advantages of update {update}")
    np.testing.assert_allclose(seen["targets"], targets, rtol=1e-5, atol=1e-5,
                               err_msg=f"targets of update {update}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("runner", [
    jra.SyncConfig(),
    jra.AsyncConfig(lag=1),  # every update learns from data one update old
    jra.AsyncConfig(lag=1, sync_every=2, max_staleness=2),  # staleness 1, 2, 1, 2, ...
], ids=["sync", "lag-1", "staleness-2"])
def test_gae_takes_both_values_from_the_learners_critic(monkeypatch, runner):
    records = record_learner_estimates(monkeypatch, ppo)
    cfg = dataclasses.replace(SMALL, runner=runner)
    out = jra.train(cfg, seed=2, progress=False)
    assert len(records) == cfg.num_updates
    if runner.name == "async":
        assert out.metrics["staleness"].max() == runner.max_staleness  # the lag is there

    spec = make_env(cfg.env).spec
    network = actor_critic_for(spec, cfg.resolved_torso, cfg.hidden_sizes, cfg.activation)
    for update, seen in enumerate(records):
        traj, params = seen["traj"], seen["params"]
        value = np.asarray(network.apply(params, traj.obs, method="value"), np.float64)
        next_value = np.asarray(network.apply(params, traj.next_obs, method="value"), np.float64)
        assert_one_critic(seen, value, next_value, cfg, update)


RECURRENT_SMALL = jra.RecurrentPPOConfig(
    env="MemoryChain-bsuite", num_envs=4, num_steps=16, bptt_length=4, num_minibatches=2,
    update_epochs=2, memory_size=16, hidden_sizes=(16,), total_timesteps=4 * 16 * 5,
    fast_compile=True)


@pytest.mark.timeout(300)
def test_recurrent_gae_takes_both_values_from_the_learners_critic(monkeypatch):
    records = record_learner_estimates(monkeypatch, recurrent_ppo)
    cfg = dataclasses.replace(RECURRENT_SMALL, runner=jra.AsyncConfig(lag=1))
    out = jra.train(cfg, seed=0, progress=False)
    assert len(records) == cfg.num_updates and out.metrics["staleness"].max() == 1

    spec = make_env(cfg.env).spec
    network = RecurrentActorCritic(spec.discrete, spec.num_actions, cfg.memory_size,
                                   tuple(cfg.hidden_sizes), cfg.activation)
    apply = jax.jit(network.apply)
    for update, seen in enumerate(records):
        traj, params = seen["traj"], seen["params"]
        # the GRU stepped by hand from the stored start memory, resetting where "first"
        memory = traj.extras["memory"][0]  # [B, M]
        value, next_value = np.zeros(traj.reward.shape), np.zeros(traj.reward.shape)
        for t in range(traj.reward.shape[0]):
            memory, _, value[t] = apply(params, memory, traj.obs[t], traj.extras["first"][t])
            _, _, next_value[t] = apply(params, memory, traj.next_obs[t],
                                        np.zeros_like(traj.extras["first"][t]))
        assert_one_critic(seen, value, next_value, cfg, update)


# The continuous PPO test's settings (tests/test_ppo.py); value clipping off, so a critic that
# mixed two param versions would be felt in full (it scored about -1250, random, here).
PENDULUM = jra.PPOConfig(env="Pendulum-v1", total_timesteps=100_352, num_envs=16, num_steps=64,
                         lr=1e-3, update_epochs=10, num_minibatches=8, ent_coef=0.0,
                         activation="relu", clip_value=False, gamma=0.95, normalize_obs=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_async_ppo_learns_pendulum_under_lag_1():
    # Budget: 100k env steps, 1 seed (seeds 0, 1, 2 all end above -205, README results).
    cfg = dataclasses.replace(PENDULUM, runner=jra.AsyncConfig(lag=1))
    out = jra.train(cfg, seed=0, progress=False)
    assert np.all(out.metrics["staleness"][1:] == 1)
    assert np.nanmean(out.metrics["episode_return"][:8]) < -1000
    assert final_return(out.metrics) >= -400, out.metrics["episode_return"][-10:]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_async_recurrent_ppo_remembers_under_lag_1():
    # tests/test_recurrent.py's MemoryChain config; budget 30k env steps, 1 seed.
    cfg = jra.RecurrentPPOConfig(env="MemoryChain-bsuite", total_timesteps=30_720, num_envs=32,
                                 num_steps=32, num_minibatches=4, bptt_length=8, memory_size=64,
                                 hidden_sizes=(64,), runner=jra.AsyncConfig(lag=1))
    out = jra.train(cfg, seed=0, progress=False)
    assert np.all(out.metrics["staleness"][1:] == 1)
    assert final_return(out.metrics, last=5) >= 0.8, out.metrics["episode_return"][-5:]


def test_lag_0_takes_the_stored_behaviour_value_and_lag_1_recomputes_it():
    """Under the sync runner (lag 0) GAE's V(obs) is the value the actor stored (the learner's,
    one critic pass saved); under lag its own pass over the rollout. V(next obs) is computed
    either way. A stored value unlike the critic's shows which one was used. Seconds."""
    spec = make_env(SMALL.env).spec
    network = actor_critic_for(spec, SMALL.resolved_torso, SMALL.hidden_sizes, SMALL.activation)
    params = network.init(jax.random.key(0), np.zeros(spec.obs_shape, np.float32))
    t, b = 6, 3
    obs = jax.random.normal(jax.random.key(1), (t, b, *spec.obs_shape))
    next_obs = jax.random.normal(jax.random.key(2), (t, b, *spec.obs_shape))
    zeros = np.zeros((t, b), np.float32)
    stored = np.full((t, b), 100.0, np.float32)
    traj = jra.algos.Trajectory(obs, zeros.astype(np.int32), zeros + 1.0, zeros.astype(bool),
                                zeros.astype(bool), next_obs, {"value": stored}, zeros, zeros)
    critic = np.asarray(network.apply(params, obs, method="value"), np.float64)
    next_value = np.asarray(network.apply(params, next_obs, method="value"), np.float64)
    for runner, value in ((jra.SyncConfig(), stored), (jra.AsyncConfig(lag=1), critic)):
        cfg = dataclasses.replace(SMALL, runner=runner)
        advantages, targets = ppo.advantages_and_targets(network, params, traj, cfg)
        expected = gae_numpy(traj.reward, value, next_value, traj.terminated, traj.truncated,
                             cfg.gamma, cfg.gae_lambda)
        np.testing.assert_allclose(advantages, expected[0], rtol=1e-5, atol=1e-4,
                                   err_msg=runner.name)
