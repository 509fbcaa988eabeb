"""The async runner's host pipeline: tickets, the batches and params handed between threads,
and the threads' supervision and shutdown.

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
- **Shutdown.** Any exception in any thread stops the pipeline; every thread is joined and the
  exception re-raised in the caller with its traceback; Ctrl-C or SIGTERM: the learner
  finishes the chunk in flight (every process's learner the same one, ``StopOnInterrupt``), the
  caller hands its state to ``on_state(final=True)`` and raises ``TrainingInterrupted``.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_async.runners.placement import Stream
from jaxrl_async.runners.state import (
    Callbacks,
    RunState,
    TrainingDiverged,
    TrainResult,
)

THREAD_PREFIX = "jaxrl-async"
"""Every thread the runner starts is named ``jaxrl-async-<role>``."""


def acting_version(runner: Any, update: int) -> int:
    """Deterministic mode: the params version (updates done) that acts in rollout ``update``:
    ``lag`` updates back, and only versions the learner publishes (every ``sync_every``).
    A function of ``update`` alone, so a resumed run keeps the schedule of the whole run."""
    return max(update - runner.lag, 0) // runner.sync_every * runner.sync_every


def publishes(runner: Any, version: int) -> bool:
    """Whether the learner sends the params of ``version`` to the actor devices."""
    return version % runner.sync_every == 0


def ticket_of(rollout: int, stream: int, num_streams: int) -> int:
    """The ticket of ``stream``'s ``rollout``-th rollout: each stream's rollouts in time order,
    the streams interleaved (the one rule actors and the learner share)."""
    return rollout * num_streams + stream


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
            ticket = ticket_of(self._reserved[stream], stream, self._streams)
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
            ticket = ticket_of(n, stream.index, num_streams)
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
    last: bool = False  # the learner stops after it (``StopOnInterrupt.agreed``)


def role_thread(role: str, events: queue.Queue, pipeline: Pipeline, target: Callable,
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


def supervise(cfg: Any, threads: list[threading.Thread], events: queue.Queue,
               callbacks: Callbacks, names: tuple[str, ...], rows: list[dict],
               env_state: Callable[[int], Any],
               watched: tuple[str, ...] = ()) -> RunState:
    """The calling thread's part: deliver metrics and the run state after each chunk to the
    callbacks, until the learner's last chunk (the end, or where it stopped on a signal:
    ``Chunk.last``); re-raise the
    first exception of any thread; raise ``TrainingDiverged`` (``watched``: what the metrics
    vectors' divergence entry indexes) after a chunk with a non-finite update. Waits with a
    timeout, so signals get through."""
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
        delivered, bad = deliver_chunk(payload, names, callbacks)
        rows.append(delivered)
        if bad >= 0:  # the chunk's state is not handed on (no checkpoint of it)
            done = payload.first + len(delivered[names[0]])
            metrics = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
            raise TrainingDiverged(TrainResult(payload.state, metrics), done, watched[bad],
                                   cfg.num_updates)
        done = payload.first + len(payload.device_rows)
        state = payload.state._replace(env=env_state(done), behaviour_params=payload.behaviour)
        final = done == cfg.num_updates or payload.last
        callbacks.on_state(state, final=final, update=done)
        if final:
            return state


def deliver_chunk(chunk: Chunk, names: tuple[str, ...],
                  callbacks: Callbacks) -> tuple[dict[str, np.ndarray], int]:
    """Hand the chunk's metric rows to the callbacks, up to and including the first update
    that went non-finite; returns them and what went non-finite (an index in
    ``Programs.watched``; -1: nothing)."""
    values = np.stack(jax.device_get(chunk.device_rows))  # [updates, metrics + 1]
    codes = values[:, len(names)].astype(np.int64)  # divergence.first_nonfinite per update
    bad = np.flatnonzero(codes >= 0)
    n = int(bad[0]) + 1 if bad.size else len(values)
    rows = dict(zip(names, values[:n, :len(names)].T))
    rows.update({k: np.asarray(v)[:n] for k, v in chunk.host_rows.items()})
    callbacks.on_metrics(chunk.first, rows)
    return rows, (int(codes[bad[0]]) if bad.size else -1)


def shut_down(pipeline: Pipeline, threads: list[threading.Thread]) -> None:
    """Stop the pipeline (waiting threads leave at once) and join every thread started."""
    pipeline.stop()
    for thread in threads:
        if thread.ident is not None:
            thread.join()
