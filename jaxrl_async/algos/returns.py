"""Return and advantage estimators over ``[T, B]`` trajectories (a few clear lines each).

Chosen over rlax because rlax's GAE and V-trace take one discount per step and cannot tell a
time-limit truncation (bootstrap from the final observation's value) from a termination (no
bootstrap).
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


def vtrace(
    reward: jax.Array,  # [T, B]
    value: jax.Array,  # [T, B] V(obs_t) under the current params
    next_value: jax.Array,  # [T, B] V(next_obs_t), next_obs being the true (pre-reset) next obs
    terminated: jax.Array,  # [T, B] bool
    truncated: jax.Array,  # [T, B] bool
    log_rho: jax.Array,  # [T, B] log pi(a_t|x_t) - log mu(a_t|x_t): target over behaviour
    gamma: float | jax.Array,
    lam: float | jax.Array = 1.0,
    rho_bar: float | jax.Array = 1.0,
    c_bar: float | jax.Array = 1.0,
    pg_rho_bar: float | jax.Array = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """V-trace (Espeholt et al., 2018, eq. 1 and section 4.2); returns ``(targets v_s,
    policy-gradient advantages)``, each [T, B].

        v_s - V(x_s) = delta_s + gamma * c_s * (v_{s+1} - V(x_{s+1})),
        delta_s = rho_s * (r_s + gamma * V(x_{s+1}) - V(x_s)),
        A_s = pg_rho_s * (r_s + gamma * v_{s+1} - V(x_s)),

    with rho_s = min(rho_bar, pi/mu), c_s = lam * min(c_bar, pi/mu), pg_rho_s = min(pg_rho_bar,
    pi/mu). Episode ends are handled like ``gae``: a terminated step does not bootstrap; a
    truncated one bootstraps from ``next_value``; the trace stops at either, and v_{s+1} past
    the end of an episode or of the trajectory is V(next_obs_s). Written here rather than taken
    from rlax, whose per-step discount cannot bootstrap a truncated step and stop the trace.
    """
    rho = jnp.exp(log_rho)
    continues = 1.0 - (terminated | truncated)
    bootstrap = (1.0 - terminated) * next_value  # V(x_{s+1}), 0 after a termination
    delta = jnp.minimum(rho_bar, rho) * (reward + gamma * bootstrap - value)
    trace = gamma * lam * jnp.minimum(c_bar, rho) * continues

    def backward(correction, xs):  # correction = v_{s+1} - V(x_{s+1})
        delta_t, trace_t = xs
        correction = delta_t + trace_t * correction
        return correction, correction

    _, corrections = lax.scan(
        backward, jnp.zeros_like(delta[0]), (delta, trace), reverse=True, unroll=8
    )
    next_correction = jnp.concatenate([corrections[1:], jnp.zeros_like(corrections[:1])])
    next_target = bootstrap + continues * next_correction  # v_{s+1}
    advantages = jnp.minimum(pg_rho_bar, rho) * (reward + gamma * next_target - value)
    return value + corrections, advantages
