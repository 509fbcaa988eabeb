"""V-trace against a NumPy reference written from the paper's sum (not its recursion), with
terminations and truncations mixed; its on-policy limit; and rlax where episodes only terminate."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.algos.returns import vtrace


def vtrace_numpy(reward, value, next_value, terminated, truncated, log_rho, gamma, lam,
                 rho_bar, c_bar, pg_rho_bar):
    """v_s = V(x_s) + sum_{t=s}^{end} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t, where ``end``
    is the last step of the episode inside the trajectory (Espeholt et al., 2018, eq. 1)."""
    T, B = reward.shape
    rho = np.exp(log_rho)
    bootstrap = np.where(terminated, 0.0, next_value)
    delta = np.minimum(rho_bar, rho) * (reward + gamma * bootstrap - value)
    c = lam * np.minimum(c_bar, rho)
    ends = terminated | truncated
    targets, advantages = np.zeros((T, B)), np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            total, weight = 0.0, 1.0
            for t in range(s, T):
                total += weight * delta[t, b]
                if ends[t, b]:
                    break
                weight *= gamma * c[t, b]
            targets[s, b] = value[s, b] + total
    for b in range(B):
        for s in range(T):
            if terminated[s, b]:
                next_target = 0.0
            elif truncated[s, b] or s == T - 1:
                next_target = next_value[s, b]
            else:
                next_target = targets[s + 1, b]
            advantages[s, b] = min(pg_rho_bar, rho[s, b]) * (
                reward[s, b] + gamma * next_target - value[s, b])
    return targets, advantages


def episodes(T, B, rng):
    """Random values and a trajectory whose next_obs values agree with the next step's value
    except across episode ends (as they do in a real rollout)."""
    reward, value = rng.normal(size=(T, B)), rng.normal(size=(T, B))
    terminated = np.zeros((T, B), bool)
    truncated = np.zeros((T, B), bool)
    terminated[3, 0] = terminated[7, 1] = terminated[T - 1, 2] = True
    truncated[5, 0] = truncated[2, 1] = truncated[9, 2] = truncated[T - 1, 1] = True
    next_value = np.concatenate([value[1:], rng.normal(size=(1, B))])
    ends = terminated | truncated
    next_value[ends] = rng.normal(size=ends.sum())  # V(final obs) of the episode that ended
    return reward, value, next_value, terminated, truncated


@pytest.mark.parametrize("lam, rho_bar, c_bar, pg_rho_bar", [(1.0, 1.0, 1.0, 1.0),
                                                              (0.9, 2.0, 0.8, 1.5)])
def test_vtrace_matches_numpy_reference(lam, rho_bar, c_bar, pg_rho_bar):
    rng = np.random.default_rng(0)
    T, B = 12, 4
    reward, value, next_value, terminated, truncated = episodes(T, B, rng)
    log_rho = rng.normal(scale=0.7, size=(T, B))
    args = (reward, value, next_value, terminated, truncated, log_rho)
    hyper = (0.97, lam, rho_bar, c_bar, pg_rho_bar)
    targets, advantages = vtrace(*map(jnp.asarray, args), *hyper)
    ref_targets, ref_advantages = vtrace_numpy(*args, *hyper)
    np.testing.assert_allclose(targets, ref_targets, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages, ref_advantages, rtol=1e-5, atol=1e-5)


def n_step_returns(reward, next_value, terminated, truncated, gamma):
    """Discounted rewards to the end of the episode or trajectory, plus the discounted value
    there (0 after a termination): the n-step return, n reaching as far as the data goes."""
    T, B = reward.shape
    out = np.zeros((T, B))
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            if terminated[t, b]:
                running = 0.0
            elif truncated[t, b] or t == T - 1:
                running = next_value[t, b]
            out[t, b] = running = reward[t, b] + gamma * running
    return out


def test_on_policy_vtrace_is_the_n_step_return():
    rng = np.random.default_rng(1)
    reward, value, next_value, terminated, truncated = episodes(10, 3, rng)
    targets, advantages = vtrace(*map(jnp.asarray, (reward, value, next_value, terminated,
                                                    truncated)), jnp.zeros((10, 3)), 0.9)
    returns = n_step_returns(reward, next_value, terminated, truncated, 0.9)
    np.testing.assert_allclose(targets, returns, rtol=1e-5, atol=1e-5)
    # and the advantage is the one-step-ahead n-step return minus the baseline
    next_returns = np.where(terminated, 0.0, np.where(
        truncated | (np.arange(10) == 9)[:, None], next_value, np.roll(returns, -1, axis=0)))
    np.testing.assert_allclose(advantages, reward + 0.9 * next_returns - value, rtol=1e-5,
                               atol=1e-5)


def test_vtrace_matches_rlax_when_episodes_only_terminate():
    rlax = pytest.importorskip("rlax")
    import jax

    rng = np.random.default_rng(2)
    T, B = 9, 3
    reward, value = rng.normal(size=(T, B)), rng.normal(size=(T, B))
    next_value = np.concatenate([value[1:], rng.normal(size=(1, B))])
    terminated = np.zeros((T, B), bool)
    terminated[4, 0] = terminated[1, 2] = True
    log_rho = rng.normal(scale=0.5, size=(T, B))
    targets, advantages = vtrace(*map(jnp.asarray, (reward, value, next_value, terminated,
                                                    np.zeros((T, B), bool), log_rho)), 0.95,
                                 1.0, 1.0, 1.0, 1.0)
    discount = 0.95 * (1.0 - terminated)
    # rlax: one env at a time, time-major [T]; v_t is V(x_{t+1}) (zeroed by the discount).
    # lambda = 1: with lambda < 1 rlax bootstraps the advantage from a lambda-mix of v_{s+1}
    # and V(x_{s+1}) (TRFL's choice), where the paper uses v_{s+1}.
    out = jax.vmap(lambda v, vt, r, d, lr: rlax.vtrace_td_error_and_advantage(
        v, vt, r, d, jnp.exp(lr)), in_axes=1, out_axes=1)(
        value, next_value, reward, discount, log_rho)
    np.testing.assert_allclose(targets, out.errors + value, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages, out.pg_advantage, rtol=1e-5, atol=1e-5)
