"""PQN: learns CartPole (fixed seeds), Q(lambda) targets, config errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.algos import base
from jaxrl_async.algos.returns import q_lambda_returns
from jaxrl_async.run.sinks import window_returns

# The PQNConfig defaults (close to Gallici et al.'s CartPole settings): 32 envs x 64 steps, 4
# epochs of 16 minibatches, lambda 0.95, 256x256 LayerNorm MLP, learning rate annealed to 0.
CARTPOLE = jra.PQNConfig(env="CartPole-v1", total_timesteps=249_856)


@pytest.fixture(scope="module")
def cartpole_3_seeds():
    return jax.jit(jax.vmap(jra.make_train(CARTPOLE)))(jax.random.split(jax.random.key(0), 3))


def test_pqn_learns_cartpole_in_250k_steps(cartpole_3_seeds):
    # Budget: 250k env steps (122 updates, 7.8k gradient steps). 450 of 500 under the behaviour
    # policy (epsilon 0.05): balancing to the time limit in nearly every episode. (Shorter
    # budgets left some seeds on the cart-drift plateau near 200.)
    returns = np.asarray(cartpole_3_seeds.metrics["episode_return"])  # [seeds, updates]
    last = window_returns(cartpole_3_seeds.metrics, 10)
    assert np.all(last >= 450), last
    assert np.all(np.nanmean(returns[:, :3], 1) < 60), "it starts from random play"
    eps = np.asarray(cartpole_3_seeds.metrics["epsilon"])[0]
    assert eps[0] == 1.0 and eps[-1] == pytest.approx(0.05)


def test_q_lambda_matches_rlax_with_per_step_lambda():
    rlax = pytest.importorskip("rlax")
    rng = np.random.default_rng(0)
    T, B = 10, 3
    reward = rng.normal(size=(T, B)).astype(np.float32)
    next_q = rng.normal(size=(T, B)).astype(np.float32)
    term, trunc = np.zeros((T, B), bool), np.zeros((T, B), bool)
    term[3, 0] = term[T - 1, 1] = trunc[5, 0] = trunc[2, 2] = True
    ours = q_lambda_returns(*map(jnp.asarray, (reward, next_q, term, trunc)), 0.97, 0.7)
    for b in range(B):  # rlax: discount 0 at termination, lambda 0 at truncation
        ref = rlax.lambda_returns(reward[:, b], 0.97 * (1 - term[:, b]), next_q[:, b],
                                  0.7 * (1.0 - trunc[:, b]))
        np.testing.assert_allclose(ours[:, b], ref, rtol=1e-5, atol=1e-5)


def test_q_lambda_ends():
    one = lambda x: jnp.array([[x]])
    no, yes = one(False), one(True)
    # truncation bootstraps from max Q(final obs); termination does not; lambda 1 at the end
    assert float(q_lambda_returns(one(1.0), one(10.0), no, yes, 0.9, 0.5)[0, 0]) == 10.0
    assert float(q_lambda_returns(one(1.0), one(10.0), yes, no, 0.9, 0.5)[0, 0]) == 1.0
    assert float(q_lambda_returns(one(1.0), one(10.0), no, no, 0.9, 0.5)[0, 0]) == 10.0


def test_rejects_continuous_envs():
    with pytest.raises(ValueError, match="PQNConfig.env must have discrete actions"):
        jra.PQNConfig(env="Pendulum-v1")
    with pytest.raises(ValueError, match="PQNConfig.num_minibatches must divide num_steps"):
        jra.PQNConfig(num_minibatches=5)


def test_gradient_accumulation_gives_the_full_batch_result(monkeypatch):
    # PQN's minibatches go through the shared minibatch_epochs: 4 micro-batches of 2 steps
    small = dict(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                 update_epochs=2, hidden_sizes=(32, 32), total_timesteps=4 * 16 * 3)
    full = jax.jit(jra.make_train(jra.PQNConfig(**small)))(jax.random.key(2))
    split, accumulate = [], base.accumulated_grad
    monkeypatch.setattr(base, "accumulated_grad",  # (traced once) see that it really splits
                        lambda loss, params, batch, n: split.append(n) or accumulate(
                            loss, params, batch, n))
    accum = jax.jit(jra.make_train(jra.PQNConfig(**small, grad_accum_steps=4)))(
        jax.random.key(2))
    assert split == [4]
    for a, b in zip(jax.tree.leaves(full.params), jax.tree.leaves(accum.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(full.metrics["loss"], accum.metrics["loss"], rtol=1e-4,
                               atol=1e-6)
