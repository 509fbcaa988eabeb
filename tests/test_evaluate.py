"""Evaluation on fresh envs: greedy means the distribution's mode, normalised runs use their
frozen training statistics, and a GIF of one episode."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.envs import RunningMoments
from jaxrl_async.runners import sync
from jaxrl_async.runners.common import build

CARTPOLE = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                         update_epochs=2, total_timesteps=4 * 16 * 4)


def fixed_policy(cfg, logits):
    """Fresh params whose policy head outputs ``logits`` whatever the observation."""
    _, algo = build(cfg)
    params = algo.init(jax.random.key(0)).params

    def head(path, x):
        if "policy_head" not in jax.tree_util.keystr(path):
            return x
        return jnp.broadcast_to(jnp.asarray(logits, x.dtype), x.shape) if x.ndim == 1 else 0 * x

    return jax.tree_util.tree_map_with_path(head, params)


def test_greedy_takes_the_mode_and_stochastic_samples():
    # Logits favour "left" (0.8 vs 0.2 after softmax): greedy always pushes left, which topples
    # CartPole within a dozen steps; sampling pushes right a fifth of the time: longer.
    params = fixed_policy(CARTPOLE, [0.7, -0.7])
    greedy = jra.evaluate(params, CARTPOLE, num_episodes=16, greedy=True, seed=1)
    sampled = jra.evaluate(params, CARTPOLE, num_episodes=16, greedy=False, seed=1)
    assert greedy["all_finished"] and sampled["all_finished"]
    assert greedy["returns"].shape == (16,) and greedy["greedy"]
    assert greedy["returns"].max() <= 12, greedy["returns"]
    assert sampled["mean_return"] > greedy["mean_return"] + 2
    np.testing.assert_array_equal(greedy["returns"], greedy["lengths"])  # +1 per step
    again = jra.evaluate(params, CARTPOLE, num_episodes=16, greedy=True, seed=1)
    np.testing.assert_array_equal(again["returns"], greedy["returns"])  # fresh, seeded envs
    other_seed = jra.evaluate(params, CARTPOLE, num_episodes=16, greedy=True, seed=2)
    assert not np.array_equal(other_seed["returns"], greedy["returns"])


def test_continuous_greedy_action_is_the_mean():
    cfg = jra.PPOConfig(env="Pendulum-v1", num_envs=4, num_steps=16, num_minibatches=2,
                        total_timesteps=4 * 16)
    _, algo = build(cfg)
    params = algo.init(jax.random.key(0)).params
    obs = jnp.array([0.5, -0.2, 0.1])
    def eval_act(key, greedy):
        action, memory = algo.eval_act(params, obs, key, greedy, (), False)
        assert memory == ()
        return action

    a = eval_act(jax.random.key(1), True)
    b = eval_act(jax.random.key(2), True)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(eval_act(jax.random.key(1), False), a)
    result = jra.evaluate(params, cfg, num_episodes=2)
    assert result["lengths"].tolist() == [200.0, 200.0]  # Pendulum always runs its time limit


def test_normalised_run_is_evaluated_with_its_frozen_statistics():
    cfg = jra.PPOConfig(**{**CARTPOLE.__dict__, "normalize_obs": True})
    state = jax.jit(sync.program(cfg).init)(jax.random.key(0))  # moments of the first obs
    result = jra.TrainResult(state, {})
    with pytest.raises(ValueError, match="normalize_obs is set: evaluation needs the training "
                                         "statistics"):
        jra.evaluate(result.params, cfg, 4)
    from_state = jra.evaluate(result, cfg, 8, seed=3)
    moments = jax.tree.map(lambda x: x[0], result.state.env.env_state.moments)
    explicit = jra.evaluate(result.params, cfg, 8, seed=3, obs_moments=moments)
    np.testing.assert_array_equal(from_state["returns"], explicit["returns"])
    # the statistics matter: other moments make other observations, so other actions
    shifted = RunningMoments(moments.mean + 3.0 * jnp.sqrt(moments.var), moments.var,
                             moments.count)
    other = jra.evaluate(result.params, cfg, 8, seed=3, obs_moments=shifted)
    assert not np.array_equal(other["returns"], from_state["returns"])


def test_gif_of_one_episode(tmp_path):
    from PIL import Image

    cfg = jra.PPOConfig(env="Breakout-MinAtar", num_envs=4, num_steps=16, num_minibatches=2,
                        total_timesteps=4 * 16)
    _, algo = build(cfg)
    params = algo.init(jax.random.key(0)).params
    path = jra.save_gif(params, cfg, tmp_path / "episode.gif", max_frames=12)
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.n_frames > 3
