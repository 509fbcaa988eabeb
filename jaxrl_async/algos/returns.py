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


def n_step_return(
    reward: jax.Array,  # [..., n] rewards of n consecutive steps of one env
    terminated: jax.Array,  # [..., n] bool
    truncated: jax.Array,  # [..., n] bool
    gamma: float | jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The n-step return of the window's first step, cut at the episode's end.

    Returns ``(partial, discount, last)``, each ``[...]``: the target is
    ``partial + discount * V(next_obs[last])``, where ``last`` is the first step that ends the
    episode (or n-1), ``discount`` is ``gamma**(last+1)``, or 0 if the episode terminated there
    (a truncation bootstraps from the true final observation). By hand rather than rlax's
    ``n_step_bootstrapped_returns``: that one needs ``V`` of every step's next observation (n
    network evaluations per sample) where this needs one.
    """
    n = reward.shape[-1]
    done = (terminated | truncated).astype(reward.dtype)
    # alive[k]: step k belongs to the episode of step 0 (no episode end before it)
    alive = jnp.cumprod(jnp.concatenate([jnp.ones_like(done[..., :1]), 1.0 - done[..., :-1]], -1),
                        -1)
    powers = gamma ** jnp.arange(n, dtype=reward.dtype)
    partial = jnp.sum(alive * powers * reward, -1)
    last = (jnp.sum(alive, -1) - 1).astype(jnp.int32)
    terminated_last = jnp.take_along_axis(terminated, last[..., None], -1)[..., 0]
    discount = gamma ** (last + 1).astype(reward.dtype) * (1.0 - terminated_last)
    return partial, discount, last


def q_lambda_returns(
    reward: jax.Array,  # [T, B]
    next_q_max: jax.Array,  # [T, B] max_a Q(next_obs_t, a), next_obs the true (pre-reset) one
    terminated: jax.Array,  # [T, B] bool
    truncated: jax.Array,  # [T, B] bool
    gamma: float | jax.Array,
    lam: float | jax.Array,
) -> jax.Array:
    """Peng's Q(lambda) targets (PQN): ``G_t = r_t + gamma * (1 - term_t) * ((1 - l_t) *
    max Q(s_{t+1}) + l_t * G_{t+1})`` with ``l_t = 0`` at a truncation and at the last step
    (bootstrap fully from the final observation) and ``lam`` elsewhere. [T, B].

    This is rlax's ``lambda_returns`` with a per-step lambda (the test checks it against rlax);
    written out here to run on ``[T, B]`` at once and to spare the rlax dependency.
    """
    lam_t = lam * (1.0 - truncated.astype(reward.dtype))
    discount = gamma * (1.0 - terminated.astype(reward.dtype))

    def backward(next_return, xs):
        reward_t, discount_t, q_t, lam_t = xs
        g = reward_t + discount_t * ((1.0 - lam_t) * q_t + lam_t * next_return)
        return g, g

    _, returns = lax.scan(backward, next_q_max[-1], (reward, discount, next_q_max, lam_t),
                          reverse=True, unroll=8)
    return returns
