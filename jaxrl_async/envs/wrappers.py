"""Wrappers over batched envs: flatten, clip actions, episode statistics, obs normalisation."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.envs.core import VecEnv


class Wrapper(VecEnv):
    def __init__(self, env: VecEnv):
        self.env = env
        self.spec = env.spec

    def reset(self, keys: jax.Array):
        return self.env.reset(keys)

    def step(self, keys: jax.Array, state: Any, action: jax.Array):
        return self.env.step(keys, state, action)


class FlattenObservation(Wrapper):
    """Observations ``[B, *shape]`` become ``[B, prod(shape)]``."""

    def __init__(self, env: VecEnv):
        super().__init__(env)
        size = int(np.prod(env.spec.obs_shape))
        self.spec = dataclasses.replace(env.spec, obs_shape=(size,))

    def reset(self, keys: jax.Array):
        obs, state = self.env.reset(keys)
        return obs.reshape(obs.shape[0], -1), state

    def step(self, keys: jax.Array, state: Any, action: jax.Array):
        obs, state, reward, terminated, truncated, info = self.env.step(keys, state, action)
        final = info["final_observation"]
        info = {**info, "final_observation": final.reshape(final.shape[0], -1)}
        return obs.reshape(obs.shape[0], -1), state, reward, terminated, truncated, info


class ClipAction(Wrapper):
    """Clip continuous actions to the action space before stepping (the policy keeps its sample)."""

    def step(self, keys: jax.Array, state: Any, action: jax.Array):
        low = jnp.asarray(self.spec.action_low).reshape(self.spec.action_shape)
        high = jnp.asarray(self.spec.action_high).reshape(self.spec.action_shape)
        return self.env.step(keys, state, jnp.clip(action, low, high))


class EpisodeStatsState(NamedTuple):
    env_state: Any
    episode_return: jax.Array  # [B] running return of the current episode
    episode_length: jax.Array  # [B]


class EpisodeStatistics(Wrapper):
    """Adds ``episode_return``/``episode_length``/``episode_done`` to ``info``.

    ``info["episode_return"][b]`` is the finished episode's undiscounted return where
    ``info["episode_done"][b]`` (terminated or truncated), else the running return.
    """

    def reset(self, keys: jax.Array):
        obs, env_state = self.env.reset(keys)
        zeros = jnp.zeros(keys.shape[0], jnp.float32)
        return obs, EpisodeStatsState(env_state, zeros, zeros.astype(jnp.int32))

    def step(self, keys: jax.Array, state: EpisodeStatsState, action: jax.Array):
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            keys, state.env_state, action
        )
        done = terminated | truncated
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        info = {
            **info,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "episode_done": done,
        }
        state = EpisodeStatsState(
            env_state,
            jnp.where(done, 0.0, episode_return),
            jnp.where(done, 0, episode_length),
        )
        return obs, state, reward, terminated, truncated, info


class RunningMoments(NamedTuple):
    """Running mean/variance of observations, one identical copy per env (leading axis B)."""

    mean: jax.Array  # [B, *obs_shape]
    var: jax.Array  # [B, *obs_shape]
    count: jax.Array  # [B]


class NormalizeState(NamedTuple):
    env_state: Any
    moments: RunningMoments


def _update_moments(m: RunningMoments, obs: jax.Array) -> RunningMoments:
    """Merge the batch ``obs [B, ...]`` into the running moments (Chan et al.)."""
    mean, var, count = m.mean[0], m.var[0], m.count[0]
    batch_mean, batch_var, n = obs.mean(0), obs.var(0), obs.shape[0]
    delta, total = batch_mean - mean, count + n
    new_mean = mean + delta * n / total
    new_var = (var * count + batch_var * n + delta**2 * count * n / total) / total
    b = obs.shape[0]
    return RunningMoments(
        jnp.broadcast_to(new_mean, (b, *new_mean.shape)),
        jnp.broadcast_to(new_var, (b, *new_var.shape)),
        jnp.full((b,), total, jnp.float32),
    )


def normalize(obs: jax.Array, moments: RunningMoments, clip: float = 10.0) -> jax.Array:
    """Standardise ``obs [B, ...]`` with the running moments and clip to ``[-clip, clip]``."""
    z = (obs - moments.mean) / jnp.sqrt(moments.var + 1e-8)
    return jnp.clip(z, -clip, clip)


class NormalizeObservation(Wrapper):
    """Standardise observations with running statistics kept in the env state.

    Being in the env state, the statistics are part of the training state (checkpointed with it).
    Each device updates them from its own envs.
    """

    def __init__(self, env: VecEnv, clip: float = 10.0):
        super().__init__(env)
        self.clip = clip

    def reset(self, keys: jax.Array):
        obs, env_state = self.env.reset(keys)
        b = keys.shape[0]
        shape = (b, *obs.shape[1:])
        moments = RunningMoments(
            jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.full((b,), 1e-4)
        )
        moments = _update_moments(moments, obs.astype(jnp.float32))
        return normalize(obs, moments, self.clip), NormalizeState(env_state, moments)

    def step(self, keys: jax.Array, state: NormalizeState, action: jax.Array):
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            keys, state.env_state, action
        )
        moments = _update_moments(state.moments, obs.astype(jnp.float32))
        final = normalize(info["final_observation"], moments, self.clip)
        info = {**info, "final_observation": final}
        obs = normalize(obs, moments, self.clip)
        return obs, NormalizeState(env_state, moments), reward, terminated, truncated, info
