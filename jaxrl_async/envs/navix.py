"""Navix behind the ``VecEnv`` contract (optional: ``pip install .[navix]``).

Ids: ``navix/<id>`` for every id ``navix.registry()`` lists (``navix/Navix-Empty-5x5-v0``,
``navix/Navix-DoorKey-5x5-v0`` ...). Navix's ``step`` resets an ended episode on the *next*
call, from a key kept in its state; here its inner ``_step`` is called instead, so an ended
episode restarts at once from a fresh reset with its own key and the final observation is kept.
Its step types give the flags: termination (2) and truncation (1, ``max_steps`` reached).
``env_kwargs`` go to ``navix.make`` (``max_steps=...``, ``observation_fn=...``).
"""

from __future__ import annotations

import functools
from typing import Any

from jaxrl_async.envs.core import AutoReset, discrete_spec

PREFIX = "navix/"
EXTRA = "navix"


def available() -> bool:
    try:
        import navix  # noqa: F401
    except ImportError:
        return False
    return True


def known_ids() -> list[str]:
    if not available():
        return []
    import navix

    return [PREFIX + n for n in navix.registry()]


class NavixEnv:
    """One Navix env without its auto-reset (its state is the timestep)."""

    def __init__(self, name: str, **kwargs: Any):
        import navix

        self.env = navix.make(name, **kwargs)

    def reset(self, key):
        timestep = self.env.reset(key)
        return timestep.observation, timestep

    def step(self, key, timestep, action):
        del key  # navix draws its randomness from the key in its state
        timestep = self.env._step(timestep, action)
        return (timestep.observation, timestep, timestep.reward, timestep.is_termination(),
                timestep.is_truncation())


@functools.cache
def make(env_id: str, env_kwargs: tuple = ()) -> AutoReset:
    env = NavixEnv(env_id[len(PREFIX):], **dict(env_kwargs))
    spec = discrete_spec(env_id, env, env.env.action_space.n, env.env.max_steps)
    return AutoReset(env, spec)
