"""Wrappers over batched envs: flatten, clip actions, episode statistics, reward and
observation normalisation."""

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
    """Mean/variance of observations: one copy per env in the env state (leading axis B, all
    equal), or a single copy (no env axis) in ``RunState.obs_moments`` and for evaluation."""

    mean: jax.Array  # [B, *obs_shape] or [*obs_shape]
    var: jax.Array  # [B, *obs_shape] or [*obs_shape]
    count: jax.Array  # [B] or []


class ObsSums(NamedTuple):
    """Raw observations seen since the moments were last set: count, sum, sum of squares
    (additive, so shards merge by summing; per env ``[B, ...]`` in the env state)."""

    count: jax.Array  # [B] or []
    total: jax.Array  # [B, *obs_shape] or [*obs_shape]
    total_sq: jax.Array  # [B, *obs_shape] or [*obs_shape]


class NormalizeState(NamedTuple):
    env_state: Any
    moments: RunningMoments  # what observations are standardised with (frozen in a rollout)
    sums: ObsSums  # of the raw observations since ``moments`` were set
    raw_obs: jax.Array  # [B, *obs_shape] the current observation, raw


def merge_moments(m: RunningMoments, sums: ObsSums) -> RunningMoments:
    """Merge observation sums (over every shard) into single-copy moments (Chan et al.)."""
    n = jnp.maximum(sums.count, 1e-8)
    batch_mean = sums.total / n
    batch_var = jnp.maximum(sums.total_sq / n - batch_mean**2, 0.0)
    delta, total = batch_mean - m.mean, m.count + sums.count
    new_mean = m.mean + delta * sums.count / total
    new_var = (m.var * m.count + batch_var * sums.count + delta**2 * m.count * sums.count / total
               ) / total
    return RunningMoments(new_mean, new_var, total)


def normalize(obs: jax.Array, moments: RunningMoments, clip: float = 10.0) -> jax.Array:
    """Standardise ``obs [B, ...]`` with the running moments and clip to ``[-clip, clip]``."""
    z = (obs - moments.mean) / jnp.sqrt(moments.var + 1e-8)
    return jnp.clip(z, -clip, clip)


def _sums_of(obs: jax.Array) -> ObsSums:  # per env, of obs [B, ...]
    return ObsSums(jnp.ones(obs.shape[:1], jnp.float32), obs, obs**2)


def obs_sums(state: Any) -> ObsSums | tuple:
    """The raw-observation sums of an env state, summed over its envs; () unless normalised."""
    if not isinstance(state, NormalizeState):
        return ()
    return jax.tree.map(lambda x: x.sum(0), state.sums)


def set_moments(obs: jax.Array, state: Any, moments: RunningMoments,
                clip: Any = 10.0) -> tuple[jax.Array, Any]:
    """(obs, state) acting with the single-copy ``moments`` from now on: every env's copy set,
    its sums emptied, its current observation standardised anew (and clipped to ``clip``, the
    wrapper's). Unchanged unless normalised."""
    if not isinstance(state, NormalizeState):
        return obs, state
    b = state.raw_obs.shape[0]
    copies = jax.tree.map(lambda x: jnp.broadcast_to(x, (b, *x.shape)), moments)
    empty = jax.tree.map(jnp.zeros_like, state.sums)
    return normalize(state.raw_obs, copies, clip), state._replace(moments=copies, sums=empty)


class NormalizeObservation(Wrapper):
    """Standardise observations with statistics kept in the env state.

    Within a rollout the statistics are frozen; the wrapper only adds every raw observation to
    per-env sums (``ObsSums``). Once per rollout the runner merges the sums of every shard (all
    devices, streams and processes) into the run's single copy (``RunState.obs_moments``,
    ``merge_moments``) and sets it back with ``set_moments``: every shard acts with the same
    statistics, whatever the device split.
    """

    def __init__(self, env: VecEnv, clip: float = 10.0):
        super().__init__(env)
        self.clip = clip

    def reset(self, keys: jax.Array):
        obs, env_state = self.env.reset(keys)
        b, obs = keys.shape[0], obs.astype(jnp.float32)
        shape = (b, *obs.shape[1:])
        moments = RunningMoments(
            jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.full((b,), 1e-4)
        )
        state = NormalizeState(env_state, moments, _sums_of(obs), obs)
        return normalize(obs, moments, self.clip), state

    def step(self, keys: jax.Array, state: NormalizeState, action: jax.Array):
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            keys, state.env_state, action
        )
        obs = obs.astype(jnp.float32)
        sums = jax.tree.map(jnp.add, state.sums, _sums_of(obs))
        final = normalize(info["final_observation"], state.moments, self.clip)
        info = {**info, "final_observation": final}
        state = NormalizeState(env_state, state.moments, sums, obs)
        return normalize(obs, state.moments, self.clip), state, reward, terminated, truncated, info


class NormalizeRewardState(NamedTuple):
    env_state: Any
    discounted: jax.Array  # [B] each env's discounted return G
    return_moments: RunningMoments  # [B] each: the moments of its G


class NormalizeReward(Wrapper):
    """Scale each env's rewards by the running standard deviation of its discounted return,
    then clip them to ``[-clip, clip]``: gymnasium's ``NormalizeReward`` around each env, step
    by step (``G = G * gamma * (1 - terminated) + reward``; moments from mean 0, variance 1,
    count 1e-4; ``reward / sqrt(var + 1e-8)``), as the host envs' normaliser computes it
    (``host_normalize``), in float32. Per env, so the statistics need no merging: any split of
    the envs over devices computes the same. Inside ``NormalizeObservation``, outside
    ``EpisodeStatistics`` (episode returns stay raw)."""

    def __init__(self, env: VecEnv, gamma: Any, clip: Any = 10.0):
        super().__init__(env)
        self.gamma, self.clip = gamma, clip

    def reset(self, keys: jax.Array):
        obs, env_state = self.env.reset(keys)
        b = keys.shape[0]
        moments = RunningMoments(jnp.zeros(b), jnp.ones(b), jnp.full((b,), 1e-4))
        return obs, NormalizeRewardState(env_state, jnp.zeros(b), moments)

    def step(self, keys: jax.Array, state: NormalizeRewardState, action: jax.Array):
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            keys, state.env_state, action)
        g = state.discounted * self.gamma * (1 - terminated) + reward
        mean, var, count = state.return_moments
        delta, total = g - mean, count + 1
        var = (var * count + jnp.square(delta) * count / total) / total
        moments = RunningMoments(mean + delta / total, var, total)
        scaled = jnp.clip(reward / jnp.sqrt(var + 1e-8), -self.clip, self.clip)
        return obs, NormalizeRewardState(env_state, g, moments), scaled, terminated, truncated, info
