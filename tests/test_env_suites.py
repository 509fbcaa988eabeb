"""The env suites behind make_env (each an optional extra; a suite's tests are skipped only when
it is not installed): 4 envs with episodes of different lengths keep the library's contract
against the raw env stepped unbatched with the same keys (observations, the true final
observation, rewards, terminated/truncated as the suite's own flags say), and PPO trains a few
updates under both runners. The masked categorical head never samples an illegal action."""

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.envs import make_env
from jaxrl_async.envs.core import split_step_keys
from jaxrl_async.networks import Categorical, mask_logits

B, T = 4, 20


def needs(module):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"the optional extra {module} is not installed")


# ----------------------------------------------------------------------------- raw references
# Each: (reset(key) -> raw state, step(key, raw, action) -> (raw, obs, final_obs, reward,
# terminated, truncated) from the suite's own public API and flags, obs(raw) -> observation).
def xminigrid_raw(kw):
    import xminigrid

    env, params = xminigrid.make("MiniGrid-Empty-5x5", **kw)

    def step(key, ts, a):
        ts = env.step(params, ts, a)  # no auto-reset in xminigrid's env itself
        last = ts.step_type == 2  # StepType.LAST
        return ts, ts.observation, ts.reward, last & (ts.discount == 0), last & (ts.discount > 0)

    return (lambda key: env.reset(params, key)), step, lambda ts: ts.observation


def navix_raw(kw):
    import navix

    env = navix.make("Navix-Empty-5x5-v0", **kw)

    def step(key, ts, a):
        ts = env.step(ts, a)  # the public step: resets only on the call after the last step
        return ts, ts.observation, ts.reward, ts.step_type == 2, ts.step_type == 1

    return env.reset, step, lambda ts: ts.observation


def jumanji_raw(kw):
    import jumanji

    from jaxrl_async.envs.jumanji import flatten

    env = jumanji.make("Snake-v1", **kw)

    def step(key, carry, a):
        state, ts = env.step(carry[0], a)
        last = ts.step_type == 2
        return ((state, ts), flatten(ts.observation), ts.reward, last & (ts.discount == 0),
                last & (ts.discount > 0))

    return env.reset, step, lambda carry: flatten(carry[1].observation)


def craftax_raw(kw):
    from craftax.craftax_env import make_craftax_env_from_name

    env = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=False)
    params = env.default_params.replace(**kw)

    def step(key, carry, a):
        obs, state, reward, done, _ = env.step(key, carry[1], a, params)
        time_up = state.timestep >= params.max_timesteps
        died = state.player_health <= 0
        truncated = done & time_up & ~died
        return (obs, state), obs, reward, done & ~truncated, truncated

    return (lambda key: env.reset(key, params)), step, lambda carry: carry[0]


SUITES = {
    "xminigrid": ("xminigrid/MiniGrid-Empty-5x5", dict(max_steps=5), xminigrid_raw),
    "navix": ("navix/Navix-Empty-5x5-v0", dict(max_steps=5), navix_raw),
    "jumanji": ("jumanji/Snake-v1", dict(time_limit=7), jumanji_raw),
    "craftax": ("craftax/Craftax-Classic-Symbolic-v1", dict(max_timesteps=6), craftax_raw),
}
SLOW = pytest.mark.skipif(not os.environ.get("JRA_SUITE_PPO"), reason="Craftax's step and world "
                          "generation compile for minutes on a CPU: JRA_SUITE_PPO=1 runs it")
PARAMS = [pytest.param(name, marks=[needs(name)] + ([SLOW] if name == "craftax" else []),
                       id=name) for name in SUITES]


