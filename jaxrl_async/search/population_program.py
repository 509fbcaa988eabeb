"""The compiled program of a population (``jra.pbt``, ``jra.successive_halving``), its members
sharded over a mesh of devices (those of every process under ``jax.distributed``).

The members are the runs ``[R]`` (run ``m * S + s`` is member ``m`` of the population of seed
``s``); with ``D`` devices each trains its ``R / D`` consecutive runs (``shard_map``, each
device ``vmap``-ing its share with ``sweep.step_runs``, as ``jra.sweep`` spreads its runs). The
exploit step at a segment's end is a collective inside the program: an all-gather of the
scores (``R`` floats), every device then ranks every population the same way, and an
all-gather of the learner states and observation statistics from which each device takes the
rows its own members copy. So the exploit is the one-device exploit, row for row, and the host
is not involved between segments.

Memory: the gather of the learner states holds every member's learner state (params,
optimizer state, observation statistics) on every device for the exploit, ``R`` times one
run's learner state beside the device's own share (for PPO with Adam about three times the
params per member); env states and replay are never gathered.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_async.config.shared import hyper_fields
from jaxrl_async.runners.common import with_moments
from jaxrl_async.search import exploit
from jaxrl_async.search.population import Schedule, Space
from jaxrl_async.search.sweep import final_params, init_runs, step_runs

AXIS = "runs"  # sweep.step_runs reports progress by this axis' index


# --------------------------------------------------------------------------- the devices
def population_devices(num_devices: int | None, population: int, seeds: int) -> tuple:
    """The devices the members are sharded over: ``num_devices`` of them (default: every
    device of every process), the same number from each process; ``ValueError`` naming the
    population, the seeds and the device count when the members do not divide over them."""
    have, processes = jax.device_count(), jax.process_count()
    wanted = have if num_devices is None else num_devices
    if isinstance(wanted, bool) or not isinstance(wanted, (int, np.integer)) or \
            not 1 <= wanted <= have:
        raise ValueError(f"num_devices must be an integer in [1, {have}] (the devices of "
                         f"{'all processes' if processes > 1 else 'this process'}), "
                         f"got {num_devices!r}")
    runs = population * seeds
    if runs % wanted or wanted % processes:
        allowed = [d for d in range(1, have + 1) if runs % d == 0 and d % processes == 0]
        where = f" of {processes} processes" if processes > 1 else ""
        each = ", each process as many" if processes > 1 else ""
        raise ValueError(
            f"num_devices={wanted}: population {population} x seeds {seeds} = {runs} members "
            f"do not divide over {wanted} devices{where} (each device trains an equal "
            f"share{each}); num_devices allowed here: {', '.join(map(str, allowed)) or 'none'}"
            ", or change population or seeds")
    per = wanted // processes
    by_process: dict[int, list] = {}
    for d in sorted(jax.devices(), key=lambda d: (d.process_index, d.id)):
        by_process.setdefault(d.process_index, []).append(d)
    return tuple(d for p in sorted(by_process) for d in by_process[p][:per])


def _mesh(devices: tuple) -> Mesh:
    return Mesh(np.array(devices), (AXIS,))


def _spmd(fn: Any, devices: tuple, in_specs: Any, out_specs: Any) -> Any:
    """``fn`` itself on one device, else ``shard_map``-ed over ``devices``."""
    if len(devices) == 1:
        return fn
    return jax.shard_map(fn, mesh=_mesh(devices), in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


def is_key(x: Any) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def to_devices(tree: Any, devices: tuple) -> Any:
    """Host arrays ``[R, ...]`` (every process holds them whole) as global arrays sharded over
    ``devices`` along the members; key leaves arrive as key data and go back to keys."""
    sharding = (NamedSharding(_mesh(devices), P(AXIS)) if jax.process_count() > 1 or
                len(devices) > 1 else jax.sharding.SingleDeviceSharding(devices[0]))

    def put(x: Any) -> Any:
        if is_key(x):
            impl = jax.random.key_impl(x)
            return jax.random.wrap_key_data(put(np.asarray(jax.random.key_data(x))), impl=impl)
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(put, tree)


def to_host(tree: Any) -> Any:
    """``tree`` as NumPy arrays on every process (keys as key data): the leaves sharded over
    processes gathered in one program (an all-gather each), the rest read where they are."""
    leaves, treedef = jax.tree.flatten(jax.tree.map(
        lambda x: jax.random.key_data(x) if isinstance(x, jax.Array) and is_key(x) else x,
        tree))
    spread = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array) and
              not x.is_fully_addressable and not x.is_fully_replicated]
    if spread:
        mesh = leaves[spread[0]].sharding.mesh
        gathered = _replicate(mesh)([leaves[i] for i in spread])
        for i, x in zip(spread, gathered):
            leaves[i] = x
    return jax.tree.unflatten(treedef, [
        np.asarray(x.addressable_data(0)) if isinstance(x, jax.Array) and
        not x.is_fully_addressable else np.asarray(jax.device_get(x)) for x in leaves])


@functools.cache
def _replicate(mesh: Mesh) -> Any:
    """Every leaf whole on every device of ``mesh`` (jitted; one compile per tree shape)."""
    return jax.jit(lambda xs: xs, out_shardings=NamedSharding(mesh, P()))


def wait(tree: Any) -> Any:
    """``tree`` once it is computed, waited for in short sleeps (Ctrl-C is not held off)."""
    for leaf in jax.tree.leaves(tree):
        while not leaf.is_ready():
            time.sleep(0.02)
    return tree


def local_runs(x: jax.Array) -> int:
    """How many members (rows) of global array ``x`` one device holds."""
    return int(x.addressable_shards[0].data.shape[0])


# --------------------------------------------------------------------------- in the program
def scores_of(schedule: Schedule, metrics: dict) -> jax.Array:
    """``[R]`` score of each run from one segment's metrics ``[L, R]``."""
    if schedule.score == "eval":
        values = metrics["eval_return"]
        finite = jnp.isfinite(values)
        last = values.shape[0] - 1 - jnp.argmax(finite[::-1], axis=0)
        return jnp.where(finite.any(0), jnp.take_along_axis(values, last[None], 0)[0], jnp.nan)
    total = metrics["episode_return_sum"].sum(0)
    count = metrics["episodes"].sum(0)
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def exploit_step(schedule: Schedule, space: Space, key: jax.Array, k: jax.Array,
                 keep: jax.Array, halving: jax.Array, cfgs: Any, states: Any, scores: jax.Array,
                 axis: str | None = None) -> tuple[Any, Any, dict]:
    """After segment ``k``: every population's exploit step. ``cfgs``, ``states``, ``scores``
    hold this device's runs (all ``[R]`` when ``axis`` is None; inside ``shard_map`` over
    ``axis``, its consecutive share). ``keep``: the members kept (the population: nobody is
    replaced); ``halving`` (traced, so PBT and halving share one compile): survivors copied
    round robin and not perturbed, instead of PBT's truncation. The choice is made on the
    gathered scores of all runs, the same on every device; each device then takes its
    members' sources from the gathered learner states."""
    def gather(x):
        return x if axis is None else lax.all_gather(x, axis, tiled=True)

    n = schedule.population
    scores = gather(scores)
    total, mine = scores.shape[0], jax.tree.leaves(states.learner)[0].shape[0]
    start = 0 if axis is None else lax.axis_index(axis) * mine
    local = start + jnp.arange(mine, dtype=jnp.int32)  # my runs' global indices
    per_pop = scores.reshape(n, -1).T  # [S, N]
    s = per_pop.shape[0]
    keep = jnp.where(jnp.isnan(per_pop).all(1), n, keep)  # nothing to rank by: no exploit
    keys = jax.random.split(jax.random.fold_in(key, k), s + 1)
    top = schedule.replaced

    def select(key, scores, keep):
        order, ranks = exploit.rank(scores)
        choice = jax.random.randint(key, (n,), 0, top, dtype=jnp.int32)
        return jnp.where(halving, exploit.halving(scores, keep),
                         exploit.sources(order, ranks, n - keep, choice))

    source = jax.vmap(select)(keys[1:], per_pop, keep)
    flat = (source.T * s + jnp.arange(s, dtype=jnp.int32)).reshape(-1)  # [R]
    replaced = flat != jnp.arange(total, dtype=jnp.int32)

    def mine_of(x):  # my rows of a gathered [R, ...]
        return x if axis is None else lax.dynamic_slice_in_dim(x, start, mine)

    learner, moments = exploit.copy(gather((states.learner, states.obs_moments)),
                                    mine_of(flat))
    hypers = exploit.copy(gather({f: getattr(cfgs, f) for f in hyper_fields(cfgs)}), flat)
    hypers = exploit.explore(keys[0], space, hypers, replaced & jnp.logical_not(halving),
                             schedule.resample_prob, schedule.factor)
    cfgs = jax.tree.unflatten(jax.tree.structure(cfgs),
                              [mine_of(hypers[f]) for f in hyper_fields(cfgs)])
    mine_replaced = mine_of(replaced)
    data = jax.random.key_data(states.key)
    renewed = jax.random.key_data(jax.vmap(jax.random.fold_in)(
        states.key, (k + 1) * total + local))
    new_keys = jax.random.wrap_key_data(
        jnp.where(mine_replaced.reshape(-1, *([1] * (data.ndim - 1))), renewed, data),
        impl=jax.random.key_impl(states.key))
    env = states.env
    if moments != ():  # normalize_obs: a copy acts with its source's statistics from now on
        acting = jax.vmap(with_moments)(env, moments, cfgs.obs_clip)
        env = jax.tree.map(lambda a, b: jnp.where(
            mine_replaced.reshape(-1, *([1] * (a.ndim - 1))), a, b), acting, env)
    states = states._replace(learner=learner, obs_moments=moments, key=new_keys, env=env)
    record = {"source": source, "score": per_pop,
              **{f: hypers[f].reshape(n, -1).T for f in space.names}}
    return cfgs, states, record


