"""Orthogonal initialization in the order the parameters are created, so a network's
starting weights match the ones PyTorch's ``orthogonal_`` gives its peers."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp


def _orthonormal_columns(a: jax.Array, num_columns: jax.Array | int) -> jax.Array:
    """Q of the QR decomposition of the first ``num_columns`` columns of ``a [n, m]`` (n >= m),
    with diag(R) > 0: Gram-Schmidt applied twice per column (as stable as Householder here).
    Columns from ``num_columns`` on are left as they are (padding, see ``init_params``)."""
    m = a.shape[1]

    def column(j: int, q: jax.Array) -> jax.Array:
        done = q * (jnp.arange(m) < j)  # the columns already orthonormalised
        v = q[:, j]
        v = v - done @ (done.T @ v)
        v = v - done @ (done.T @ v)
        v = jnp.where(j < num_columns, v / jnp.maximum(jnp.linalg.norm(v), 1e-30), q[:, j])
        return q.at[:, j].set(v)

    return jax.lax.fori_loop(0, m, column, a)


def _orthogonal_matrix(a: jax.Array, rows: int, cols: int) -> jax.Array:
    """flax's orthogonal ``[rows, cols]`` matrix from the normal draw ``a [max, min]``."""
    q = _orthonormal_columns(a, min(rows, cols))
    return q.T if rows < cols else q


class _Recorder:
    """While active, ``orthogonal`` initializers return zeros and log ``(shape, scale)``."""

    calls: list[tuple[tuple[int, ...], float]] | None = None


def orthogonal(scale: float = math.sqrt(2)) -> Callable:
    """flax's orthogonal kernel initializer (the same distribution), without LAPACK.

    flax computes ``Q`` with a LAPACK QR. Under ``vmap`` (many seeds or configs) that becomes a
    *batched* LAPACK call, which deadlocks XLA:CPU (jaxlib 0.10.2) when two executions reach it at
    once (sweeps over devices, the async runner's actor and learner; docs/design.md). Gram-Schmidt
    is plain vectorisable arithmetic: no LAPACK, no deadlock. ``init_params`` goes further and
    draws every such kernel of a network in one call.
    """

    def init(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        if _Recorder.calls is not None:
            _Recorder.calls.append((tuple(shape), scale))
            return jnp.zeros(shape, dtype)
        rows, cols = math.prod(shape[:-1]), shape[-1]
        a = jax.random.normal(key, (max(rows, cols), min(rows, cols)), jnp.float32)
        return (scale * _orthogonal_matrix(a, rows, cols)).reshape(shape).astype(dtype)

    return init


def _in_creation_order(tree: Any, path: tuple = ()):
    """(path, leaf) of a params dict in insertion (= creation) order, unlike ``jax.tree``."""
    if isinstance(tree, dict):
        for name, sub in tree.items():
            yield from _in_creation_order(sub, (*path, name))
    else:
        yield path, tree


def _set(tree: dict, path: tuple, value: Any) -> None:
    for name in path[:-1]:
        tree = tree[name]
    tree[path[-1]] = value


def init_params(module: nn.Module, key: jax.Array, *example_inputs: Any) -> Any:
    """``module.init`` with every ``orthogonal`` kernel drawn at once: one normal draw and one
    batched Gram-Schmidt for the whole network instead of a draw per layer. The result has the
    same distribution as flax's orthogonal init and compiles faster (XLA:CPU spends much of a
    small program's compile time on random draws; figures in docs/results.md)."""
    init_key, draw_key = jax.random.split(key)
    _Recorder.calls = []
    try:
        params = module.init(init_key, *example_inputs)
        calls = _Recorder.calls
    finally:
        _Recorder.calls = None
    kernels = [(p, leaf) for p, leaf in _in_creation_order(params) if p[-1] == "kernel"]
    if [tuple(leaf.shape) for _, leaf in kernels] != [shape for shape, _ in calls]:
        raise ValueError("init_params: every kernel must use networks.orthogonal(...)")
    if not calls:
        return params

    dims = [(math.prod(shape[:-1]), shape[-1]) for shape, _ in calls]  # (rows, cols)
    n = max(max(r, c) for r, c in dims)
    m = max(min(r, c) for r, c in dims)
    # (Philox would compile faster here but fails to lower under shard_map in JAX 0.10.2,
    # and "rbg" gives different numbers under vmap: threefry keeps vmap == one-by-one.)
    # Drawn flat, then shaped: the same numbers as a [L, n, m] draw (threefry counts elements in
    # order), but one axis compiles several times faster on XLA:CPU (docs/results.md).
    draw = jax.random.normal(draw_key, (len(calls) * n * m,)).reshape(len(calls), n, m)
    mask = jnp.stack([(jnp.arange(n)[:, None] < max(r, c)) & (jnp.arange(m)[None] < min(r, c))
                      for r, c in dims])
    q = jax.vmap(_orthonormal_columns)(draw * mask, jnp.array([min(r, c) for r, c in dims]))
    params = jax.tree.map(lambda x: x, params)  # a copy we may write into
    for (path, leaf), (shape, scale), (rows, cols), q_l in zip(kernels, calls, dims, q):
        block = q_l[: max(rows, cols), : min(rows, cols)]
        matrix = block.T if rows < cols else block
        _set(params, path, (scale * matrix).reshape(shape).astype(leaf.dtype))
    return params
