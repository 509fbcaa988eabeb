"""The async runner (Podracer's "Sebulba", with the envs on device): actor devices collect
rollouts while learner devices update on the previous ones.

This module is the one place devices are split into roles and the one place with threads:

- **Devices.** The first ``actor_devices`` local devices run the jitted rollout, the next
  ``learner_devices`` run the update data-parallel (``shard_map`` with ``lax.pmean``), every
  trajectory sharded along its env axis. With a single device both roles share it.
- **Streams.** Each actor device runs ``actors_per_device`` streams, each on its own thread
  with its own slice of the envs (global env ids, so every random key is the one the sync runner
  draws). A learner update consumes one trajectory from each of ``num_streams`` tickets.
- **Tickets.** Every trajectory has a ticket: rollout k of stream s is ticket
  ``k * streams + s``, in both modes, so each stream is a FIFO of its own envs' rollouts in
  time order. An update takes the next batch of every stream, in stream order, so env b's data
  always lands at position b of the update's trajectory (and in replay row b), whatever the
  thread timing. Deterministic mode also fixes the params version of every rollout in advance
  (``acting_version``): a lock-step schedule that reproduces a run exactly, and with lag 0 the
  sync runner. Free-running mode lets each stream run ahead by its share of ``queue_size``
  (``Pipeline.reserve``); actors act with the newest params, and a batch staler than
  ``max_staleness`` is dropped (its stream's envs then have a time gap, which replay's n-step
  windows do not cross: ``Trajectory.step``) or, with ``stale_policy="correct"``, never
  collected (the actor waits).
- **Params.** After every ``sync_every`` updates the learner queues copies of the new params to
  each actor device and publishes them with their version (= updates done) as soon as the
  update is dispatched; every trajectory carries the version that produced it
  (``Trajectory.policy_version``). Rollouts are handed over as soon as they are dispatched too:
  each thread waits for its inputs with ``block_until_ready`` in its own thread (never inside
  XLA), so a wait ends when the data exists, not when the other thread gets around to it.
- **Host side.** Device-to-device copies only (a trajectory is split per learner device inside
  the rollout program, so no resharding op has to queue behind the next rollout on the actor
  device); metrics leave the learner as device arrays and are fetched, every ``log_every``
  updates, by the calling thread, which also runs the callbacks and hands them the run state
  (the learner's, and the env carries the actors copied at the chunk's end).
- **Processes.** In a multi-process run (``jra.distributed``) each process runs its own actors
  on its share of the envs; the learner's mesh spans every process's learner devices.
- **Shutdown.** Any exception in any thread stops the pipeline; every thread is joined and the
  exception re-raised in the caller with its traceback; Ctrl-C finishes the chunk in flight,
  hands its state to ``on_state(final=True)`` and raises ``TrainingInterrupted``.

One thread per stream (and one for the learner) was measured against one thread dispatching
both programs in the same lag-1 schedule (``experiments/bench_async.py``): within the noise of
each other on the 2-core CPU since the hand-over at dispatch (before it, threads were 23%
slower on an idle machine). Threads are kept: free-running actors, several streams and host
envs need them anyway.
"""

from __future__ import annotations

import functools
import itertools
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from jaxrl_async.algos import Algorithm
from jaxrl_async.envs import merge_moments, obs_sums
from jaxrl_async.envs.host import is_host_env
from jaxrl_async.rollout import EnvCarry
from jaxrl_async.runners.common import (
    AXIS,
    Callbacks,
    RunState,
    StopOnInterrupt,
    TrainingInterrupted,
    TrainResult,
    build,
    collect,
    compiler_options,
    init_state,
    learn_update,
    learner_spec,
    spmd,
    with_moments,
)

THREAD_PREFIX = "jaxrl-async"
"""Every thread the runner starts is named ``jaxrl-async-<role>``."""


# --------------------------------------------------------------------------- devices, schedule
def split_devices(cfg: Any, devices: Sequence[Any]) -> tuple[list, list]:
    """(actor devices, learner devices): the first ``actor_devices``, then the next
    ``learner_devices``; a single device plays both roles. ``ValueError`` naming the field when
    there are not enough devices."""
    runner, have = cfg.runner, len(devices)
    if have == 1 and runner.actor_devices == runner.learner_devices == 1:
        return [devices[0]], [devices[0]]
    if runner.actor_devices + runner.learner_devices > have:
        field = "learner_devices" if runner.actor_devices < have else "actor_devices"
        raise ValueError(
            f"{type(cfg).__name__}.runner.{field} must leave actor_devices + learner_devices "
            f"<= the {have} local device(s), got actor_devices={runner.actor_devices}, "
            f"learner_devices={runner.learner_devices} (on a CPU, set XLA_FLAGS="
            "--xla_force_host_platform_device_count=N before importing jax)"
        )
    num_actors = runner.actor_devices
    return list(devices[:num_actors]), list(devices[num_actors:num_actors + runner.learner_devices])


def acting_version(runner: Any, update: int) -> int:
    """Deterministic mode: the params version (updates done) that acts in rollout ``update``:
    ``lag`` updates back, and only versions the learner publishes (every ``sync_every``).
    A function of ``update`` alone, so a resumed run keeps the schedule of the whole run."""
    return max(update - runner.lag, 0) // runner.sync_every * runner.sync_every


