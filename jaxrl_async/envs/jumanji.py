"""Jumanji behind the ``VecEnv`` contract (optional: ``pip install .[jumanji]``).

Ids: ``jumanji/<id>`` for every id ``jumanji.registered_environments()`` lists whose action is
one discrete choice (``jumanji/Snake-v1``, ``jumanji/Game2048-v1`` ...).
A structured observation is flattened: its array fields, raveled to float32 in the order of the
observation spec, then its ``action_mask`` last (``EnvSpec.obs_parts`` records the layout and
``EnvSpec.action_mask`` that the mask is there), which the masked categorical head reads so an
illegal action is never sampled. Jumanji's envs do not reset themselves; an ended episode
restarts from a fresh reset with its own key and the final observation is kept. A last step with
discount 0 is a termination, one with discount > 0 (a time limit) a truncation. ``env_kwargs``
go to ``jumanji.make`` (``time_limit=...`` for Snake).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_async.envs.core import AutoReset, discrete_spec

PREFIX = "jumanji/"
EXTRA = "jumanji"
MASK = "action_mask"


def available() -> bool:
    try:
        import jumanji  # noqa: F401
    except ImportError:
        return False
    return True


def known_ids() -> list[str]:
    if not available():
        return []
    import jumanji

    return sorted(PREFIX + n for n in jumanji.registered_environments())


def _fields(observation: Any) -> dict[str, Any]:
    """The named arrays of an observation (a NamedTuple, a dict or one array)."""
    if hasattr(observation, "_asdict"):
        return dict(observation._asdict())
    if isinstance(observation, dict):
        return dict(observation)
    return {"observation": observation}


def flatten(observation: Any) -> jax.Array:
    """One float32 vector: every field but the mask raveled in order, then the mask."""
    fields = _fields(observation)
    mask = fields.pop(MASK, None)
    parts = [jnp.ravel(x).astype(jnp.float32) for x in fields.values()]
    if mask is not None:
        parts.append(jnp.ravel(mask).astype(jnp.float32))
    return jnp.concatenate(parts)


class JumanjiEnv:
    """One Jumanji env with a flat observation (its state is (state, timestep))."""

    def __init__(self, name: str, **kwargs: Any):
        import jumanji

        self.env = jumanji.make(name, **kwargs)
        spec = self.env.action_spec
        if not hasattr(spec, "num_values") or getattr(spec, "shape", ()) != ():
            raise ValueError(f"jumanji/{name}: its action {spec} is not one discrete choice; "
                             "only envs with a DiscreteArray action are supported")
        self.num_actions = int(spec.num_values)

    def reset(self, key):
        state, timestep = self.env.reset(key)
        return flatten(timestep.observation), state

    def step(self, key, state, action):
        del key  # Jumanji keeps its own key in its state
        state, timestep = self.env.step(state, action)
        last = timestep.last()
        terminated = last & (timestep.discount == 0)
        return (flatten(timestep.observation), state, timestep.reward, terminated,
                last & ~terminated)


@functools.cache
def make(env_id: str, env_kwargs: tuple = ()) -> AutoReset:
    env = JumanjiEnv(env_id[len(PREFIX):], **dict(env_kwargs))
    _, timestep = jax.eval_shape(env.env.reset, jax.random.key(0))
    fields = _fields(timestep.observation)
    masked = MASK in fields
    order = [k for k in fields if k != MASK] + ([MASK] if masked else [])
    parts = tuple((k, tuple(fields[k].shape)) for k in order)
    if masked and parts[-1][1] != (env.num_actions,):
        raise ValueError(f"{env_id}: action_mask has shape {parts[-1][1]}, expected "
                         f"({env.num_actions},)")
    limit = getattr(env.env, "time_limit", 0)
    spec = discrete_spec(env_id, env, env.num_actions, limit if isinstance(limit, int) else 0,
                         action_mask=masked, obs_parts=parts)
    return AutoReset(env, spec)
