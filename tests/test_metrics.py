"""Figures count what happened: windowed returns weigh every episode once (none carried over
updates where no episode ended), DQN's rate anneals to 0 at its last gradient step, evaluation
counts unfinished episodes with their return so far."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.algos import dqn, make_algorithm
from jaxrl_async.run.sinks import final_return
from jaxrl_async.runners.rollout import EpisodeSums, episode_metrics
from jaxrl_async.search.sweep import SweepResult

# 12 updates; episodes end in updates 0 (two: 10 + 30), 5 (one: 50) and 11 (one: 70)
COUNTS = np.array([2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1], np.float32)
SUMS = np.array([40, 0, 0, 0, 0, 50, 0, 0, 0, 0, 0, 70], np.float32)


def stream() -> dict[str, np.ndarray]:
    """The per-update metrics the runners emit for the episodes above."""
    rows = [episode_metrics(EpisodeSums(jnp.float32(s), jnp.float32(c), jnp.float32(c)))
            for s, c in zip(SUMS, COUNTS)]
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}


def test_an_update_without_episode_ends_reports_none():
    m = stream()
    np.testing.assert_array_equal(m["episodes"], COUNTS)
    assert m["episode_return"][0] == 20.0 and m["episode_return"][5] == 50.0
    assert np.isnan(m["episode_return"][1]) and np.isnan(m["episode_return"][10])


def test_window_means_weigh_every_episode_once():
    m = stream()
    assert final_return(m) == pytest.approx((50 + 70) / 2)  # updates 2..11: two episodes
    assert final_return(m, last=12) == pytest.approx((10 + 30 + 50 + 70) / 4)
    assert np.isnan(final_return({k: v[6:11] for k, v in m.items()}, last=5))
    curves = {k: v[None, None] for k, v in m.items()}  # [configs=1, seeds=1, updates]
    result = SweepResult(base=None, fields=(), points=[{}], configs=[None], seeds=(0,),
                         curves=curves, params=None, timing={})
    assert result.final_return[0, 0] == pytest.approx(60.0)
    assert result.auc[0, 0] == pytest.approx(40.0)


def test_dqn_rate_reaches_0_at_its_last_gradient_step():
    cfg = jra.DQNConfig(num_envs=2, num_steps=4, total_timesteps=2 * 4 * 8, buffer_size=64,
                        batch_size=4, samples_per_insert=1.0, learning_starts=32,
                        hidden_sizes=(8,), fast_compile=True)
    out = jax.jit(jra.make_train(cfg))(jax.random.key(0))
    steps = int(out.state.learner.gradient_steps)  # the steps taken: from update 4 of 8 on
    assert steps == 5 * cfg.gradient_steps
    schedule = dqn.learning_rate(cfg)
    assert float(schedule(steps)) == 0.0 and float(schedule(steps - 1)) > 0.0


def test_evaluation_counts_an_unfinished_episode_with_its_return_so_far():
    cfg = jra.PPOConfig(hidden_sizes=(8,), num_steps=8)
    init = make_algorithm(cfg, jra.env_spec(cfg.env)).init(jax.random.key(0))
    out = jra.evaluate(init.params, cfg, num_episodes=3, max_steps=5)
    assert not out["all_finished"]  # CartPole cannot fail in 5 steps
    np.testing.assert_array_equal(out["returns"], [5.0, 5.0, 5.0])
    np.testing.assert_array_equal(out["lengths"], [5.0, 5.0, 5.0])