def publishes(runner: Any, version: int) -> bool:
    """Whether the learner sends the params of ``version`` to the actor devices."""
    return version % runner.sync_every == 0


# --------------------------------------------------------------------------- programs
class Stream(NamedTuple):
    """One actor stream: a thread stepping the envs ``env_id`` on ``device``."""

    index: int
    device: Any
    device_index: int
    env_id: jax.Array  # [num_envs / num_streams] global env ids, on ``device``


class Packing(NamedTuple):
    """A pytree of arrays as one flat ``uint32`` vector, so it crosses devices in one copy
    instead of one per leaf (host overhead is what limits overlap on a CPU). Exact: 32-bit
    leaves are bit-cast; narrower ones are widened to 32 bits first."""

    treedef: Any
    leaves: tuple[jax.ShapeDtypeStruct, ...]

    @classmethod
    def of(cls, tree: Any) -> Packing:
        leaves, treedef = jax.tree.flatten(tree)
        for x in leaves:
            if np.dtype(x.dtype).itemsize > 4:
                raise TypeError(f"Packing handles dtypes of at most 32 bits, got {x.dtype}")
        return cls(treedef, tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves))

    @property
    def size(self) -> int:
        return sum(int(np.prod(x.shape)) for x in self.leaves)

    def pack(self, tree: Any) -> jax.Array:
        return jnp.concatenate([lax.bitcast_convert_type(_wide(x), jnp.uint32).ravel()
                                for x in jax.tree.leaves(tree)])

    def unpack(self, flat: jax.Array) -> Any:
        chex.assert_shape(flat, (self.size,))
        leaves, offset = [], 0
        for x in self.leaves:
            n = int(np.prod(x.shape))
            wide = lax.bitcast_convert_type(flat[offset:offset + n], _wide_dtype(x.dtype))
            leaves.append(wide.reshape(x.shape).astype(x.dtype))
            offset += n
        return jax.tree.unflatten(self.treedef, leaves)


def _wide_dtype(dtype: Any) -> Any:
    if np.dtype(dtype).itemsize == 4:
        return dtype
    return jnp.float32 if jnp.issubdtype(dtype, jnp.floating) else jnp.int32


def _wide(x: jax.Array) -> jax.Array:
    return x.astype(_wide_dtype(x.dtype))


class Programs(NamedTuple):
    """The compiled programs, exchanging packed vectors (see ``Packing``):

    - ``actor[d](params, carry, run_key, update, env_id, version) -> (carry, pieces)`` on actor
      device ``d`` (the carry is donated); ``pieces``: one packed ``(trajectory slice, episode
      sums)`` per learner device, the slice being that device's share of the stream's envs;
    - ``learner(state, batches) -> (state, metrics, params)``: one update over the learner
      devices from one batch (all its pieces) per stream; ``metrics`` a vector (``metric_names``),
      ``params`` the new policy params, packed;
    - ``pack_params(state) -> params``: the packed policy params of a learner state;
    - ``init(key) -> RunState``: a fresh run (as ``common.init_state``, all envs).
    """

    actor: list[Callable]
    learner: Callable
    pack_params: Callable
    init: Callable
    metric_names: tuple[str, ...]
    algo: Algorithm


class Layout(NamedTuple):
    """Where everything lives. In a multi-process run (``jra.distributed``) every process has
    its own actors and streams, stepping its share of the envs, and the learner spans every
    process's learner devices (``all_learner_devices``, in process order)."""

    actor_devices: list
    learner_devices: list  # this process's
    all_learner_devices: list  # every process's: the learner's mesh
    streams: list[Stream]
    per_stream: int  # envs per stream
    env_offset: int  # global id of this process's first env
    batch_sharding: Any  # a packed batch: one piece per learner device
    replicated: Any  # learner state, metrics, params: a copy on every learner device


def layout(cfg: Any, devices: Sequence[Any]) -> Layout:
    actor_devices, learner_devices = split_devices(cfg, devices)
    all_learners, process, processes = learner_devices, 0, 1
    if jax.process_count() > 1:
        by_process: dict[int, list] = {}
        for d in jax.devices():
            by_process.setdefault(d.process_index, []).append(d)
        all_learners = [d for p in sorted(by_process)
                        for d in split_devices(cfg, sorted(by_process[p], key=lambda d: d.id))[1]]
        process, processes = jax.process_index(), jax.process_count()
    streams_per_process = cfg.runner.num_streams
    if cfg.num_envs % (processes * streams_per_process * len(learner_devices)):
        raise ValueError(
            f"{type(cfg).__name__}.num_envs must be divisible by processes * actor_devices * "
            f"actors_per_device * learner_devices = "
            f"{processes * streams_per_process * len(learner_devices)}, got {cfg.num_envs}")
    per_stream = cfg.num_envs // (processes * streams_per_process)
    offset = process * streams_per_process * per_stream
    streams = []
    for s in range(streams_per_process):
        d = s // cfg.runner.actors_per_device
        first = offset + s * per_stream
        ids = jnp.arange(first, first + per_stream, dtype=jnp.int32)
        streams.append(Stream(s, actor_devices[d], d, jax.device_put(ids, actor_devices[d])))
    if len(all_learners) == 1:
        single = SingleDeviceSharding(all_learners[0])
        return Layout(actor_devices, learner_devices, all_learners, streams, per_stream, offset,
                      single, single)
    mesh = Mesh(np.array(all_learners), (AXIS,))
    return Layout(actor_devices, learner_devices, all_learners, streams, per_stream, offset,
                  NamedSharding(mesh, P(AXIS)), NamedSharding(mesh, P()))