def _strong(tree: Any) -> Any:
    """Committed, strongly typed leaves (a checkpoint keeps no weak types: one compile serves
    a fresh and a restored carry)."""
    return jax.tree.map(lambda x: x if is_key(x) else jnp.asarray(x, x.dtype), tree)


@functools.cache
def init_program(options: tuple, devices: tuple | None = None) -> Any:
    """``init(cfgs, seeds)`` jitted: the run states of the stacked configs and seeds ``[R]``,
    each device initialising its own members (one device when ``devices`` is None)."""
    fn = _spmd(lambda c, s: _strong(init_runs(c, s)), devices or (None,), P(AXIS), P(AXIS))
    return jax.jit(fn, compiler_options=dict(options) or None)


def updates(cfgs: Any, states: Any, first: Any, n: int, kw: dict) -> tuple[Any, dict]:
    """``n`` updates of every run from update ``first + 1`` (``sweep.step_runs``)."""
    if n == 0:  # no loop to compile
        shapes = jax.eval_shape(lambda s: step_runs(cfgs, s, first, **kw)[1], states)
        return states, jax.tree.map(lambda x: jnp.zeros((0, *x.shape), x.dtype), shapes)
    return lax.scan(lambda st, i: step_runs(cfgs, st, i, **kw), states,
                    first + jnp.arange(n, dtype=jnp.int32))


