"""Craftax behind the ``VecEnv`` contract (optional: ``pip install .[craftax]``).

Ids: ``craftax/Craftax-Classic-Symbolic-v1`` and ``craftax/Craftax-Symbolic-v1`` (the pixel
variants too). Craftax's ``done`` joins the end of the game (death, lava, the boss beaten) with
the time limit (``max_timesteps``); here they are split: ``terminated`` is the game ending by
itself, ``truncated`` the time limit alone, with the true final observation kept. ``env_kwargs``
replace fields of Craftax's ``EnvParams`` (``max_timesteps=...``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax.numpy as jnp

from jaxrl_async.envs.core import AutoReset, discrete_spec

PREFIX = "craftax/"
NAMES = ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1", "Craftax-Classic-Pixels-v1",
         "Craftax-Pixels-v1")
EXTRA = "craftax"


def available() -> bool:
    try:
        import craftax.craftax_env  # noqa: F401
    except ImportError:
        return False
    return True


def known_ids() -> list[str]:
    return [PREFIX + n for n in NAMES] if available() else []


class CraftaxEnv:
    """One Craftax env without auto-reset, ``done`` split into terminated and truncated."""

    def __init__(self, name: str, **params: Any):
        from craftax.craftax_env import make_craftax_env_from_name

        self.env = make_craftax_env_from_name(name, auto_reset=False)
        self.params = self.env.default_params.replace(**params)

    def reset(self, key):
        return self.env.reset(key, self.params)

    def step(self, key, state, action):
        obs, state, reward, done, _ = self.env.step(key, state, action, self.params)
        # the same game-over test with the clock at 0: what ends the game besides the clock
        ended_by_game = self.env.is_terminal(state.replace(timestep=jnp.zeros_like(
            state.timestep)), self.params)
        terminated = done & ended_by_game
        return obs, state, reward, terminated, done & ~terminated


@functools.cache
def make(env_id: str, env_kwargs: tuple = ()) -> AutoReset:
    env = CraftaxEnv(env_id[len(PREFIX):], **dict(env_kwargs))
    spec = discrete_spec(env_id, env, env.env.num_actions, env.params.max_timesteps)
    return AutoReset(env, spec)