def to_learner(pieces: Sequence[jax.Array], where: Layout) -> jax.Array:
    """A stream's packed pieces (one per learner device, on its actor device) -> one batch
    array over the learner devices. Device-to-device copies only: no op that would queue
    behind the next rollout on the actor device."""
    placed = jax.device_put(list(pieces), list(where.learner_devices))
    if len(where.all_learner_devices) == 1:
        return placed[0]
    size = placed[0].shape[0] * len(where.all_learner_devices)
    return jax.make_array_from_single_device_arrays((size,), where.batch_sharding, placed)


def split_for_learners(traj: Any, sums: Any, num_learners: int) -> list[tuple]:
    """A stream's rollout as one ``(trajectory slice, episode sums)`` per learner device of
    this process: the envs in equal slices; the stream's sums with the first piece and zeros
    with the others (the learner sums them over devices). Arrays of jax or numpy (host actors)."""
    width = traj.reward.shape[1] // num_learners
    nothing = jax.tree.map(lambda x: x * 0, sums)
    return [(jax.tree.map(lambda x, i=i: x[:, i * width:(i + 1) * width], traj),
             sums if i == 0 else nothing) for i in range(num_learners)]


def compile_programs(cfg: Any, env: Any, algo: Algorithm, where: Layout) -> Programs:
    """Compile the init, the rollout for every actor device and the update for the learner
    devices, from shapes alone."""
    num_learners = len(where.learner_devices)  # this process's: a stream's pieces
    per_stream = where.per_stream
    all_ids = jnp.arange(cfg.num_envs, dtype=jnp.int32)

    def init(key: jax.Array) -> RunState:
        return init_state(env, algo, key, all_ids)

    run_state = jax.eval_shape(init, jax.random.key(0))
    params_packing = Packing.of(acting_params(algo, run_state))

    def rollout(params, carry, run_key, update, env_id, version):
        policy, moments = params_packing.unpack(params)
        carry, traj, sums = collect(env, algo, policy, with_moments(carry, moments), run_key,
                                    update, cfg.num_steps, env_id, version)
        if cfg.normalize_obs:  # the stream's raw-observation sums travel with its episode sums
            sums = (sums, obs_sums(carry.env_state))
        return carry, split_for_learners(traj, sums, num_learners)

    def actor_args(device: Any) -> tuple:
        carry = jax.tree.map(lambda x: jax.ShapeDtypeStruct((per_stream, *x.shape[1:]), x.dtype),
                             run_state.env)
        scalar = jax.ShapeDtypeStruct((), jnp.int32)
        args = (jax.ShapeDtypeStruct((params_packing.size,), jnp.uint32), carry, run_state.key,
                scalar, jax.ShapeDtypeStruct((per_stream,), jnp.int32), scalar)
        return _on(args, SingleDeviceSharding(device))

    piece_packing = Packing.of(jax.eval_shape(rollout, *actor_args(where.actor_devices[0]))[1][0])

    def actor(*args):
        carry, pieces = rollout(*args)
        return carry, tuple(piece_packing.pack(piece) for piece in pieces)

    actors = [jax.jit(actor, donate_argnums=1).lower(*actor_args(d)) for d in where.actor_devices]
    return compile_with_learner(cfg, algo, where, init, piece_packing, actors)


