"""Observation and reward normalisation against gymnasium's own wrappers, wrapped around each
env as CleanRL's ``ppo_continuous_action.py`` wraps them (normalise, clip to ±10), over the same
stream of observations, rewards and episode ends: the host envs' normaliser, and the device
envs' reward normaliser against it."""

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.envs.host import HostStep
from jaxrl_async.envs.host_normalize import (
    Normalization,
    add_one,
    fresh_moments,
    init_state,
    normalize_reset,
    normalize_step,
    pooled,
)

CLIP = 10.0
WALK = "jaxrl-test/Float64Walk-v0"


class Float64Walk(gymnasium.Env):
    """float64 observations, as MuJoCo's: a drifting random walk in 5-D that terminates when
    it leaves a ball, truncated at 300 steps; reward its first coordinate."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (5,), np.float64)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (5,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.normal(0.0, 1.0, 5) * [1, 10, 100, 0.1, 1]
        return self.x.copy(), {}

    def step(self, action):
        self.x = self.x + np.asarray(action, np.float64) + self.np_random.normal(0.3, 1.0, 5)
        return self.x.copy(), float(self.x[0]), bool(np.abs(self.x[0]) > 30), False, {}


gymnasium.register(WALK, entry_point=Float64Walk, max_episode_steps=300)


def cleanrl_wrapped(env_id: str, gamma: float, obs_clip: float, reward_clip: float):
    env = gymnasium.make(env_id)
    env = gymnasium.wrappers.NormalizeObservation(env)
    env = gymnasium.wrappers.TransformObservation(
        env, lambda o: np.clip(o, -obs_clip, obs_clip), env.observation_space)
    env = gymnasium.wrappers.NormalizeReward(env, gamma=gamma)
    return gymnasium.wrappers.TransformReward(env, lambda r: np.clip(r, -reward_clip,
                                                                     reward_clip))


@pytest.mark.parametrize("env_id, num_envs, reward_clip", [
    ("CartPole-v1", 1, CLIP),  # terminations every ~20 random steps
    ("Pendulum-v1", 1, CLIP),  # truncations only (200 steps): G is never cut
    ("CartPole-v1", 3, CLIP),
    ("MountainCarContinuous-v0", 2, 0.05),  # a reward clip that bites
    (WALK, 2, CLIP),  # float64 observations (ours cast to float32 first), float64 moments
])
def test_the_numbers_of_gymnasiums_wrappers_on_each_env(env_id, num_envs, reward_clip):
    gamma, steps = 0.99, 10_000 // num_envs
    norm = Normalization(obs=True, reward=True, gamma=gamma, obs_clip=CLIP,
                         reward_clip=reward_clip)
    wrapped = [cleanrl_wrapped(env_id, gamma, CLIP, reward_clip) for _ in range(num_envs)]
    raw = [gymnasium.make(env_id) for _ in range(num_envs)]
    for env in raw:
        env.action_space.seed(0)
    want_obs = np.stack([w.reset(seed=i)[0] for i, w in enumerate(wrapped)])
    first = np.stack([r.reset(seed=i)[0] for i, r in enumerate(raw)]).astype(np.float32)
    state = init_state(norm, num_envs, first.shape[1:], raw[0].observation_space.dtype)
    got_obs = normalize_reset(norm, state, slice(None), first)
    worst, ends = float(np.abs(got_obs - want_obs).max()), 0
    for _ in range(steps):
        actions = [env.action_space.sample() for env in raw]
        want = [w.step(a) for w, a in zip(wrapped, actions)]
        got_raw = [r.step(a) for r, a in zip(raw, actions)]
        final = np.stack([g[0] for g in got_raw]).astype(np.float32)
        terminated = np.array([g[2] for g in got_raw])
        truncated = np.array([g[3] for g in got_raw])
        obs, want_next = final.copy(), np.stack([w[0] for w in want])
        for i in np.flatnonzero(terminated | truncated):  # same-step autoreset
            obs[i] = raw[i].reset()[0]
            want_next[i] = wrapped[i].reset()[0]
            ends += 1
        out = normalize_step(norm, state, slice(None), HostStep(
            obs, np.array([g[1] for g in got_raw], np.float32), terminated, truncated, final))
        worst = max(worst,
                    float(np.abs(out.final_obs - np.stack([w[0] for w in want])).max()),
                    float(np.abs(out.obs - want_next).max()),
                    float(np.abs(out.reward - np.array([w[1] for w in want])).max()))
        assert out.obs.dtype == out.final_obs.dtype == out.reward.dtype == np.float32
    assert ends >= 10
    assert worst <= (1e-5 if env_id == WALK else 1e-6), worst  # the bar: 1e-5
    want_mean = np.stack([w.env.env.env.obs_rms.mean for w in wrapped])
    assert state.obs.mean.dtype == want_mean.dtype  # the observations' dtype
    np.testing.assert_allclose(state.obs.mean, want_mean, rtol=1e-5 if env_id == WALK else 1e-6)
    np.testing.assert_allclose(state.reward.var, [w.env.return_rms.var for w in wrapped],
                               rtol=1e-6)


def test_nothing_normalised_is_the_stream_itself():
    norm = Normalization(obs=False, reward=False, gamma=0.99, obs_clip=CLIP, reward_clip=CLIP)
    assert init_state(norm, 2, (3,)) == ()
    out = HostStep(np.ones((2, 3), np.float32), np.ones(2, np.float32), np.zeros(2, bool),
                   np.zeros(2, bool), np.ones((2, 3), np.float32))
    assert normalize_step(norm, (), slice(None), out) is out


def test_pooled_moments_are_those_of_all_values_together():
    rng = np.random.default_rng(1)
    values = [rng.normal(i, 1 + i, (50 + 10 * i, 3)) for i in range(4)]
    moments = fresh_moments((4, 3))
    for step in range(max(len(v) for v in values)):
        for i, v in enumerate(values):
            if step < len(v):
                one = add_one(type(moments)(*(x[i:i + 1] for x in moments)), v[step][None])
                for x, y in zip(moments, one):
                    x[i:i + 1] = y
    together = np.concatenate(values)
    all_in_one = fresh_moments((1, 3))
    for row in together:
        all_in_one = add_one(all_in_one, row[None])
    merged = pooled(moments)
    np.testing.assert_allclose(merged.mean, all_in_one.mean[0], rtol=1e-4)
    np.testing.assert_allclose(merged.var, all_in_one.var[0], rtol=1e-3)
    np.testing.assert_allclose(merged.mean, together.mean(0), rtol=1e-4)
    assert merged.count == pytest.approx(len(together) + 4e-4)


class Stream(jra.envs.VecEnv):
    """A JAX env that replays a recorded stream: step t of env b returns ``reward[t, b]`` and
    ``terminated[t, b]`` (observations: the step count)."""

    def __init__(self, reward: np.ndarray, terminated: np.ndarray):
        self.reward, self.terminated = jnp.asarray(reward), jnp.asarray(terminated)
        self.spec = jra.envs.EnvSpec(env_id="jaxrl-test/stream", obs_shape=(1,),
                                     obs_dtype=np.dtype(np.float32), discrete=True,
                                     num_actions=2)

    def reset(self, keys):
        return jnp.zeros((keys.shape[0], 1)), jnp.int32(0)

    def step(self, keys, t, action):
        obs = jnp.full((keys.shape[0], 1), t + 1.0)
        info = {"final_observation": obs}
        zeros = jnp.zeros(keys.shape[0], bool)
        return obs, t + 1, self.reward[t], self.terminated[t], zeros, info


def test_device_envs_scale_rewards_as_gymnasiums_wrapper_does():
    # jra.envs.NormalizeReward (float32, in the env state) against the host normaliser (float64,
    # gymnasium's numbers to 1e-7 above) on the same stream of rewards and terminations.
    rng = np.random.default_rng(3)
    steps, envs, gamma = 2000, 3, 0.97
    reward = rng.normal(0.5, 2.0, (steps, envs)).astype(np.float32)
    terminated = rng.random((steps, envs)) < 0.02
    env = jra.envs.NormalizeReward(Stream(reward, terminated), gamma, clip=CLIP)
    norm = Normalization(obs=False, reward=True, gamma=gamma, obs_clip=CLIP, reward_clip=CLIP)
    state = init_state(norm, envs, (1,))
    keys = jax.random.split(jax.random.key(0), envs)
    _, env_state = env.reset(keys)
    step = jax.jit(env.step)
    worst = 0.0
    for t in range(steps):
        _, env_state, scaled, _, _, _ = step(keys, env_state, jnp.zeros(envs, jnp.int32))
        obs = np.zeros((envs, 1), np.float32)
        want = normalize_step(norm, state, slice(None), HostStep(
            obs, reward[t], terminated[t], np.zeros(envs, bool), obs)).reward
        worst = max(worst, float(np.abs(np.asarray(scaled) - want).max()))
    assert worst <= 1e-4, worst
    np.testing.assert_allclose(env_state.return_moments.var, state.reward.var, rtol=1e-4)
    np.testing.assert_allclose(env_state.discounted, state.discounted, rtol=1e-4, atol=1e-4)


def test_a_device_run_normalises_rewards_and_reports_raw_returns():
    cfg = jra.PPOConfig(env="Pendulum-v1", num_envs=4, num_steps=50, total_timesteps=4 * 50 * 8,
                        num_minibatches=2,
                        normalize_reward=True, fast_compile=True)
    out = jax.jit(jra.make_train(cfg))(jax.random.key(0))
    returns = out.metrics["episode_return"]
    assert np.nanmax(returns) < -200  # Pendulum's raw returns, not the scaled rewards' sums
    np.testing.assert_allclose(out.state.env.env_state.return_moments.count, 1e-4 + 400)