@pytest.mark.parametrize("suite", PARAMS)
def test_suite_keeps_the_contract_against_the_raw_env(suite):
    env_id, kw, raw_of = SUITES[suite]
    env = make_env(env_id, episode_stats=False, **kw)
    spec = env.spec
    reset_raw, step_raw, obs_raw = raw_of(kw)
    step_raw, reset_raw = jax.jit(step_raw), jax.jit(reset_raw)

    keys = jax.random.split(jax.random.key(0), B)
    obs, state = jax.jit(env.reset)(keys)
    assert obs.shape == (B, *spec.obs_shape) and obs.dtype == spec.obs_dtype
    raws = [reset_raw(k) for k in keys]
    step = jax.jit(env.step)
    rng, lengths, ended, counts = np.random.default_rng(0), np.zeros(B, int), [], [0, 0]
    for t in range(T):
        keys = jax.random.split(jax.random.key(t + 1), B)
        action = jnp.asarray(rng.integers(0, spec.num_actions, B), jnp.int32)
        if spec.action_mask:  # sample legal actions through the masked head
            logits = jax.random.normal(jax.random.key(100 + t), (B, spec.num_actions))
            action = Categorical(mask_logits(logits, obs)).sample(jax.random.key(200 + t))
            assert np.all(np.asarray(obs)[np.arange(B), -spec.num_actions + action] == 1)
        obs, state, reward, terminated, truncated, info = step(keys, state, action)
        assert obs.shape == (B, *spec.obs_shape) and reward.shape == (B,)
        assert info["final_observation"].shape == (B, *spec.obs_shape)
        step_keys, reset_keys = split_step_keys(keys)
        lengths += 1
        for b in range(B):
            raws[b], final, r, term, trunc = step_raw(step_keys[b], raws[b], action[b])
            np.testing.assert_array_equal(np.asarray(info["final_observation"][b]),
                                          np.asarray(final))
            assert float(reward[b]) == pytest.approx(float(r))
            assert (bool(terminated[b]), bool(truncated[b])) == (bool(term), bool(trunc))
            if term or trunc:
                counts[0 if term else 1] += 1
                ended.append(int(lengths[b]))
                lengths[b] = 0
                raws[b] = reset_raw(reset_keys[b])
            np.testing.assert_array_equal(np.asarray(obs[b]), np.asarray(obs_raw(raws[b])))
    assert len(ended) >= B, (counts, ended)  # every env ended an episode
    # Snake's time limit is a termination by Jumanji's own flags (discount 0; its observation
    # holds the step count); the other suites' time limits are truncations
    assert counts[1] > 0 if suite != "jumanji" else counts[0] > 0, counts
    if spec.max_episode_steps:
        assert max(ended) <= spec.max_episode_steps


# PPO on a suite env compiles the env's step into the runners' programs: 30-90 s a runner on a
# shared 2-core CPU. By default it runs on Jumanji (the masked head through both runners);
# JRA_SUITE_PPO=1 (make test-suites) runs it on every installed suite, Craftax included.
FULL = bool(os.environ.get("JRA_SUITE_PPO"))
PPO_SUITES = [p for p in PARAMS if FULL or p.id == "jumanji"]


@pytest.mark.parametrize("suite", PPO_SUITES)
@pytest.mark.parametrize("runner", ["sync", "async"])
def test_ppo_trains_a_few_updates(suite, runner):
    cfg = jra.PPOConfig(env=SUITES[suite][0], torso="mlp", num_envs=4, num_steps=8,
                        update_epochs=1, num_minibatches=1, total_timesteps=64, log_every=1,
                        fast_compile=True,
                        runner=jra.SyncConfig() if runner == "sync" else jra.AsyncConfig())
    loss = np.asarray(jra.train(cfg, seed=0, progress=False).metrics["loss"])
    assert loss.shape == (2,) and np.all(np.isfinite(loss))


def test_masked_head_never_samples_an_illegal_action():
    mask = jnp.array([[0, 1, 0, 1], [1, 0, 0, 0], [0, 0, 1, 1]], jnp.float32)
    obs = jnp.concatenate([jnp.ones((3, 5)), mask], -1)  # the mask is the tail
    logits = jnp.array([[9.0, 0, 5, 0], [0, 9, 9, 9], [9, 9, 0, -3]])
    dist = Categorical(mask_logits(logits, obs))
    samples = jax.vmap(dist.sample)(jax.random.split(jax.random.key(0), 2000))  # [2000, 3]
    assert np.all(np.asarray(mask)[np.arange(3), np.asarray(samples)] == 1)
    np.testing.assert_array_equal(np.asarray(dist.mode()), [1, 0, 2])
    # the probabilities are the softmax over the legal actions alone
    p = np.exp(np.asarray(jax.nn.log_softmax(dist.logits)))
    np.testing.assert_allclose(p[2, 2:], np.exp([0, -3]) / np.exp([0, -3]).sum(), rtol=1e-6)
    assert np.all(p[np.asarray(mask) == 0] == 0)


@needs("jumanji")
def test_masked_env_is_refused_where_the_mask_would_be_lost():
    with pytest.raises(ValueError, match="DQNConfig.env must have no action mask.*ppo, impala"):
        jra.DQNConfig(env="jumanji/Snake-v1")
    with pytest.raises(ValueError, match="PPOConfig.normalize_obs must be False"):
        jra.PPOConfig(env="jumanji/Snake-v1", normalize_obs=True)
