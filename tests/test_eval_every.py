"""Evaluation during training (eval_every): inside the compiled program, equal to jra.evaluate
on the state after that update, NaN between evaluations, the same on 1 and 2 devices and under
the async runner (lag 0 reproduces the sync runner)."""

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.run.train import summary
from jaxrl_async.runners import run, sync
from jaxrl_async.runners.common import eval_key
from jaxrl_async.runners.state import Callbacks

# 5 updates, evaluated after updates 2, 4 and 5 (the last); normalised observations and sampled
# actions, so the frozen statistics and the keys of each evaluation both matter.
CFG = dict(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2,
           total_timesteps=4 * 16 * 5, log_every=1, eval_every=2, eval_episodes=4,
           eval_greedy=False, normalize_obs=True, lr=3e-3, fast_compile=True)
EVALUATED = [2, 4, 5]


class KeepStates(Callbacks):
    def __init__(self):
        self.states = {}

    def on_state(self, state, final, update=None):
        self.states[update] = jax.device_get(state)  # a copy: the runner donates its buffers


@pytest.fixture(scope="module")
def sync_run():
    cfg = jra.PPOConfig(**CFG)
    keep = KeepStates()
    result = sync.run(cfg, jax.random.key(3), keep)
    return cfg, result, keep.states


def test_eval_return_equals_jra_evaluate_on_the_state_of_that_update(sync_run):
    cfg, result, states = sync_run
    returns, lengths = result.metrics["eval_return"], result.metrics["eval_length"]
    assert returns.shape == (5,)
    due = np.isin(np.arange(1, 6), EVALUATED)
    assert np.isnan(returns[~due]).all() and np.isfinite(returns[due]).all(), returns
    for k in EVALUATED:
        state = states[k]
        assert int(state.update) == k
        ref = jra.evaluate(state, cfg, cfg.eval_episodes, greedy=False,
                           key=eval_key(state.key, k))
        np.testing.assert_allclose(returns[k - 1], ref["mean_return"], rtol=1e-6)
        np.testing.assert_allclose(lengths[k - 1], ref["mean_length"], rtol=1e-6)
    # each evaluation has its own episodes: another update's key gives other returns
    other = jra.evaluate(states[4], cfg, cfg.eval_episodes, greedy=False,
                         key=eval_key(states[4].key, 2))
    assert not np.array_equal(other["returns"], jra.evaluate(
        states[4], cfg, cfg.eval_episodes, greedy=False, key=eval_key(states[4].key, 4))["returns"])
    assert summary(cfg, result)["final_eval_return"] == pytest.approx(returns[-1])


def test_evaluation_is_the_same_on_two_devices(sync_run, devices):
    cfg, result, _ = sync_run
    two = jra.PPOConfig(**{**CFG, "runner": jra.SyncConfig(num_devices=2)})
    on_two = jax.jit(jra.make_train(two))(jax.random.key(3))
    for name in ("eval_return", "eval_length", "loss", "episode_return"):
        np.testing.assert_allclose(on_two.metrics[name], result.metrics[name], rtol=1e-4,
                                   atol=1e-5, err_msg=name)


def test_async_runner_evaluates_like_the_sync_runner(sync_run):
    cfg, result, _ = sync_run
    acfg = jra.PPOConfig(**CFG, runner=jra.AsyncConfig(lag=0))
    out = run(acfg, jax.random.key(3))
    np.testing.assert_allclose(out.metrics["eval_return"], result.metrics["eval_return"],
                               rtol=1e-4, atol=1e-5)


def test_eval_every_needs_a_device_env():
    with pytest.raises(ValueError, match=r"PPOConfig\.eval_every must be 0 for the host env"):
        jra.PPOConfig(env="gymnasium:CartPole-v1", eval_every=5,
                      runner=jra.AsyncConfig())