def compile_with_learner(cfg: Any, algo: Algorithm, where: Layout, init: Callable,
                         piece_packing: Packing, actors: list) -> Programs:
    """Compile the update for the learner devices (one packed piece per stream and learner
    device, laid out by ``piece_packing``), ``pack_params``, ``init`` and the lowered actor
    programs ``actors`` (kept, compiled, in ``Programs.actor``), from shapes alone."""
    axis = AXIS if len(where.all_learner_devices) > 1 else None
    run_state = jax.eval_shape(init, jax.random.key(0))
    spec = learner_state_spec(algo)
    learner_state = _placed(spec, run_state._replace(env=()), where, _on)
    params_packing = Packing.of(acting_params(algo, run_state))

    def update(state: RunState, batches: tuple[jax.Array, ...]):
        pieces = [piece_packing.unpack(batch) for batch in batches]  # this device's share
        traj = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *[t for t, _ in pieces])
        sums = jax.tree.map(lambda *xs: sum(xs), *[s for _, s in pieces])
        if axis:
            sums = lax.psum(sums, axis)
        if cfg.normalize_obs:  # every stream's and device's observations, merged once
            sums, observed = sums
            state = state._replace(obs_moments=merge_moments(state.obs_moments, observed))
        staleness = (state.update - traj.policy_version).astype(jnp.float32)
        state, metrics = learn_update(algo, state, traj, sums, cfg.steps_per_update, axis)
        mean, most = staleness.mean(), staleness.max()
        if axis:
            mean, most = lax.pmean(mean, axis), lax.pmax(most, axis)
        metrics = {**metrics, "staleness": mean, "staleness_max": most}
        return state, metrics, params_packing.pack(acting_params(algo, state))

    batch = jax.ShapeDtypeStruct((piece_packing.size * len(where.all_learner_devices),),
                                 jnp.uint32, sharding=where.batch_sharding)
    batches = (batch,) * len(where.streams)
    on_learners = functools.partial(spmd, devices=where.all_learner_devices,
                                    in_specs=(spec, P(AXIS)), out_specs=(spec, P(), P()))
    names = tuple(sorted(jax.eval_shape(on_learners(update), learner_state, batches)[1]))

    def learner(state: RunState, batches: tuple[jax.Array, ...]):
        state, metrics, params = update(state, batches)
        return state, jnp.stack([metrics[k].astype(jnp.float32) for k in names]), params

    def pack_params(state: RunState) -> jax.Array:
        return params_packing.pack(acting_params(algo, state))

    options = compiler_options(cfg)
    lowered = list(actors)
    lowered.append(jax.jit(on_learners(learner)).lower(learner_state, batches))
    lowered.append(jax.jit(pack_params).lower(learner_state))
    lowered.append(jax.jit(init).lower(jax.random.key(0)))
    # One after the other: compiling them in parallel threads was measured 2x slower on 2 cores.
    compiled = [program.compile(options) for program in lowered]
    *actor_fns, learner_fn, pack_fn, init_fn = compiled
    return Programs(actor_fns, learner_fn, pack_fn, init_fn, names, algo)


def _on(tree: Any, sharding: Any) -> Any:
    """Shapes of ``tree`` placed with ``sharding``."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def learner_state_spec(algo: Algorithm) -> RunState:
    """How the learner's part of the run state lies over the learner devices: replicated, but
    for the algorithm's ``PerEnv`` parts (replay buffers), split along the env axis like the
    trajectories. With several streams and learner devices, learner device ``i`` holds share
    ``i`` of every stream's envs, in stream order (the sync runner: a contiguous range)."""
    return RunState(learner=learner_spec(algo, P(AXIS), P()), env=(), key=P(), update=P(),
                    last_episode=P(), obs_moments=P())


def acting_params(algo: Algorithm, state: RunState) -> tuple[Any, Any]:
    """What the learner publishes to the actors (packed): the policy params and the run's
    observation statistics (``()`` unless normalize_obs), which actors set into their env
    states before a rollout (``common.with_moments``)."""
    return algo.policy_params(state.learner), state.obs_moments


def put_global(tree: Any, sharding: Any) -> Any:
    """``jax.device_put(tree, sharding)``, also when ``sharding`` spans devices of other
    processes (a multi-process run, where every process holds the same ``tree``)."""
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)

    def put(x: Any) -> jax.Array:
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(put(jax.random.key_data(x)),
                                            impl=jax.random.key_impl(x))
        host = np.asarray(jax.device_get(x))
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree)


def local_copy(x: jax.Array) -> jax.Array:
    """This process's copy of a replicated array (itself, in a single-process run)."""
    return x if x.is_fully_addressable else x.addressable_data(0)


def _placed(spec: RunState, tree: Any, where: Layout, put: Callable) -> Any:
    """``put(subtree, sharding)`` for every subtree of ``tree`` under a spec of ``spec``."""
    sharding = {P(): where.replicated, P(AXIS): where.batch_sharding}
    return jax.tree.map(lambda s, sub: put(sub, sharding[s]), spec, tree,
                        is_leaf=lambda x: isinstance(x, P))


# --------------------------------------------------------------------------- the pipeline
class Stopped(Exception):
    """The pipeline is shutting down: a thread leaves quietly."""


class Batch(NamedTuple):
    """One stream's rollout, already on the learner devices."""

    data: jax.Array  # packed (trajectory, episode sums), one piece per learner device
    version: int  # the params version that acted


