"""The step shim through which experiments/bench/bench_peers.py runs rejax on gymnax 1.x: the legacy
five-value step (done = terminated or truncated), each env's latest episode return, and a deep
copy that is the shim itself (rejax deep-copies its config). Seconds; rejax is not needed."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments" / "bench"))

from bench_peers import LegacyStep  # noqa: E402


def test_legacy_step_matches_gymnax_and_tracks_returns():
    env, params = gymnax.make("CartPole-v1")
    shim = LegacyStep(env)
    assert copy.deepcopy(shim) is shim
    assert shim.num_actions == env.num_actions  # everything else is the wrapped env's

    def run(key):
        obs, state = shim.reset(key, params)
        _, ref_state = env.reset(key, params)

        def step(carry, k):
            state, ref_state = carry
            action = jax.random.bernoulli(jax.random.fold_in(k, 1)).astype(jnp.int32)
            out = shim.step(k, state, action, params)
            ref = env.step(k, ref_state, action, params)
            return (out[1], ref[1]), (out, ref)

        return jax.lax.scan(step, (state, ref_state), jax.random.split(key, 200))[1]

    (obs, state, reward, done, _), (r_obs, _, r_reward, term, trunc, _) = jax.jit(run)(
        jax.random.key(0))
    np.testing.assert_array_equal(obs, r_obs)
    np.testing.assert_array_equal(reward, r_reward)
    np.testing.assert_array_equal(done, np.logical_or(term, trunc))
    ends = np.flatnonzero(np.asarray(done))
    assert ends.size >= 2  # random actions end CartPole episodes within 200 steps
    reward = np.asarray(reward)
    starts = np.concatenate([[0], ends[:-1] + 1])
    for start, end in zip(starts, ends):  # the latest return is the sum of that episode
        assert float(state.last_return[end]) == float(reward[start:end + 1].sum())
        assert float(state.episode_return[end]) == 0.0