@functools.cache
def segments_program(static: Schedule, space: Space, num_updates: int, log_every: int,
                     progress: bool, options: tuple, devices: tuple) -> Any:
    """``segments(carry, seed, ks, keeps, halving)``, jitted: a scan of whole segments, each
    ending with its exploit step, the members sharded over ``devices``. Cached by
    ``Schedule.static``: PBT and halving runs whose segments are as long share one compile."""
    axis = AXIS if len(devices) > 1 else None
    kw = dict(num_devices=len(devices), num_updates=num_updates, log_every=log_every,
              progress=progress)

    def segments(carry, seed, ks, keeps, halving):
        key = jax.random.key(seed)

        def one(carry, xs):
            cfgs, states = carry
            k, keep = xs
            states, metrics = updates(cfgs, states, k * static.segment, static.segment, kw)
            cfgs, states, record = exploit_step(static, space, key, k, keep, halving, cfgs,
                                                states, scores_of(static, metrics), axis)
            return (cfgs, states), (metrics, record)

        return lax.scan(one, carry, (ks, keeps))

    fn = _spmd(segments, devices, (P(AXIS), P(), P(), P(), P()),
               (P(AXIS), (P(None, None, AXIS), P())))
    return jax.jit(fn, compiler_options=dict(options) or None)


@functools.cache
def finish_program(rest: int, num_updates: int, log_every: int, progress: bool,
                   options: tuple, devices: tuple) -> Any:
    """``finish(carry)``, jitted: the last ``rest`` updates (no exploit), the final params."""
    kw = dict(num_devices=len(devices), num_updates=num_updates, log_every=log_every,
              progress=progress)

    def finish(carry):
        cfgs, states = carry
        states, metrics = updates(cfgs, states, num_updates - rest, rest, kw)
        return final_params(cfgs, states), metrics

    fn = _spmd(finish, devices, (P(AXIS),), (P(AXIS), P(None, AXIS)))
    return jax.jit(fn, compiler_options=dict(options) or None)
