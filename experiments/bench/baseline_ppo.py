"""Baseline for the speed comparison: PPO written the common single-file way.

This is how most JAX PPO implementations (PureJaxRL's style) are written: flax's orthogonal
init (LAPACK QR), separate per-leaf Adam, a full-batch shuffle with ``jax.random.permutation``
per epoch, per-step key splitting, gymnax's ``step``. Same settings and same learning as ours;
``bench_sync.py --baseline`` times it in the same process as ours, so the ratio is fair on a
noisy machine. Written here for measurement, not used by the library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax


class ActorCritic(nn.Module):
    num_actions: int
    orthogonal: Callable = nn.initializers.orthogonal

    @nn.compact
    def __call__(self, x):
        orth = self.orthogonal
        a = nn.tanh(nn.Dense(64, kernel_init=orth(np.sqrt(2)))(x))
        a = nn.tanh(nn.Dense(64, kernel_init=orth(np.sqrt(2)))(a))
        logits = nn.Dense(self.num_actions, kernel_init=orth(0.01))(a)
        c = nn.tanh(nn.Dense(64, kernel_init=orth(np.sqrt(2)))(x))
        c = nn.tanh(nn.Dense(64, kernel_init=orth(np.sqrt(2)))(c))
        return logits, nn.Dense(1, kernel_init=orth(1.0))(c)[..., 0]


class Transition(NamedTuple):
    done: jax.Array
    action: jax.Array
    value: jax.Array
    reward: jax.Array
    log_prob: jax.Array
    obs: jax.Array
    ep_return: jax.Array


def make_train(num_envs=4, num_steps=128, total_timesteps=500_000, epochs=4, minibatches=4,
               lr=2.5e-4, gamma=0.99, lam=0.95, clip=0.2, ent=0.01, vf=0.5, max_grad_norm=0.5,
               env_id="CartPole-v1", anneal_lr=True, orthogonal=None):
    """``orthogonal``: the kernel initializer (flax's, with its LAPACK QR, by default; a
    vmapped sweep passes the library's LAPACK-free one: flax's under ``vmap`` is a batched
    LAPACK QR, which can hang XLA:CPU, docs/design.md)."""
    env, env_params = gymnax.make(env_id)
    num_updates = total_timesteps // num_envs // num_steps
    minibatch_size = num_envs * num_steps // minibatches
    net = ActorCritic(env.action_space(env_params).n, orthogonal or nn.initializers.orthogonal)

    def schedule(count):
        if not anneal_lr:
            return lr
        return lr * (1.0 - (count // (minibatches * epochs)) / num_updates)

    tx = optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(schedule, eps=1e-5))

    def train(rng):
        rng, k = jax.random.split(rng)
        params = net.init(k, jnp.zeros(env.observation_space(env_params).shape))
        opt_state = tx.init(params)
        rng, k = jax.random.split(rng)
        obs, env_state = jax.vmap(env.reset, (0, None))(jax.random.split(k, num_envs), env_params)
        ep_ret = jnp.zeros(num_envs)
        last_ret = jnp.zeros(num_envs)

        def update(carry, _):
            params, opt_state, env_state, obs, ep_ret, last_ret, rng = carry

            def step(c, _):
                env_state, obs, ep_ret, last_ret, rng = c
                rng, k1, k2 = jax.random.split(rng, 3)
                logits, value = net.apply(params, obs)
                action = jax.random.categorical(k1, logits)
                log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], 1)[:, 0]
                obs2, env_state, reward, term, trunc, _ = jax.vmap(env.step, (0, 0, 0, None))(
                    jax.random.split(k2, num_envs), env_state, action, env_params)
                done = term | trunc
                ep_ret = ep_ret + reward
                last_ret = jnp.where(done, ep_ret, last_ret)
                t = Transition(done, action, value, reward, log_prob, obs, last_ret)
                return (env_state, obs2, jnp.where(done, 0.0, ep_ret), last_ret, rng), t

            (env_state, obs, ep_ret, last_ret, rng), traj = jax.lax.scan(
                step, (env_state, obs, ep_ret, last_ret, rng), None, num_steps)
            _, last_val = net.apply(params, obs)

            def gae_step(c, t):
                adv, next_value = c
                delta = t.reward + gamma * next_value * (1 - t.done) - t.value
                adv = delta + gamma * lam * (1 - t.done) * adv
                return (adv, t.value), adv

            _, advantages = jax.lax.scan(gae_step, (jnp.zeros_like(last_val), last_val), traj,
                                         reverse=True)
            targets = advantages + traj.value

            def loss_fn(params, t, adv, target):
                logits, value = net.apply(params, t.obs)
                logp_all = jax.nn.log_softmax(logits)
                log_prob = jnp.take_along_axis(logp_all, t.action[:, None], 1)[:, 0]
                v_clip = t.value + jnp.clip(value - t.value, -clip, clip)
                v_loss = 0.5 * jnp.maximum((value - target) ** 2, (v_clip - target) ** 2).mean()
                ratio = jnp.exp(log_prob - t.log_prob)
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv).mean()
                entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
                return pg + vf * v_loss - ent * entropy

            def epoch(c, _):
                params, opt_state, rng = c
                rng, k = jax.random.split(rng)
                batch = jax.tree.map(lambda x: x.reshape(num_envs * num_steps, *x.shape[2:]),
                                     (traj, advantages, targets))
                perm = jax.random.permutation(k, num_envs * num_steps)
                batch = jax.tree.map(lambda x: x[perm].reshape(minibatches, minibatch_size,
                                                               *x.shape[1:]), batch)

                def mb(c, b):
                    params, opt_state = c
                    grads = jax.grad(loss_fn)(params, *b)
                    updates, opt_state = tx.update(grads, opt_state)
                    return (optax.apply_updates(params, updates), opt_state), None

                (params, opt_state), _ = jax.lax.scan(mb, (params, opt_state), batch)
                return (params, opt_state, rng), None

            (params, opt_state, rng), _ = jax.lax.scan(epoch, (params, opt_state, rng), None,
                                                       epochs)
            metric = traj.ep_return.mean()
            return (params, opt_state, env_state, obs, ep_ret, last_ret, rng), metric

        carry = (params, opt_state, env_state, obs, ep_ret, last_ret, rng)
        carry, returns = jax.lax.scan(update, carry, None, num_updates)
        return carry[0], returns

    return train
