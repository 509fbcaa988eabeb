"""Our replay buffer against flashbax's trajectory buffer: insert and n-step-window sampling.

    python experiments/bench/bench_replay.py [--obs-size 4] [--capacity 50048] [--repeats 5]

Both hold the same transitions (obs, action, reward, terminated, truncated, next_obs) of B envs
and insert time-major [T, B] rollouts. "sample" is what the learner needs per gradient step: a
batch of n-step transitions (obs, action, n-step return, discount, bootstrap obs), from
``replay.sample_batch`` or from flashbax's sampled windows of n transitions. Each figure is one
operation inside a jitted loop of many (dispatch amortised), median of repeats, ours and
flashbax's calls interleaved so machine noise hits both. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import flashbax
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_async.algos import replay as replay_buffer
from jaxrl_async.algos.base import PerEnv
from jaxrl_async.algos.replay import OffPolicyConfig
from jaxrl_async.algos.returns import n_step_return
from jaxrl_async.runners.common import with_env_axis


def timed_pair(ours, theirs, args_ours, args_theirs, repeats: int) -> tuple[float, float]:
    """Median seconds of each compiled call, the two calls interleaved (noise hits both)."""
    fns = [jax.jit(f).lower(*a).compile() for f, a in ((ours, args_ours), (theirs, args_theirs))]
    times: list[list[float]] = [[], []]
    for _ in range(repeats + 1):
        for i, (fn, a) in enumerate(zip(fns, (args_ours, args_theirs))):
            start = time.perf_counter()
            jax.block_until_ready(fn(*a))
            times[i].append(time.perf_counter() - start)
    return float(np.median(times[0][1:])), float(np.median(times[1][1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--obs-size", type=int, default=4)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=8)
    parser.add_argument("--capacity", type=int, default=50_048, help="transitions, all envs")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--n-step", type=int, default=3)
    parser.add_argument("--ops", type=int, default=500, help="operations per timed scan")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    B, T, n, ops = args.num_envs, args.num_steps, args.n_step, args.ops

    obs = jnp.zeros(args.obs_size)
    item = replay_buffer.Transition(obs, jnp.zeros((), jnp.int32), 0.0, False, False, obs)
    rollout = jax.tree.map(lambda x: jnp.ones((T, B, *jnp.shape(x)), jnp.asarray(x).dtype), item)

    ours = with_env_axis(PerEnv(replay_buffer.init(item, args.capacity // B)), B).value
    warnings.filterwarnings("ignore", message="Setting max_size dynamically")
    fbx = flashbax.make_trajectory_buffer(
        add_batch_size=B, sample_batch_size=args.batch_size, sample_sequence_length=n,
        period=1, min_length_time_axis=n, max_size=args.capacity)
    fbx_state = fbx.init(item)

    def batch_major(items):  # flashbax adds [B, T] batches; rollouts are time-major [T, B]
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), items)

    def fresh(i):  # a different rollout every iteration (nothing hoisted out of the loop)
        f = i.astype(jnp.float32)
        return rollout._replace(obs=rollout.obs + f, reward=rollout.reward + f)

    def ours_insert(buffer):
        return lax.fori_loop(0, ops, lambda i, b: replay_buffer.insert(b, fresh(i)), buffer)

    def fbx_insert(state):
        return lax.fori_loop(0, ops, lambda i, s: fbx.add(s, batch_major(fresh(i))), state)

    # fill both, then time sampling
    for _ in range(args.capacity // (B * T)):
        ours = replay_buffer.insert(ours, rollout)
        fbx_state = fbx.add(fbx_state, batch_major(rollout))
    env_id = jnp.arange(B)

    cfg = OffPolicyConfig(num_envs=B, num_steps=T, buffer_size=args.capacity, n_step=n,
                          batch_size=args.batch_size, samples_per_insert=args.batch_size / 1,
                          learning_starts=n * B)

    def total(tree) -> jax.Array:  # consume every leaf (nothing dead-code eliminated)
        return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(tree))

    def ours_sample(buffer, key):  # the n-step batch the learner takes
        def one(acc, k):
            batch = replay_buffer.sample_batch(buffer, k, env_id, cfg)
            return acc + total(batch._replace(key=None)), None
        return lax.scan(one, 0.0, jax.random.split(key, ops))[0]

    def fbx_sample(state, key):  # the same batch from flashbax's windows
        def one(acc, k):
            w = fbx.sample(state, k).experience  # [N, n, ...]
            ret, discount, last = n_step_return(w.reward, w.terminated, w.truncated, 0.99)
            next_obs = jnp.take_along_axis(w.next_obs, last[:, None, None], 1)[:, 0]
            batch = (w.obs[:, 0], w.action[:, 0], ret, discount, next_obs)
            return acc + total(batch), None
        return lax.scan(one, 0.0, jax.random.split(key, ops))[0]

    key = jax.random.key(0)
    insert_s = timed_pair(ours_insert, fbx_insert, (ours,), (fbx_state,), args.repeats)
    sample_s = timed_pair(ours_sample, fbx_sample, (ours, key), (fbx_state, key), args.repeats)
    figures = {
        "insert_us": insert_s[0] / ops * 1e6,
        "flashbax_insert_us": insert_s[1] / ops * 1e6,
        "sample_us": sample_s[0] / ops * 1e6,
        "flashbax_sample_us": sample_s[1] / ops * 1e6,
    }
    figures["insert_speedup"] = figures["flashbax_insert_us"] / figures["insert_us"]
    figures["sample_speedup"] = figures["flashbax_sample_us"] / figures["sample_us"]
    print(json.dumps({**vars(args), **{k: round(v, 2) for k, v in figures.items()}}))


if __name__ == "__main__":
    main()
