"""Brax environments behind the same ``VecEnv`` contract (optional: ``pip install .[brax]``).

Ids are ``brax/<name>`` (``brax/ant``, ``brax/inverted_pendulum`` ...). Brax's own auto-reset
wrapper returns to one cached start state; here an ended episode restarts from a fresh random
reset with the step's key, and a time limit (``episode_length``) is a truncation, not a
termination, with the true last observation in ``info["final_observation"]`` as for gymnax.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.envs.core import EnvSpec, VecEnv

PREFIX = "brax/"


def available() -> bool:
    try:
        import brax.envs  # noqa: F401
    except ImportError:
        return False
    return True


def known_ids() -> list[str]:
    """``brax/<name>`` for every registered Brax env (none when brax is not installed)."""
    if not available():
        return []
    from brax import envs

    return [PREFIX + name for name in sorted(envs._envs)]


class BraxState(NamedTuple):
    env_state: Any  # brax.envs.State, leading axis B
    steps: jax.Array  # [B] int32 steps in the current episode


class BraxVecEnv(VecEnv):
    """``vmap`` of a Brax env with fresh-reset auto-resetting and time-limit truncation."""

    def __init__(self, env_id: str, episode_length: int = 1000, backend: str | None = None):
        from brax import envs

        name = env_id[len(PREFIX):]
        kwargs = {} if backend is None else {"backend": backend}
        self.env = envs.get_environment(name, **kwargs)
        self.episode_length = episode_length
        size = self.env.action_size
        self.spec = EnvSpec(env_id=env_id, obs_shape=(self.env.observation_size,),
                            obs_dtype=np.dtype(np.float32), discrete=False,
                            action_shape=(size,), action_low=(-1.0,) * size,
                            action_high=(1.0,) * size, max_episode_steps=episode_length)

    def reset(self, keys: jax.Array) -> tuple[jax.Array, BraxState]:
        state = jax.vmap(self.env.reset)(keys)
        return state.obs, BraxState(state, jnp.zeros(keys.shape[0], jnp.int32))

    def step(self, keys: jax.Array, state: BraxState, action: jax.Array):
        stepped = jax.vmap(self.env.step)(state.env_state, action)
        steps = state.steps + 1
        terminated = stepped.done.astype(bool)
        truncated = (steps >= self.episode_length) & ~terminated
        fresh = jax.vmap(self.env.reset)(keys)
        ended = terminated | truncated
        pick = lambda new, old: jnp.where(ended.reshape(-1, *[1] * (new.ndim - 1)), new, old)
        env_state = jax.tree.map(pick, fresh, stepped)
        info = {"final_observation": stepped.obs}
        return (env_state.obs, BraxState(env_state, jnp.where(ended, 0, steps)),
                stepped.reward.astype(jnp.float32), terminated, truncated, info)


@functools.cache
def make(env_id: str, env_kwargs: tuple = ()) -> BraxVecEnv:
    return BraxVecEnv(env_id, **dict(env_kwargs))
