"""The async runner (Podracer's "Sebulba", with the envs on device): actor devices collect
rollouts while learner devices update on the previous ones.

Devices, streams and processes are laid out in ``placement``; tickets, staleness and the
threads' supervision and shutdown live in ``pipeline``. This module compiles the programs and
runs the loops: one thread per actor stream (its own slice of the envs), one for the learner,
which takes one batch of every stream per update.

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

Threads rather than one dispatching loop: free-running actors, several streams and host envs
need them.
"""

from __future__ import annotations

import functools
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.runners.common import (
    build,
    init_state,
)
from jaxrl_async.runners.pipeline import (
    Batch,
    Chunk,
    Pipeline,
    RoleStats,
    acting_version,
    chunk_ends,
    publishes,
    role_thread,
    schedule,
    shut_down,
    supervise,
    ticket_of,
)
from jaxrl_async.runners.placement import (
    Layout,
    Packing,
    Stream,
    layout,
    learner_state_spec,
    local_copy,
    over_processes,
    place_tree,
    put_global,
    to_learner,
)
from jaxrl_async.runners.programs import Programs, acting_params, compile_programs
from jaxrl_async.runners.rollout import EnvCarry
from jaxrl_async.runners.state import (
    Callbacks,
    RunState,
    StopOnInterrupt,
    TrainingInterrupted,
    TrainResult,
)


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


def learner_loop(cfg: Any, programs: Programs, state: RunState, first: int, where: Layout,
                 pipeline: Pipeline, actor_stats: list[RoleStats], stats: RoleStats,
                 events: queue.Queue, versions: dict[int, jax.Array],
                 stop: StopOnInterrupt) -> None:
    """Updates ``first ... num_updates - 1``, taking tickets in order; publishes params every
    ``sync_every`` updates; sends a ``Chunk`` of metrics every ``log_every`` updates.
    ``versions``: the packed params by version, from those published at the start. Stops
    after a chunk where ``stop.agreed`` says so (``Chunk.last``): here, in the thread that
    runs the learner's collectives, so every process's learner stops after the same update
    and none is left waiting in a collective for the others."""
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
                batch, depth = pipeline.take(ticket_of(taken[s], s, num_streams))
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
            last = update + 1 < cfg.num_updates and stop.agreed(update + 1)
            events.put(("chunk", chunk._replace(state=state, behaviour=behaviour, last=last)))
            if last or diverged(chunk):  # the caller raises TrainingInterrupted or Diverged
                return
            chunk = new_chunk(update + 1)


def diverged(chunk: Chunk) -> bool:
    """Whether an update of ``chunk`` went non-finite (the metrics vectors' last entry, from
    ``divergence.first_nonfinite``): one look per chunk, no host round trip per update."""
    return bool(np.max(jax.device_get([row[-1] for row in chunk.device_rows])) >= 0)


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
    learner_state = place_tree(learner_state_spec(programs.algo), state._replace(
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
    ``callbacks.on_state`` gets the run state after every log chunk (in a multi-process run
    its leaves are global arrays, the envs split over the processes). Ctrl-C or SIGTERM stops
    after the chunk in flight, with ``on_state(final=True)``, and raises
    ``TrainingInterrupted``. Host envs
    (``env="gymnasium:..."``/``"envpool:..."``) run in ``host_actors.run`` (``runners.run``
    picks)."""
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
        return over_processes(jax.tree.map(_concatenate, *parts))

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
    for version in sorted(versions):  # deterministic: only versions some rollout acts with
        # (a version that never acts would take one of the pipeline's KEEP_VERSIONS places and
        # could push out the older acting version before its last rollout fetched it)
        if not runner.deterministic or publishes(runner, version):
            publish(versions[version], where, pipeline, version)
    rows: list[dict] = []
    with StopOnInterrupt() as stop:
        threads = [role_thread(f"actor-{s.index}", events, pipeline, target, *args)
                   for s, (target, args) in zip(where.streams, actors(pipeline, actor_stats))]
        threads.append(role_thread("learner", events, pipeline, learner_loop, cfg, programs,
                                   setup.learner_state, first, where, pipeline, actor_stats,
                                   learner_stats, events, versions, stop))
        del setup, versions  # the threads own their buffers now
        try:
            callbacks.on_start(first)
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            final = supervise(cfg, threads, events, callbacks, programs.metric_names, rows,
                              functools.partial(env_state, pipeline), programs.watched)
            train_s = time.perf_counter() - start
        finally:
            shut_down(pipeline, threads)
    # Counted once the actors have stopped: an actor counts a rollout after handing it over,
    # so the learner can train on the last one before its actor has counted it.
    collected = sum(s.rollouts for s in actor_stats) * where.per_stream * cfg.num_steps

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
        raise TrainingInterrupted(result, stop.signal)
    return result


def _concatenate(*xs: Any) -> Any:
    """Host arrays joined along the env axis; typed PRNG keys (an env state may hold them: Navix,
    Jumanji) as JAX arrays, which NumPy cannot hold."""
    if jax.dtypes.issubdtype(xs[0].dtype, jax.dtypes.prng_key):
        return jnp.concatenate(xs)
    return np.concatenate(xs)
