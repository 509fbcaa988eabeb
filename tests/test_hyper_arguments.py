"""Changing a hyperparameter is not a new program: ``jra.train`` (the sync runner's host loop)
passes the config's ``hyper`` fields (lr, gamma, ent_coef ...) to its compiled programs as
arguments, as a sweep traces them, so a config differing only in them compiles nothing, and
computes, bit for bit, what the program with those values written in as constants computes.
About 30 s on two busy cores."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import jaxrl_async as jra
from jaxrl_async.runners import sync
from jaxrl_async.search.sweep import count_compiles

CFG = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=160,
                    num_minibatches=2, update_epochs=2, hidden_sizes=(16,), log_every=3)


def with_constants(cfg, seed: int) -> tuple[list[np.ndarray], dict]:
    """The run of ``cfg`` by the host loop's programs with the config closed over (its
    hyperparameters constants in the program, as before they were arguments)."""
    chunk = min(cfg.log_every, cfg.num_updates)
    state = jax.jit(lambda k: sync.program(cfg).init(k))(jax.random.key(seed))
    step = jax.jit(lambda s, n: sync.run_chunk(cfg, chunk, s, n))
    rows = []
    for begin in range(0, cfg.num_updates, chunk):
        n = min(chunk, cfg.num_updates - begin)
        state, buffers, _ = step(state, jnp.int32(n))
        rows.append({k: np.asarray(v)[:n] for k, v in buffers.items()})
    metrics = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    return [np.asarray(x) for x in jax.tree.leaves(state.learner)], metrics


def test_a_changed_hyperparameter_compiles_nothing_and_computes_what_constants_do():
    jra.train(CFG, seed=1, progress=False)
    changed = dataclasses.replace(CFG, lr=1e-3, ent_coef=0.0, gamma=0.95, clip_eps=0.1)
    with count_compiles() as names:
        result = jra.train(changed, seed=1, progress=False)
    assert names == [], names  # the same programs: only the argument values differ
    params, metrics = with_constants(changed, seed=1)
    for a, b in zip(params, jax.tree.leaves(result.state.learner), strict=True):
        np.testing.assert_array_equal(a, np.asarray(b))  # bit for bit, and not CFG's values
    assert metrics.keys() == result.metrics.keys()
    for name in metrics:
        np.testing.assert_array_equal(metrics[name], result.metrics[name], err_msg=name)


def test_a_changed_static_field_is_a_new_program():
    jra.train(CFG, seed=0, progress=False)
    with count_compiles() as names:
        jra.train(dataclasses.replace(CFG, update_epochs=1), seed=0, progress=False)
    assert len(names) >= 1


def test_hyperparameters_are_float32_and_int32_scalars_like_a_sweeps():
    hyper = sync.hyperparameters(dataclasses.replace(CFG, ent_coef=0))  # an int for a float
    leaves = jax.tree.leaves(hyper)
    assert len(leaves) == len(jra.PPOConfig._hyper_fields)
    assert {x.dtype for x in leaves} == {np.dtype(np.float32)}
    assert jax.tree.structure(hyper) == jax.tree.structure(CFG)
