"""Batched, auto-resetting environments on the device, and the spec networks build from.

A ``VecEnv`` steps B environments at once. Its contract, shared by every wrapper:

- ``reset(keys [B]) -> (obs [B, *obs_shape], state)``
- ``step(keys [B], state, action [B, *action_shape])
  -> (obs, state, reward [B], terminated [B], truncated [B], info)``

like gymnax 1.x: ``obs`` is already the first observation of the next episode where an episode
ended, and ``info["final_observation"]`` holds the true last observation (so a truncated episode
can be bootstrapped). Every leaf of ``state`` has the leading batch axis ``B``, so env states can
be sliced per env and sharded over devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class EnvSpec:
    """What a network needs to know about an environment."""

    env_id: str
    obs_shape: tuple[int, ...]
    obs_dtype: Any
    discrete: bool
    num_actions: int = 0  # discrete only
    action_shape: tuple[int, ...] = ()  # continuous only
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    max_episode_steps: int = 0
    action_mask: bool = False
    """Whether the last ``num_actions`` entries of the (flat) observation are the legal-action
    mask (1 legal, 0 illegal), which a masked categorical head reads (Jumanji)."""
    obs_parts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """For an observation flattened from a structure: its parts (name, shape) in the order
    they are concatenated (the action mask last)."""


class VecEnv:
    """Base of all batched environments and wrappers."""

    spec: EnvSpec

    def reset(self, keys: jax.Array) -> tuple[jax.Array, Any]:
        raise NotImplementedError

    def step(self, keys: jax.Array, state: Any, action: jax.Array):
        raise NotImplementedError


class GymnaxVecEnv(VecEnv):
    """``vmap`` of a gymnax 1.x environment over a batch of keys."""

    def __init__(self, env: Any, params: Any, spec: EnvSpec):
        self.env, self.params, self.spec = env, params, spec

    def reset(self, keys: jax.Array) -> tuple[jax.Array, Any]:
        return jax.vmap(self.env.reset, in_axes=(0, None))(keys, self.params)

    def step(self, keys: jax.Array, state: Any, action: jax.Array):
        obs, state, reward, terminated, truncated, info = jax.vmap(
            self.env.step, in_axes=(0, 0, 0, None)
        )(keys, state, action, self.params)
        info = {"final_observation": info["final_observation"]}
        return (
            obs,
            state,
            reward.astype(jnp.float32),
            terminated.astype(bool),
            truncated.astype(bool),
            info,
        )


def spec_from_gymnax(env_id: str, env: Any, params: Any) -> EnvSpec:
    """Read observation and action spaces off a gymnax environment."""
    act_space = env.action_space(params)
    obs, _ = jax.eval_shape(env.reset, jax.eval_shape(jax.random.key, 0), params)  # shapes only
    common = dict(
        env_id=env_id,
        obs_shape=tuple(obs.shape),
        obs_dtype=np.dtype(obs.dtype),
        max_episode_steps=int(getattr(params, "max_steps_in_episode", 0)),
    )
    if hasattr(act_space, "n"):
        return EnvSpec(discrete=True, num_actions=int(act_space.n), **common)
    shape = tuple(act_space.shape)
    low = np.broadcast_to(np.asarray(act_space.low, np.float32), shape).ravel()
    high = np.broadcast_to(np.asarray(act_space.high, np.float32), shape).ravel()
    return EnvSpec(
        discrete=False,
        action_shape=shape,
        action_low=tuple(float(v) for v in low),
        action_high=tuple(float(v) for v in high),
        **common,
    )


class AutoReset(VecEnv):
    """A batched, auto-resetting env from one unbatched env that does *not* reset itself.

    ``env`` has ``reset(key) -> (obs, state)`` and ``step(key, state, action) -> (obs, state,
    reward, terminated, truncated)`` for a single env. Each env's step key is split into a key
    for the step and a key for the reset that replaces an ended episode (terminated or
    truncated) by a fresh one; the step's own observation is kept in
    ``info["final_observation"]``. A step both terminated and truncated counts as terminated.
    """

    def __init__(self, env: Any, spec: EnvSpec):
        self.env, self.spec = env, spec

    def reset(self, keys: jax.Array) -> tuple[jax.Array, Any]:
        return jax.vmap(self.env.reset)(keys)

    def step(self, keys: jax.Array, state: Any, action: jax.Array):
        step_keys, reset_keys = split_step_keys(keys)
        obs, stepped, reward, terminated, truncated = jax.vmap(self.env.step)(
            step_keys, state, action)
        terminated = terminated.astype(bool)
        truncated = truncated.astype(bool) & ~terminated
        ended = terminated | truncated
        fresh_obs, fresh = jax.vmap(self.env.reset)(reset_keys)
        pick = lambda new, old: jnp.where(ended.reshape(-1, *[1] * (new.ndim - 1)), new, old)
        return (pick(fresh_obs, obs), jax.tree.map(pick, fresh, stepped),
                reward.astype(jnp.float32), terminated, truncated, {"final_observation": obs})


def split_step_keys(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``AutoReset``'s (step keys, reset keys) from the step keys ``[B]``."""
    pairs = jax.vmap(jax.random.split)(keys)
    return pairs[:, 0], pairs[:, 1]


def discrete_spec(env_id: str, env: Any, num_actions: int, max_episode_steps: int = 0,
                  **fields: Any) -> EnvSpec:
    """The spec of a discrete-action single env (``AutoReset``'s), its observation read off
    ``env.reset`` by shape evaluation (nothing compiles)."""
    obs, _ = jax.eval_shape(env.reset, jax.random.key(0))
    return EnvSpec(env_id=env_id, obs_shape=tuple(obs.shape), obs_dtype=np.dtype(obs.dtype),
                   discrete=True, num_actions=int(num_actions),
                   max_episode_steps=int(max_episode_steps or 0), **fields)


def continuous_spec(env_id: str, env: Any, low: Any, high: Any, max_episode_steps: int = 0,
                    **fields: Any) -> EnvSpec:
    """The spec of a continuous-action single env (``AutoReset``'s): actions in the box
    ``[low, high]`` (arrays or sequences of the action's shape), the observation read off
    ``env.reset`` by shape evaluation (nothing compiles)."""
    obs, _ = jax.eval_shape(env.reset, jax.random.key(0))
    low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
    if low.shape != high.shape or low.ndim == 0 or np.any(low >= high):
        raise ValueError(f"{env_id}: continuous_spec needs low < high, arrays of one action "
                         f"shape, got low={low.tolist()}, high={high.tolist()}")
    return EnvSpec(env_id=env_id, obs_shape=tuple(obs.shape), obs_dtype=np.dtype(obs.dtype),
                   discrete=False, action_shape=tuple(low.shape),
                   action_low=tuple(float(v) for v in low.ravel()),
                   action_high=tuple(float(v) for v in high.ravel()),
                   max_episode_steps=int(max_episode_steps or 0), **fields)