class Pipeline:
    """What actor threads and the learner thread share, behind one condition variable: the
    published params (per actor device, by version), the tickets, the collected batches."""

    KEEP_VERSIONS = 2  # deterministic mode needs the newest two (see ``acting_version``)

    def __init__(self, num_actor_devices: int, queue_size: int, num_streams: int):
        self._cond = threading.Condition()
        self._stopped = False
        self._params: list[dict[int, Any]] = [{} for _ in range(num_actor_devices)]
        self._ready: dict[int, Batch] = {}
        self._streams = num_streams
        # free-running: stream s may hold this many tickets not yet taken (queue_size in all,
        # at least one each: a stream the learner waits for can always collect)
        self._quota = [max(1, queue_size // num_streams + (s < queue_size % num_streams))
                       for s in range(num_streams)]
        self._reserved = [0] * num_streams  # free-running: tickets handed out, per stream
        self._taken = [0] * num_streams  # tickets the learner took, per stream
        self.max_outstanding = 0  # free-running: most tickets handed out and not yet taken

    def _wait(self, ready: Callable[[], bool]) -> None:
        while not ready():
            if self._stopped:
                raise Stopped
            self._cond.wait(0.5)  # woken by notify_all; the timeout is only a safety net
        if self._stopped:
            raise Stopped

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._params = [{} for _ in self._params]
            self._ready.clear()
            self._cond.notify_all()

    def publish(self, version: int, params_per_device: Sequence[Any]) -> None:
        with self._cond:
            for store, params in zip(self._params, params_per_device):
                store[version] = params
                for old in sorted(store)[: -self.KEEP_VERSIONS]:
                    del store[old]
            self._cond.notify_all()

    def params(self, device_index: int, version: int) -> Any:
        """Exactly the params of ``version`` (deterministic mode); waits for them."""
        store = self._params[device_index]
        with self._cond:
            self._wait(lambda: version in store or max(store, default=-1) > version)
            if version not in store:
                raise RuntimeError(f"params version {version} was dropped before use")
            return store[version]

    def newest_params(self, device_index: int, at_least: int) -> tuple[int, Any]:
        """(version, params) of the newest params, waiting for ``version >= at_least``."""
        store = self._params[device_index]
        with self._cond:
            self._wait(lambda: max(store, default=-1) >= at_least)
            version = max(store)
            return version, store[version]

    def reserve(self, stream: int) -> int:
        """Free-running: the ticket of ``stream``'s next rollout, once fewer than its share of
        ``queue_size`` are outstanding."""
        with self._cond:
            self._wait(lambda: self._reserved[stream] - self._taken[stream] < self._quota[stream])
            ticket = self._reserved[stream] * self._streams + stream
            self._reserved[stream] += 1
            self.max_outstanding = max(self.max_outstanding,
                                       sum(self._reserved) - sum(self._taken))
            return ticket

    def deliver(self, ticket: int, batch: Batch) -> None:
        with self._cond:
            if self._stopped:
                raise Stopped
            self._ready[ticket] = batch
            self._cond.notify_all()

    def keep_snapshot(self, store: dict, done: int, carry: Any, exact: bool) -> None:
        """Keep a stream's env carry after ``done`` rollouts (free-running: only the newest)."""
        with self._cond:
            if not exact:
                store.clear()
            store[done] = carry

    def snapshot(self, store: dict, done: int, exact: bool) -> Any:
        """The carry kept after ``done`` rollouts (free-running: the newest kept)."""
        with self._cond:
            return store.pop(done) if exact else store[max(store)]

    def take(self, ticket: int) -> tuple[Batch, int]:
        """The batch of ``ticket`` (waits for it) and how many others are waiting."""
        with self._cond:
            self._wait(lambda: ticket in self._ready)
            self._taken[ticket % self._streams] += 1
            self._cond.notify_all()
            return self._ready.pop(ticket), len(self._ready)


class RoleStats:
    """Counters a thread writes and others read (floats and ints only)."""

    def __init__(self) -> None:
        self.rollouts = 0
        self.busy_s = 0.0


def schedule(cfg: Any, stream: Stream, first: int,
             pipeline: Pipeline) -> Iterator[tuple[int, int, int, Any]]:
    """(update, ticket, params version, params) of each rollout of ``stream``, in order, until
    the schedule ends (deterministic) or the pipeline stops (free-running). Its n-th rollout
    draws the keys of update ``first + n``."""
    runner, num_streams = cfg.runner, cfg.runner.num_streams
    for n in range(cfg.num_updates - first) if runner.deterministic else itertools.count():
        update = first + n
        if runner.deterministic:
            ticket = n * num_streams + stream.index
            version = acting_version(runner, update)
            params = pipeline.params(stream.device_index, version)
        else:
            ticket = pipeline.reserve(stream.index)
            at_least = -1
            if runner.stale_policy == "correct":  # no drops: rollout t // S of the stream is
                # learned in update first + t // S
                at_least = first + ticket // num_streams - runner.max_staleness
            version, params = pipeline.newest_params(stream.device_index, at_least)
        yield update, ticket, version, params


def actor_loop(cfg: Any, stream: Stream, program: Callable, carry: EnvCarry, run_key: jax.Array,
               first: int, where: Layout, pipeline: Pipeline, stats: RoleStats,
               carries: list, snapshots: list[dict]) -> None:
    """One actor stream: rollouts until the schedule ends (deterministic) or the pipeline stops
    (free-running). Its n-th rollout draws the keys of update ``first + n``. After a rollout
    that ends a log chunk it keeps a copy of its env carry in ``snapshots[stream]``, keyed by
    the rollouts done (the env part of the run state handed to ``on_state``)."""
    for update, ticket, version, params in schedule(cfg, stream, first, pipeline):
        jax.block_until_ready(params)  # published as soon as dispatched: wait here, not in XLA
        start = time.perf_counter()
        carry, pieces = program(params, carry, run_key, np.int32(update), stream.env_id,
                                np.int32(version))
        carries[stream.index] = carry
        if chunk_ends(cfg, first, update + 1):  # kept before the learner can end the chunk
            pipeline.keep_snapshot(snapshots[stream.index], update + 1,
                                   jax.tree.map(jnp.copy, carry), cfg.runner.deterministic)
        # Handed over (and its copy to the learner devices queued) before it is computed: the
        # learner waits for the data in XLA's runtime, not for this thread to wake up.
        pipeline.deliver(ticket, Batch(to_learner(pieces, where), version))
        jax.block_until_ready((carry, pieces))
        stats.busy_s += time.perf_counter() - start
        stats.rollouts += 1


def chunk_ends(cfg: Any, first: int, done: int) -> bool:
    """Whether a log chunk ends after ``done`` updates (chunks of ``log_every`` from ``first``,
    as in the sync runner)."""
    return (done - first) % cfg.log_every == 0 or done == cfg.num_updates


class Chunk(NamedTuple):
    """Metrics of updates ``first + 1 ... first + n`` as they leave the learner thread, with
    the learner's state after them."""

    first: int
    device_rows: list[jax.Array]  # per update: the learner's metric vector
    host_rows: dict[str, list]  # per update: host-measured values
    start: float  # when the chunk began (perf_counter)
    busy: tuple[float, list[float]]  # learner and actor busy seconds when it began
    state: RunState | None = None  # env=(): the learner's part of the run state
    behaviour: Any = ()  # deterministic mode: the packed params acting next (``acting_version``)


def learner_loop(cfg: Any, programs: Programs, state: RunState, first: int, where: Layout,
                 pipeline: Pipeline, actor_stats: list[RoleStats], stats: RoleStats,
                 events: queue.Queue, versions: dict[int, jax.Array]) -> None:
    """Updates ``first ... num_updates - 1``, taking tickets in order; publishes params every
    ``sync_every`` updates; sends a ``Chunk`` of metrics every ``log_every`` updates.
    ``versions``: the packed params by version, from those published at the start."""
    runner, num_streams = cfg.runner, cfg.runner.num_streams
    taken, dropped = [0] * num_streams, 0  # rollouts taken, per stream

    def new_chunk(first_update: int) -> Chunk:
        busy = (stats.busy_s, [s.busy_s for s in actor_stats])
        return Chunk(first_update, [], {"dropped_batches": [], "queue_depth": []},
                     time.perf_counter(), busy)

    chunk = new_chunk(first)
    for update in range(first, cfg.num_updates):
        batches, depth = [], 0
        for s in range(num_streams):  # the next fresh enough batch of every stream, in order
            while len(batches) == s:
                batch, depth = pipeline.take(taken[s] * num_streams + s)
                taken[s] += 1
                if update - batch.version > runner.max_staleness:  # only when free-running
                    dropped += 1
                else:
                    batches.append(batch)
        data = jax.block_until_ready(tuple(b.data for b in batches))  # busy time: computing only
        del batches
        start = time.perf_counter()
        state, metrics, params = programs.learner(state, data)
        del data
        if update + 1 < cfg.num_updates and publishes(runner, update + 1):
            publish(params, where, pipeline, update + 1)  # before it is computed (see actor_loop)
        jax.block_until_ready((state, params))
        stats.busy_s += time.perf_counter() - start
        versions[update + 1] = params
        oldest = acting_version(runner, update + 1) if runner.deterministic else update + 1
        for old in [v for v in versions if v < oldest]:
            del versions[old]
        chunk.device_rows.append(local_copy(metrics))
        chunk.host_rows["dropped_batches"].append(dropped)
        chunk.host_rows["queue_depth"].append(depth)
        if chunk_ends(cfg, first, update + 1):
            wall, (learner_busy, actor_busy) = time.perf_counter() - chunk.start, chunk.busy
            n = len(chunk.device_rows)
            chunk.host_rows["learner_busy"] = [(stats.busy_s - learner_busy) / wall] * n
            actor_busy = np.mean([s.busy_s - b for s, b in zip(actor_stats, actor_busy)])
            chunk.host_rows["actor_busy"] = [float(actor_busy) / wall] * n
            behaviour = versions[oldest] if runner.deterministic else ()
            events.put(("chunk", chunk._replace(state=state, behaviour=behaviour)))
            chunk = new_chunk(update + 1)


def publish(params: jax.Array, where: Layout, pipeline: Pipeline, version: int) -> None:
    """Queue copies of the (packed) policy params to every actor device and publish them, not
    waiting for them to be computed: an actor blocks on them in its own thread before acting
    (never inside XLA), and wakes as soon as they are ready, not when this thread gets there."""
    copies = jax.device_put([local_copy(params)] * len(where.actor_devices),
                            list(where.actor_devices))
    pipeline.publish(version, copies)


class Setup(NamedTuple):
    """A run ready to start: programs compiled, state placed on its devices."""

    where: Layout
    programs: Programs
    first: int  # updates already done
    learner_state: RunState  # env=(); replicated on the learner devices
    carries: list[EnvCarry]  # per stream, on its actor device
    run_keys: list[jax.Array]  # the run key, per actor device
    behaviour: Any  # a restored run's packed acting params (``RunState.behaviour_params``)


def prepare(cfg: Any, key: jax.Array, state: RunState | None = None,
            devices: Sequence[Any] | None = None) -> Setup:
    """Split the devices, initialise (or take) the run state, place it and compile."""
    where = layout(cfg, jax.local_devices() if devices is None else devices)
    programs = compile_programs(cfg, *build(cfg), where)
    if state is None:
        state = programs.init(key)
    carries = []
    for s in where.streams:
        begin = where.env_offset + s.index * where.per_stream
        share = jax.tree.map(lambda x, b=begin: x[b:b + where.per_stream], state.env)
        carries.append(jax.device_put(share, s.device))
    learner_state = _placed(learner_state_spec(programs.algo), state._replace(
        env=(), behaviour_params=()), where, put_global)
    behaviour = put_global(state.behaviour_params, where.replicated)
    run_keys = [jax.device_put(state.key, d) for d in where.actor_devices]
    return Setup(where, programs, int(state.update), learner_state, carries, run_keys, behaviour)


def abstract_state(cfg: Any) -> RunState:
    """Shapes and dtypes of the run state (all envs) this runner hands to ``on_state`` and
    continues from: ``init_state``'s, plus the acting params in deterministic mode."""
    env, algo = build(cfg)
    env_id = jnp.arange(cfg.num_envs, dtype=jnp.int32)
    state = jax.eval_shape(lambda key: init_state(env, algo, key, env_id), jax.random.key(0))
    if not cfg.runner.deterministic:
        return state
    size = Packing.of(acting_params(algo, state)).size
    return state._replace(behaviour_params=jax.ShapeDtypeStruct((size,), jnp.uint32))


# --------------------------------------------------------------------------- the entry point
def run(
    cfg: Any,
    key: jax.Array,
    callbacks: Callbacks | None = None,
    state: RunState | None = None,
    devices: Sequence[Any] | None = None,
) -> TrainResult:
    """Train ``cfg`` (its ``runner`` an ``AsyncConfig``) from ``key`` or from ``state`` (a
    restored checkpoint: in deterministic mode the run continues exactly as if never stopped),
    on ``devices`` (default: the local devices). Returns what the sync runner returns; metrics
    also hold ``staleness``/``staleness_max`` (updates between acting and learning params),
    ``actor_busy``/``learner_busy`` (fraction of wall time each role computed, per log chunk),
    ``dropped_batches`` (so far) and ``queue_depth`` (batches waiting when the learner took its
    last); the last three are wall-clock measurements, not part of the run's outcome.
    ``callbacks.on_state`` gets the run state after every log chunk. Ctrl-C stops after the
    chunk in flight, with ``on_state(final=True)``, and raises ``TrainingInterrupted``. Host envs
    (``env="gymnasium:..."``/``"envpool:..."``) run in ``host_actors.run``."""
    if is_host_env(cfg.env):
        from jaxrl_async.runners import host_actors

        return host_actors.run(cfg, key, callbacks, state, devices)
    try:
        return _run(cfg, key, callbacks or Callbacks(), state, devices)
    except BaseException as error:
        # Nothing the run allocated may outlive it, not even through the exception: clear the
        # locals of the frames it passed through (all finished now; the threads' frames too).
        traceback.clear_frames(error.__traceback__)
        raise


def _run(cfg: Any, key: jax.Array, callbacks: Callbacks, state: RunState | None,
         devices: Sequence[Any] | None) -> TrainResult:
    if state is not None and int(state.update) >= cfg.num_updates:
        return TrainResult(state, {}, None)  # a finished run: nothing to compile
    start = time.perf_counter()
    setup = prepare(cfg, key, state, devices)
    compile_s = time.perf_counter() - start
    where, programs, first, carries = setup.where, setup.programs, setup.first, setup.carries
    snapshots: list[dict] = [{} for _ in where.streams]
    if not cfg.runner.deterministic:  # the newest carry of each stream, from the start
        for s in where.streams:
            snapshots[s.index][first] = jax.tree.map(jnp.copy, carries[s.index])

    def actors(pipeline: Pipeline, stats: list[RoleStats]) -> list[tuple[Callable, tuple]]:
        return [(actor_loop, (cfg, s, programs.actor[s.device_index], carries[s.index],
                              setup.run_keys[s.device_index], first, where, pipeline,
                              stats[s.index], carries, snapshots))
                for s in where.streams]

    def env_state(pipeline: Pipeline, done: int) -> Any:  # [num_envs, ...] on the host
        exact = cfg.runner.deterministic
        parts = jax.device_get([pipeline.snapshot(store, done, exact) for store in snapshots])
        return jax.tree.map(lambda *xs: np.concatenate(xs), *parts)

    try:
        return drive(cfg, setup, callbacks, compile_s, actors, env_state)
    finally:
        snapshots.clear()
        carries.clear()


def drive(cfg: Any, setup: Setup, callbacks: Callbacks, compile_s: float,
          actors: Callable[[Pipeline, list[RoleStats]], list[tuple[Callable, tuple]]],
          env_state: Callable[[Pipeline, int], Any]) -> TrainResult:
    """The pipeline of a prepared run, whatever its actors: publish the first params, start
    the actor threads (``actors(pipeline, stats)``: per stream, a thread's target and
    arguments) and the learner thread, hand metrics and the run state after every chunk (its
    env part from ``env_state(pipeline, updates done)``) to the callbacks, stop every thread,
    and return the result (or raise ``TrainingInterrupted`` after a Ctrl-C)."""
    where, programs, first, runner = setup.where, setup.programs, setup.first, cfg.runner
    pipeline = Pipeline(len(where.actor_devices), runner.queue_size, len(where.streams))
    events: queue.Queue = queue.Queue()
    actor_stats = [RoleStats() for _ in where.streams]
    learner_stats = RoleStats()
    # The params versions the actors may use first: the learner's, and the older acting ones
    # of a resumed deterministic run.
    versions = {first: programs.pack_params(setup.learner_state)}
    if runner.deterministic and acting_version(runner, first) < first:
        versions[acting_version(runner, first)] = setup.behaviour
    for version in sorted(versions):
        publish(versions[version], where, pipeline, version)
    threads = [_thread(f"actor-{s.index}", events, pipeline, target, *args)
               for s, (target, args) in zip(where.streams, actors(pipeline, actor_stats))]
    threads.append(_thread("learner", events, pipeline, learner_loop, cfg, programs,
                           setup.learner_state, first, where, pipeline, actor_stats,
                           learner_stats, events, versions))
    del setup, versions  # the threads own their buffers now

    rows: list[dict] = []
    try:
        callbacks.on_start(first)
        with StopOnInterrupt() as stop:
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            final = _supervise(cfg, threads, events, callbacks, programs.metric_names, rows,
                               functools.partial(env_state, pipeline), stop)
            train_s = time.perf_counter() - start
        collected = sum(s.rollouts for s in actor_stats) * where.per_stream * cfg.num_steps
    finally:
        _shut_down(pipeline, threads)

    done = int(final.update)
    metrics = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]} if rows else {}
    trained = (done - first) * cfg.steps_per_update
    timing = {  # sps: env steps trained on per second; sps_collected: all the actors stepped
        "compile_s": compile_s,
        "train_s": train_s,
        "sps": trained / max(train_s, 1e-9),
        "sps_collected": collected / max(train_s, 1e-9),
        "env_steps_collected": collected,
        "env_steps_trained": trained,
        "learner_busy": learner_stats.busy_s / max(train_s, 1e-9),
        "actor_busy": float(np.mean([s.busy_s for s in actor_stats])) / max(train_s, 1e-9),
        "max_outstanding": pipeline.max_outstanding,
    }
    result = TrainResult(final, metrics, timing)
    if done < cfg.num_updates:
        raise TrainingInterrupted(result)
    return result


