"""Return and advantage estimators over ``[T, B]`` trajectories (a few clear lines each).

Chosen over rlax because rlax's GAE takes one discount per step and cannot tell a time-limit
truncation (bootstrap from the final observation's value) from a termination (no bootstrap).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def gae(
    reward: jax.Array,  # [T, B]
    value: jax.Array,  # [T, B] V(obs_t)
    next_value: jax.Array,  # [T, B] V(next_obs_t), next_obs being the true (pre-reset) next obs
    terminated: jax.Array,  # [T, B] bool
    truncated: jax.Array,  # [T, B] bool
    gamma: float | jax.Array,
    lam: float | jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation; returns ``(advantages, value_targets)``, each [T, B].

    A terminated step does not bootstrap; a truncated one bootstraps from ``next_value``; the
    recursion stops at either, so no advantage leaks across an episode boundary.
    """
    delta = reward + gamma * (1.0 - terminated) * next_value - value
    carry_on = gamma * lam * (1.0 - (terminated | truncated))

    def backward(advantage, xs):
        delta_t, carry_on_t = xs
        advantage = delta_t + carry_on_t * advantage
        return advantage, advantage

    _, advantages = lax.scan(
        backward, jnp.zeros_like(delta[0]), (delta, carry_on), reverse=True, unroll=8
    )
    return advantages, advantages + value
