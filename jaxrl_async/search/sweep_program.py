"""The compiled program of a sweep, and where its runs live.

The stacked configs × seeds ``[R]`` are split along the run axis over a ``Mesh`` of devices,
each device ``vmap``-ing its share of the sync runner's per-run program. Under
``jax.distributed`` the mesh holds the devices of every process (the same number from each),
so each process trains only the runs on its own devices; the inputs are global arrays made
from each process's (identical) host copy, and the outputs are gathered back to every process.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_async.config.shared import hyper_fields
from jaxrl_async.run.sinks import format_return
from jaxrl_async.runners import sync
from jaxrl_async.runners.common import build, with_evaluation

AXIS = "runs"


def _stack(configs: Sequence[Any]) -> Any:
    """One config whose hyper leaves carry a leading run axis: float32 for fields declared
    ``float`` (so ``ent_coef=[0, 1]`` traces like ``[0.0, 1.0]``), int32 for integers."""
    types = {f.name: str(f.type) for f in dataclasses.fields(configs[0])}

    def column(name: str) -> np.ndarray:
        x = np.asarray([getattr(c, name) for c in configs])
        if types[name] in ("float", "<class 'float'>") or x.dtype.kind == "f":
            return x.astype(np.float32)
        return x.astype(np.int32) if x.dtype.kind in "iu" else x

    leaves = [column(name) for name in hyper_fields(configs[0])]
    return jax.tree.unflatten(jax.tree.structure(configs[0]), leaves)


class _Progress:
    """Host side of the in-program progress report (one device callback per log chunk): steps
    done, SPS, and the best return so far (the highest mean return any run reported in an
    update; never goes down, whichever device reports last). ``runs_per_device``: the real
    runs on each device of the mesh (a callback comes only from this process's devices)."""

    active: _Progress | None = None
    lock = threading.Lock()

    def __init__(self, bar: Any, runs_per_device: list[int], steps_per_update: int,
                 offset: int = 0):
        self.bar, self.runs, self.spu, self.offset = bar, runs_per_device, steps_per_update, offset
        self.done = [0] * len(runs_per_device)
        self.best = -math.inf
        self.start = time.perf_counter()

    @staticmethod
    def tick(device: Any, update: Any, best: Any) -> None:
        with _Progress.lock:
            self = _Progress.active
            if self is None:
                return
            self.done[int(device)] = int(update)
            steps = sum(u * r for u, r in zip(self.done, self.runs)) * self.spu
            self.bar.update(max(self.offset + steps - self.bar.n, 0))
            sps = steps / max(time.perf_counter() - self.start, 1e-9)
            self.best = max(self.best, float(best)) if math.isfinite(best) else self.best
            shown = format_return(self.best) if math.isfinite(self.best) else "n/a"
            self.bar.set_postfix_str(f"SPS={sps:,.0f}, best return={shown}")


def vmap_runs(fn: Callable) -> Callable:
    """``jax.vmap(fn)`` over the runs' leading axis, or for one run ``fn`` on it unbatched (the
    axis given back): one run per device is then ``jra.train``'s program, which XLA:CPU ran
    1.1-1.25x faster than a vmap of one (docs/results.md)."""

    def call(*args: Any) -> Any:
        if jax.tree.leaves(args)[0].shape[0] > 1:
            return jax.vmap(fn)(*args)
        return jax.tree.map(lambda x: x[None], fn(*jax.tree.map(lambda x: x[0], args)))

    return call


def init_runs(cfgs: Any, seeds: jax.Array) -> Any:
    """The run states of stacked configs and seeds ``[R]``, as ``jra.train`` starts them."""
    return vmap_runs(lambda cfg, seed: sync.program(cfg).init(jax.random.key(seed)))(cfgs, seeds)


def step_runs(cfgs: Any, states: Any, i: jax.Array, *, num_devices: int, num_updates: int,
              log_every: int, progress: bool) -> tuple[Any, dict]:
    """Update ``i + 1`` (``i`` an unbatched counter) of every run ``[R]``: the sync runner's
    update, the evaluation due after it and the progress report (one callback per log chunk)."""

    def update(cfg, state):
        return sync.program(cfg).update(state)

    def evaluate(runs):  # (cfgs, states) -> eval metrics [R]
        return vmap_runs(lambda c, s: sync.program(c).evaluate(s))(*runs)

    states, metrics = vmap_runs(update)(cfgs, states)
    if cfgs.eval_every:  # the cond outside the vmap: only the updates due evaluate
        metrics = with_evaluation(cfgs, evaluate, (cfgs, states), metrics, i + 1)
    if progress:
        done = states.update[0]
        device = lax.axis_index(AXIS) if num_devices > 1 else 0
        best = jnp.nanmax(metrics["episode_return"])
        report = (done % log_every == 0) | (done == num_updates)
        lax.cond(report, lambda: jax.debug.callback(_Progress.tick, device, done, best),
                 lambda: None)
    return states, metrics


def final_params(cfgs: Any, states: Any) -> Any:
    """The policy params of every run ``[R]``."""
    return vmap_runs(lambda c, s: build(c)[1].policy_params(s))(cfgs, states.learner)


# --------------------------------------------------------------------------- devices
def mesh_devices(num_devices: int) -> list[Any]:
    """The devices a sweep over ``num_devices`` runs on: the first ``num_devices / processes``
    local devices of every process, process by process (one process: its first
    ``num_devices``). Each process must hold a share: callers keep ``num_devices`` a multiple
    of ``jax.process_count()``."""
    per = num_devices // jax.process_count()
    return [d for p in range(jax.process_count())
            for d in [x for x in jax.devices() if x.process_index == p][:per]]


def local_positions(num_devices: int) -> list[int]:
    """The mesh positions (``lax.axis_index``) of this process's devices."""
    me = jax.process_index()
    return [i for i, d in enumerate(mesh_devices(num_devices)) if d.process_index == me]


@functools.cache
def _program(num_devices: int, num_updates: int, log_every: int, progress: bool,
             options: tuple) -> Any:
    """The jitted sweep: stacked configs and seeds ``[R]`` -> (final params, metrics
    ``[R, num_updates]``). Cached, so repeating a sweep of the same shape does not recompile."""

    def runs(cfgs: Any, seeds: jax.Array):
        def body(states, i):
            return step_runs(cfgs, states, i, num_devices=num_devices, num_updates=num_updates,
                             log_every=log_every, progress=progress)

        states = init_runs(cfgs, seeds)
        states, metrics = lax.scan(body, states, jnp.arange(num_updates, dtype=jnp.int32))
        params = final_params(cfgs, states)
        return params, jax.tree.map(lambda m: jnp.swapaxes(m, 0, 1), metrics)

    if num_devices > 1:
        mesh = Mesh(np.array(mesh_devices(num_devices)), (AXIS,))
        runs = jax.shard_map(runs, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                             check_vma=False)
    return jax.jit(runs, compiler_options=dict(options) or None)


def place(tree: Any, num_devices: int) -> Any:
    """Host arrays ``[R, ...]`` (the same in every process) as global arrays split along the
    run axis over the sweep's mesh; each process puts only its own devices' slices. One
    device: the host arrays themselves (``jit`` places them)."""
    if num_devices == 1:
        return tree
    sharding = NamedSharding(Mesh(np.array(mesh_devices(num_devices)), (AXIS,)), P(AXIS))
    return jax.tree.map(lambda x: jax.make_array_from_callback(
        x.shape, sharding, lambda index, x=x: x[index]), tree)


def local_runs(tree: Any) -> int:
    """How many runs (padding included) of an output of ``_program`` this process's devices
    hold: its share of the run axis."""
    leaf = jax.tree.leaves(tree)[0]
    if not isinstance(leaf, jax.Array):
        return int(np.shape(leaf)[0])
    return sum(s.data.shape[0] for s in leaf.addressable_shards)


def _wait(tree: Any) -> Any:
    """Block until ``tree`` is computed, in short sleeps, so Ctrl-C is not held off."""
    for leaf in jax.tree.leaves(tree):
        while not leaf.is_ready():
            time.sleep(0.02)
    return jax.device_get(tree)


def wait_local(tree: Any) -> None:
    """Block until this process's shards of ``tree`` are computed (in short sleeps, so Ctrl-C
    is not held off): its share of the training is done."""
    for leaf in jax.tree.leaves(tree):
        for shard in leaf.addressable_shards if isinstance(leaf, jax.Array) else ():
            while not shard.data.is_ready():
                time.sleep(0.02)


def fetch(tree: Any) -> Any:
    """``tree`` (global arrays split over the processes' devices) whole, as host arrays, in
    every process: under ``jax.distributed`` the shards are gathered
    (``process_allgather``)."""
    wait_local(tree)
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)