def _thread(role: str, events: queue.Queue, pipeline: Pipeline, target: Callable,
            *args: Any) -> threading.Thread:
    """A thread running ``target(*args)``; an exception stops the pipeline and goes to the
    caller through ``events``."""
    return threading.Thread(target=_guarded, args=(events, pipeline, target, *args),
                            name=f"{THREAD_PREFIX}-{role}", daemon=True)


def _guarded(events: queue.Queue, pipeline: Pipeline, target: Callable, *args: Any) -> None:
    # Arguments, not a closure: a frame's locals can be cleared, a closure's cells cannot.
    try:
        target(*args)
    except Stopped:
        pass
    except BaseException as error:  # noqa: BLE001 - re-raised in the caller
        pipeline.stop()
        events.put(("error", error))


def _supervise(cfg: Any, threads: list[threading.Thread], events: queue.Queue,
               callbacks: Callbacks, names: tuple[str, ...], rows: list[dict],
               env_state: Callable[[int], Any], stop: StopOnInterrupt) -> RunState:
    """The calling thread's part: deliver metrics and the run state after each chunk to the
    callbacks, until the learner's last chunk or, after a Ctrl-C, the next chunk; re-raise the
    first exception of any thread. Waits with a timeout, so signals get through."""
    learner = threads[-1]
    while True:
        try:
            kind, payload = events.get(timeout=0.2)
        except queue.Empty:
            if not learner.is_alive() and events.empty():
                raise RuntimeError("the learner thread ended without a result") from None
            continue
        if kind == "error":
            raise payload
        rows.append(_deliver(payload, names, callbacks))
        done = payload.first + len(payload.device_rows)
        state = payload.state._replace(env=env_state(done), behaviour_params=payload.behaviour)
        final = done == cfg.num_updates or stop.requested
        callbacks.on_state(state, final=final, update=done)
        if final:
            return state


def _deliver(chunk: Chunk, names: tuple[str, ...], callbacks: Callbacks) -> dict[str, np.ndarray]:
    values = np.stack(jax.device_get(chunk.device_rows))  # [updates, metrics]
    rows = dict(zip(names, values.T))
    rows.update({k: np.asarray(v) for k, v in chunk.host_rows.items()})
    callbacks.on_metrics(chunk.first, rows)
    return rows


def _shut_down(pipeline: Pipeline, threads: list[threading.Thread]) -> None:
    """Stop the pipeline (waiting threads leave at once) and join every thread started."""
    pipeline.stop()
    for thread in threads:
        if thread.ident is not None:
            thread.join()
