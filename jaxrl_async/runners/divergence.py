"""Divergence: the first update whose learn metrics (the loss and its parts) or learner state
(params, optimizer state) hold a NaN or an inf, found inside the compiled program.

Gradients are not kept, but they reach the optimizer state in the same update (Adam's moments
are running means of them; a clipped non-finite gradient is NaN too), so a non-finite gradient
shows there. Both runners compute ``first_nonfinite`` after every update, on device, and look
at it once per ``log_every`` chunk: no host round trip per update.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_async.algos.base import is_per_env

# Metrics that are not the learner's numbers: NaN by design (no episode ended, no evaluation
# at this update) or counters.
NOT_WATCHED = frozenset({"env_steps", "episode_return", "episode_length", "episode_return_sum",
                         "episodes", "staleness", "staleness_max", "eval_return", "eval_length"})


def _parts(learner: Any) -> list[tuple[str, Any]]:
    """The learner state's named parts (a NamedTuple's fields), ``PerEnv`` parts (replay data,
    big and not the learner's numbers) left out."""
    if hasattr(learner, "_fields"):
        return [(name, getattr(learner, name)) for name in learner._fields
                if not is_per_env(getattr(learner, name))]
    return [("learner state", learner)]


def watched(learner: Any, metric_names: Iterable[str]) -> tuple[str, ...]:
    """What ``first_nonfinite`` indexes: the learn metrics (sorted), then the learner parts."""
    metrics = tuple(sorted((k for k in metric_names if k not in NOT_WATCHED),
                           key=lambda k: (k != "loss", k)))
    return metrics + tuple(name for name, _ in _parts(learner))


def first_nonfinite(learner: Any, metrics: dict[str, jax.Array]) -> jax.Array:
    """[] int32: the index in ``watched(learner, metrics)`` of the first part holding a NaN or
    an inf, or -1 when all are finite."""
    def bad(tree: Any) -> jax.Array:
        leaves = [jnp.asarray(x) for x in jax.tree.leaves(tree, is_leaf=is_per_env)
                  if not is_per_env(x)]
        leaves = [x for x in leaves if jnp.issubdtype(x.dtype, jnp.inexact)]
        if not leaves:
            return jnp.zeros((), bool)
        return jnp.any(jnp.stack([~jnp.all(jnp.isfinite(x)) for x in leaves]))

    names = watched(learner, metrics)
    n_metrics = len(names) - len(_parts(learner))
    flags = [bad(metrics[k]) for k in names[:n_metrics]] + [bad(p) for _, p in _parts(learner)]
    flags = jnp.stack(flags)
    return jnp.where(flags.any(), jnp.argmax(flags), -1).astype(jnp.int32)
