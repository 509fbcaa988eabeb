"""XLand-MiniGrid behind the ``VecEnv`` contract (optional: ``pip install .[xminigrid]``).

Ids: ``xminigrid/<id>`` for every id ``xminigrid.registered_environments()`` lists
(``xminigrid/MiniGrid-Empty-5x5``, ``xminigrid/XLand-MiniGrid-R1-9x9`` ...). Its env returns
dm_env-style timesteps and leaves resets to its wrappers; they are not used: an ended episode
restarts from a fresh reset with its own key, and the final observation is kept. A last step
with discount 0 is a termination, one with discount 1 (``max_steps`` reached) a truncation.
``env_kwargs`` replace fields of its ``EnvParams`` (``max_steps=...``, an XLand ``ruleset``).
"""

from __future__ import annotations

import functools
from typing import Any

from jaxrl_async.envs.core import AutoReset, discrete_spec

PREFIX = "xminigrid/"
EXTRA = "xminigrid"


def available() -> bool:
    try:
        import xminigrid  # noqa: F401
    except ImportError:
        return False
    return True


def known_ids() -> list[str]:
    if not available():
        return []
    import xminigrid

    return [PREFIX + n for n in xminigrid.registered_environments()]


class XMiniGridEnv:
    """One XLand-MiniGrid env, stepped without its auto-reset wrappers (its state is the
    timestep)."""

    def __init__(self, name: str, **params: Any):
        import xminigrid

        self.env, self.params = xminigrid.make(name, **params)

    def reset(self, key):
        timestep = self.env.reset(self.params, key)
        return timestep.observation, timestep

    def step(self, key, timestep, action):
        del key  # its transitions are deterministic
        timestep = self.env.step(self.params, timestep, action)
        last = timestep.last()
        terminated = last & (timestep.discount == 0)
        truncated = last & ~terminated
        return timestep.observation, timestep, timestep.reward, terminated, truncated


@functools.cache
def make(env_id: str, env_kwargs: tuple = ()) -> AutoReset:
    env = XMiniGridEnv(env_id[len(PREFIX):], **dict(env_kwargs))
    spec = discrete_spec(env_id, env, env.env.num_actions(env.params), env.params.max_steps)
    return AutoReset(env, spec)

