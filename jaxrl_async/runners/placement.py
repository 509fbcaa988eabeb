"""Where the async runner's data lives: which devices act and which learn, how a run's envs are
split into actor streams, and how pytrees cross devices as one packed vector.

- **Devices.** The first ``actor_devices`` local devices run the jitted rollout, the next
  ``learner_devices`` run the update data-parallel (``shard_map`` with ``lax.pmean``), every
  trajectory sharded along its env axis. With a single device both roles share it.
- **Streams.** Each actor device runs ``actors_per_device`` streams, each with its own slice of
  the envs (global env ids, so every random key is the one the sync runner draws).
- **Processes.** In a multi-process run (``jra.distributed``) each process runs its own actors
  on its share of the envs; the learner's mesh spans every process's learner devices.
- **Copies.** Device-to-device only: a trajectory is split per learner device inside the
  rollout program, so no resharding op has to queue behind the next rollout on the actor device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from jaxrl_async.algos import Algorithm
from jaxrl_async.runners.common import AXIS, learner_spec
from jaxrl_async.runners.state import RunState


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


class Stream(NamedTuple):
    """One actor stream: a thread stepping the envs ``env_id`` on ``device``."""

    index: int
    device: Any
    device_index: int
    env_id: jax.Array  # [num_envs / num_streams] global env ids, on ``device``


class Packing(NamedTuple):
    """A pytree of arrays as one flat ``uint32`` vector, so it crosses devices in one copy
    instead of one per leaf (host overhead is what limits overlap on a CPU). Exact: 32-bit
    leaves are bit-cast; bytes (``uint8``/``int8``: frames) four to a word, so frames cross as
    bytes; other narrower leaves are widened to 32 bits first."""

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
        return sum(words(x) for x in self.leaves)

    def pack(self, tree: Any) -> jax.Array:
        flat = []
        for x in jax.tree.leaves(tree):
            if is_bytes(x.dtype):
                x = x.ravel()
                x = jnp.pad(x, (0, -x.size % 4)).reshape(-1, 4)
                flat.append(lax.bitcast_convert_type(x, jnp.uint32))
            else:
                flat.append(lax.bitcast_convert_type(widen(x), jnp.uint32).ravel())
        return jnp.concatenate(flat)

    def unpack(self, flat: jax.Array) -> Any:
        chex.assert_shape(flat, (self.size,))
        leaves, offset = [], 0
        for x in self.leaves:
            n, w = int(np.prod(x.shape)), words(x)
            if is_bytes(x.dtype):
                data = lax.bitcast_convert_type(flat[offset:offset + w], x.dtype)  # [w, 4]
                leaves.append(data.ravel()[:n].reshape(x.shape))
            else:
                wide = lax.bitcast_convert_type(flat[offset:offset + n], wide_dtype(x.dtype))
                leaves.append(wide.reshape(x.shape).astype(x.dtype))
            offset += w
        return jax.tree.unflatten(self.treedef, leaves)


def is_bytes(dtype: Any) -> bool:
    """Whether leaves of ``dtype`` are packed four to a ``uint32`` word (uint8, int8)."""
    return np.dtype(dtype) in (np.dtype(np.uint8), np.dtype(np.int8))


def words(x: Any) -> int:
    """The ``uint32`` words a leaf (anything with ``shape`` and ``dtype``) packs into."""
    n = int(np.prod(x.shape))
    return -(-n // 4) if is_bytes(x.dtype) else n


def wide_dtype(dtype: Any) -> Any:
    if np.dtype(dtype).itemsize == 4:
        return dtype
    return jnp.float32 if jnp.issubdtype(dtype, jnp.floating) else jnp.int32


def widen(x: jax.Array) -> jax.Array:
    return x.astype(wide_dtype(x.dtype))


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
    cfg.check_async_env_split(processes)
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


def shapes_on(tree: Any, sharding: Any) -> Any:
    """Shapes of ``tree`` placed with ``sharding``."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def learner_state_spec(algo: Algorithm) -> RunState:
    """How the learner's part of the run state lies over the learner devices: replicated, but
    for the algorithm's ``PerEnv`` parts (replay buffers), split along the env axis like the
    trajectories. With several streams and learner devices, learner device ``i`` holds share
    ``i`` of every stream's envs, in stream order (the sync runner: a contiguous range)."""
    return RunState(learner=learner_spec(algo, P(AXIS), P()), env=(), key=P(), update=P(),
                    last_episode=P(), obs_moments=P())


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


def over_processes(tree: Any) -> Any:
    """This process's rows of a run-wide tree (host arrays with the env axis first: the
    process's share of the envs) as global arrays split over the processes in process order,
    one device each, so a checkpoint holds every process's envs; ``tree`` itself in a
    single-process run. The arrays keep their dtypes: float64 moments (a host env's
    normalisation) stay float64, as a single-process run saves them, where jax without x64
    would make float32 of them."""
    if jax.process_count() == 1:
        return tree
    first: dict[int, Any] = {}
    for d in sorted(jax.devices(), key=lambda d: d.id):
        first.setdefault(d.process_index, d)
    sharding = NamedSharding(Mesh(np.array([first[p] for p in sorted(first)]), ("processes",)),
                             P("processes"))

    def put(x: Any) -> jax.Array:
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(put(jax.random.key_data(x)),
                                            impl=jax.random.key_impl(x))
        host = np.asarray(x)
        return jax.make_array_from_process_local_data(
            sharding, host, (host.shape[0] * len(first), *host.shape[1:]))

    with jax.enable_x64(True):
        return jax.tree.map(put, tree)


def local_copy(x: jax.Array) -> jax.Array:
    """This process's copy of a replicated array (itself, in a single-process run)."""
    return x if x.is_fully_addressable else x.addressable_data(0)


def place_tree(spec: RunState, tree: Any, where: Layout, put: Callable) -> Any:
    """``put(subtree, sharding)`` for every subtree of ``tree`` under a spec of ``spec``."""
    sharding = {P(): where.replicated, P(AXIS): where.batch_sharding}
    return jax.tree.map(lambda s, sub: put(sub, sharding[s]), spec, tree,
                        is_leaf=lambda x: isinstance(x, P))
