"""The one place env meets policy: ``T`` steps of ``B`` envs under ``lax.scan``."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.algos.base import Algorithm, Trajectory, has_memory
from jaxrl_async.envs import VecEnv


class EnvCarry(NamedTuple):
    """What a rollout continues from. Every leaf has the leading env axis B."""

    env_state: Any
    obs: jax.Array  # [B, *obs_shape]
    first: jax.Array  # [B] bool: obs is the first observation of an episode
    memory: Any = ()  # [B, ...] recurrent policy state; () for feedforward policies


class EpisodeSums(NamedTuple):
    """Totals over the episodes that finished during a rollout (sum over envs and steps)."""

    return_sum: jax.Array  # []
    length_sum: jax.Array  # []
    count: jax.Array  # []


def env_keys(key: jax.Array, env_id: jax.Array) -> jax.Array:
    """One key per env, keyed on its global id, so splitting envs over devices changes nothing."""
    return jax.vmap(jax.random.fold_in, (None, 0))(key, env_id)


def step_keys(key: jax.Array, num_steps: int, env_id: jax.Array) -> jax.Array:
    """``[T, B, 2]`` keys of a rollout: (act key, env key) of every step of every env, drawn in
    one vectorised call (also what host actors act with, ``runners.host_actors``)."""
    # Hashed as flat [T * B] batches: the keys of split(fold_in(fold_in(key, t), env_id[b])),
    # but XLA:CPU compiles a one-axis hash in a fraction of the time of a [T, B] one.
    num_envs = env_id.shape[0]
    time_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(num_steps))
    keys = jax.vmap(jax.random.fold_in)(jnp.repeat(time_keys, num_envs),
                                        jnp.tile(env_id, num_steps))
    return jax.vmap(jax.random.split)(keys).reshape(num_steps, num_envs, 2)


def reset(env: VecEnv, algo: Algorithm, key: jax.Array, env_id: jax.Array) -> EnvCarry:
    """Reset the envs ``env_id [B]`` (and the policy's memory, for a recurrent algorithm)."""
    obs, env_state = env.reset(env_keys(key, env_id))
    memory = jax.tree.map(lambda m: jnp.broadcast_to(m, (*env_id.shape, *jnp.shape(m))),
                          algo.init_memory())
    return EnvCarry(env_state, obs, jnp.ones(env_id.shape, bool), memory)


def rollout(
    env: VecEnv,
    algo: Algorithm,
    params: Any,
    carry: EnvCarry,
    key: jax.Array,
    num_steps: int,
    env_id: jax.Array,  # [B] global env ids
    policy_version: jax.Array | int = 0,
    first_step: jax.Array | int = 0,
) -> tuple[EnvCarry, Trajectory, EpisodeSums]:
    """Collect ``num_steps`` steps of every env with ``algo.act`` vmapped over envs.

    For a recurrent policy (``has_memory``) the memory each step was given and the ``first``
    flags go into ``extras["memory"]`` and ``extras["first"]``, so the learner can re-run the
    sequence from ``extras["memory"][0]``. ``first_step``: the step index (``Trajectory.step``)
    of the rollout's first step.
    """
    recurrent = has_memory(algo)
    act_batch = jax.vmap(algo.act, in_axes=(None, 0, 0, 0, 0))

    def step(carry: tuple[EnvCarry, EpisodeSums], keys: jax.Array):
        (env_state, obs, first, memory), sums = carry
        action, extras, next_memory = act_batch(params, obs, keys[:, 0], memory, first)
        if recurrent:
            extras = {**extras, "memory": memory, "first": first}
        next_obs, env_state, reward, terminated, truncated, info = env.step(
            keys[:, 1], env_state, action
        )
        transition = (obs, action, reward, terminated, truncated, info["final_observation"], extras)
        done = info["episode_done"]
        sums = EpisodeSums(
            sums.return_sum + jnp.sum(jnp.where(done, info["episode_return"], 0.0)),
            sums.length_sum + jnp.sum(jnp.where(done, info["episode_length"], 0)),
            sums.count + jnp.sum(done),
        )
        next_carry = EnvCarry(env_state, next_obs, terminated | truncated, next_memory)
        return (next_carry, sums), transition

    zero = jnp.zeros((), jnp.float32)
    (carry, sums), steps = jax.lax.scan(step, (carry, EpisodeSums(zero, zero, zero)),
                                        step_keys(key, num_steps, env_id))
    obs, action, reward, terminated, truncated, next_obs, extras = steps
    time_batch = reward.shape  # [T, B]
    traj = Trajectory(
        obs, action, reward, terminated, truncated, next_obs, extras,
        env_id=jnp.broadcast_to(env_id, time_batch),
        policy_version=jnp.broadcast_to(jnp.asarray(policy_version, jnp.int32), time_batch),
        step=step_index(jnp.asarray(first_step, jnp.int32), *time_batch),
    )
    return carry, traj, sums


def step_index(first_step: Any, num_steps: int, num_envs: int) -> Any:
    """``[T, B]`` int32 ``Trajectory.step`` of a rollout starting at ``first_step`` (numpy when
    ``first_step`` is a numpy or Python int: host actors)."""
    xp = jnp if isinstance(first_step, jax.Array) else np
    steps = xp.asarray(first_step, xp.int32) + xp.arange(num_steps, dtype=xp.int32)
    return xp.broadcast_to(steps[:, None], (num_steps, num_envs))


def episode_metrics(sums: EpisodeSums) -> dict[str, jax.Array]:
    """Mean return/length of the episodes that finished (NaN when none did), and what a window
    of updates needs for its own mean: ``episode_return_sum`` and ``episodes`` (the count)."""
    any_done = sums.count > 0
    denom = jnp.maximum(sums.count, 1.0)
    return {
        "episode_return": jnp.where(any_done, sums.return_sum / denom, jnp.nan),
        "episode_length": jnp.where(any_done, sums.length_sum / denom, jnp.nan),
        "episode_return_sum": sums.return_sum,
        "episodes": sums.count,
    }


def eval_policy(algo: Algorithm, greedy: bool) -> Any:
    """``(params, obs [B], keys [B], memory, first) -> (action [B], memory)``: ``algo.eval_act``
    (greedy: the mode) vmapped over envs, or its behaviour policy when it has no ``eval_act``."""

    def one(params, obs, key, memory, first):
        if algo.eval_act is None:
            action, _, memory = algo.act(params, obs, key, memory, first)
            return action, memory
        return algo.eval_act(params, obs, key, greedy, memory, first)

    return jax.vmap(one, in_axes=(None, 0, 0, 0, 0))


def run_episodes(
    env: VecEnv,
    algo: Algorithm,
    params: Any,
    key: jax.Array,
    env_id: jax.Array,
    greedy: bool,
    max_steps: int,
    observe: Any = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One episode of each of the fresh envs ``env_id [B]`` (reset from ``key``), all stepped
    together in a ``while_loop`` until every one has ended or ``max_steps`` steps ran: (return
    [B], length [B], ended [B]). ``observe`` maps an observation batch before the policy sees it
    (normalisation with frozen statistics). Evaluation during training and ``jra.evaluate`` are
    this function."""
    policy = eval_policy(algo, greedy)
    observe = observe or (lambda obs: obs)
    reset_key, key = jax.random.split(key)
    env_state, obs, first, memory = reset(env, algo, reset_key, env_id)
    zeros = jnp.zeros(env_id.shape, jnp.float32)
    carry = (env_state, observe(obs), memory, first, jnp.zeros(env_id.shape, bool), zeros, zeros,
             jnp.int32(0))

    def running(c):
        return (~c[4]).any() & (c[7] < max_steps)

    def step(c):
        env_state, obs, memory, first, done, returns, lengths, t = c
        keys = env_keys(jax.random.fold_in(key, t), env_id)
        act_keys, step_keys_ = jax.vmap(jax.random.split, out_axes=1)(keys)
        action, memory = policy(params, obs, act_keys, memory, first)
        next_obs, env_state, reward, terminated, truncated, info = env.step(
            step_keys_, env_state, action)
        # the first episode's return and length so far: final once it has ended
        returns = jnp.where(done, returns, returns + reward)
        lengths = jnp.where(done, lengths, lengths + 1.0)
        return (env_state, observe(next_obs), memory, terminated | truncated,
                done | info["episode_done"], returns, lengths, t + 1)

    out = jax.lax.while_loop(running, step, carry)
    return out[5], out[6], out[4]
