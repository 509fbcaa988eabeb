"""The sync runner (Podracer's "Anakin"): rollout and update fused in one program on device.

``make_train(cfg)`` returns a pure function of a PRNG key: ``jit`` it, ``vmap`` it over seeds.
With ``SyncConfig(num_devices=D)`` the program runs data-parallel over D local devices with
``jax.shard_map`` (what ``jax.pmap`` is built on since JAX 0.8, and unlike ``pmap`` it composes
with ``jit`` and ``vmap``): each device steps ``num_envs / D`` envs, gradients and metrics are
``lax.pmean``-ed, so params stay identical on every device. Env ids, and hence all random keys,
are global, so D devices compute what one device computes, to float tolerance.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_async.config.shared import hyper_fields
from jaxrl_async.envs import obs_sums
from jaxrl_async.runners import divergence
from jaxrl_async.runners.common import (
    AXIS,
    build,
    check_devices,
    collect,
    compiler_options,
    evaluation,
    init_state,
    learn_update,
    learner_spec,
    merge_obs_statistics,
    to_numpy,
    with_evaluation,
)
from jaxrl_async.runners.common import spmd as common_spmd
from jaxrl_async.runners.placement import put_global
from jaxrl_async.runners.state import (
    Callbacks,
    RunState,
    StopOnInterrupt,
    TrainingDiverged,
    TrainingInterrupted,
    TrainResult,
)


class Program(NamedTuple):
    """Per-device functions of the sync runner (run them through ``spmd``)."""

    init: Callable[[jax.Array], RunState]
    update: Callable[[RunState], tuple[RunState, dict]]
    num_devices: int
    state_spec: RunState  # how the run state is split over devices (a spec prefix)
    evaluate: Callable[[RunState], dict] | None = None  # eval_every: common.evaluation

    def step(self, cfg: Any, state: RunState, updates_done: jax.Array) -> tuple[RunState, dict]:
        """``update``, then the evaluation due after ``updates_done`` updates (an unbatched
        counter: a loop index, so a cond stays a cond under ``vmap``)."""
        state, metrics = self.update(state)
        return state, with_evaluation(cfg, self.evaluate, state, metrics, updates_done)


def program(cfg: Any) -> Program:
    """The sync runner's per-device init and update for ``cfg`` (hyperparameters may be traced)."""
    env, algo = build(cfg)
    num_devices = cfg.runner.num_devices
    local_envs = cfg.num_envs // num_devices
    axis = AXIS if num_devices > 1 else None

    def env_id() -> jax.Array:  # [B_local] global ids of this device's envs
        offset = lax.axis_index(AXIS) * local_envs if axis else 0
        return offset + jnp.arange(local_envs, dtype=jnp.int32)

    def init(key: jax.Array) -> RunState:
        return init_state(env, algo, key, env_id(), axis_name=axis)

    def update(state: RunState) -> tuple[RunState, dict]:
        params = algo.policy_params(state.learner)
        env_carry, traj, sums = collect(env, algo, params, state.env, state.key, state.update,
                                        cfg.num_steps, env_id(), state.update)
        if axis:
            sums = lax.psum(sums, axis)
        env_carry, moments = merge_obs_statistics(env_carry, state.obs_moments,
                                                  obs_sums(env_carry.env_state), axis,
                                                  cfg.obs_clip)
        state = state._replace(obs_moments=moments)
        return learn_update(algo, state._replace(env=env_carry), traj, sums,
                            cfg.steps_per_update, axis)

    state_spec = RunState(learner=learner_spec(algo, P(AXIS), P()), env=P(AXIS), key=P(),
                          update=P(), last_episode=P(), obs_moments=P())
    return Program(init, update, num_devices, state_spec, evaluation(cfg, algo, axis, num_devices))


def spmd(fn: Callable, num_devices: int, in_specs: Any, out_specs: Any) -> Callable:
    """``fn`` itself on one device, else ``shard_map``-ed over the first ``num_devices`` devices
    (of all processes, in a distributed run)."""
    return common_spmd(fn, jax.devices()[:num_devices], in_specs, out_specs)


def train_with_config(cfg: Any, key: jax.Array) -> TrainResult:
    """The whole run as one program; ``cfg``'s hyperparameter leaves may be traced (sweeps)."""
    prog = program(cfg)

    def whole(key: jax.Array) -> TrainResult:
        state = prog.init(key)
        state, metrics = lax.scan(lambda s, i: prog.step(cfg, s, i + 1), state,
                                  jnp.arange(cfg.num_updates, dtype=jnp.int32))
        return TrainResult(state, metrics)

    return spmd(whole, prog.num_devices, P(), TrainResult(prog.state_spec, P(), None))(key)


def make_train(cfg: Any) -> Callable[[jax.Array], TrainResult]:
    """A pure function ``key -> TrainResult`` running all of training on device."""
    check_devices("num_devices", cfg.runner.num_devices, cfg, local=False)
    return lambda key: train_with_config(cfg, key)


def run(
    cfg: Any,
    key: jax.Array,
    callbacks: Callbacks | None = None,
    state: RunState | None = None,
) -> TrainResult:
    """Host-level loop: the same updates in chunks of ``cfg.log_every``, metrics fetched while
    the next chunk runs (no host round trip per update; but for a chunk that ends at a
    checkpoint, ``checkpoint_due``). ``state``: continue from it (a
    restored checkpoint) instead of a fresh init. Ctrl-C or SIGTERM stops after the chunk in
    flight (in every process of a multi-process run at once), with ``on_state(final=True)``,
    and raises ``TrainingInterrupted`` (see ``StopOnInterrupt``)."""
    callbacks = callbacks or Callbacks()
    check_devices("num_devices", cfg.runner.num_devices, cfg, local=False)
    start = time.perf_counter()
    prog, init_fn, chunk_fn, chunk = _host_programs(cfg)
    hyper = hyperparameters(cfg)
    if state is None:
        init = init_fn.lower(hyper, key).compile(compiler_options(cfg, runs_once=True))
        state = init(hyper, key)
    else:
        state = place(state, prog)
        if int(state.update) >= cfg.num_updates:  # a finished run: nothing to compile
            return TrainResult(state, {}, None)
    compiled = chunk_fn.lower(hyper, state, jnp.int32(chunk)).compile(compiler_options(cfg))
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - start

    first = end = int(state.update)
    callbacks.on_start(first)
    start = time.perf_counter()
    rows: list[dict] = []
    pending: tuple[int, int, Any, Any] | None = None
    with StopOnInterrupt() as stop:
        for begin in range(first, cfg.num_updates, chunk):
            n = min(chunk, cfg.num_updates - begin)
            state, buffers, flag = compiled(hyper, state, jnp.int32(n))  # runs while we log
            if pending is not None:
                _deliver(pending, callbacks, rows, cfg, state)
            pending, end = (begin, n, buffers, flag), begin + n
            final = end == cfg.num_updates or stop.agreed(end)  # every process the same
            if final or checkpoint_due(cfg, begin, end):  # its metrics before its checkpoint
                _deliver(pending, callbacks, rows, cfg, state)  # (which waits for it anyway)
                pending = None
            callbacks.on_state(state, final=final, update=end)
            if final:
                break
        if pending is not None:
            _deliver(pending, callbacks, rows, cfg, state)
        jax.block_until_ready(state)
    train_s = time.perf_counter() - start

    metrics = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]} if rows else {}
    steps = (end - first) * cfg.steps_per_update
    timing = {"compile_s": compile_s, "train_s": train_s, "sps": steps / max(train_s, 1e-9)}
    result = TrainResult(state, metrics, timing)
    if end < cfg.num_updates:
        raise TrainingInterrupted(result, stop.signal)
    return result


def checkpoint_due(cfg: Any, begin: int, end: int) -> bool:
    """Whether the chunk of updates ``begin + 1 ... end`` reaches a multiple of
    ``checkpoint_every`` (where a checkpoint sink writes the state after it). Its metrics are
    then delivered before its state, so a checkpoint never holds updates that
    ``metrics.jsonl`` does not (a run killed right after one resumes with every row)."""
    every = cfg.checkpoint_every
    return bool(every) and end // every > begin // every


def hyperparameters(cfg: Any) -> Any:
    """``cfg`` as the argument of the host loop's programs: its ``hyper`` leaves (lr, gamma,
    ent_coef ...) as float32 and int32 scalars, as a sweep traces them. They are arguments, not
    constants, so a config differing only in them runs the same compiled programs."""
    floats = {f.name for f in dataclasses.fields(cfg) if f.type in ("float", float)}
    leaves = [np.asarray(getattr(cfg, name), np.float32 if name in floats else np.int32)
              for name in hyper_fields(cfg)]
    return jax.tree.unflatten(jax.tree.structure(cfg), leaves)


def run_chunk(cfg: Any, chunk: int, state: RunState, n: jax.Array
              ) -> tuple[RunState, dict, tuple[jax.Array, jax.Array]]:
    """Up to ``n`` (<= ``chunk``) updates of ``cfg`` (hyperparameters may be traced) from
    ``state``: (state, metric buffers ``[chunk]``, (updates run, first non-finite watched
    index or -1)); stops after an update whose numbers are not finite."""
    prog = program(cfg)
    shapes = jax.eval_shape(lambda s: prog.step(cfg, s, s.update + 1), state)[1]
    buffers = jax.tree.map(lambda s: jnp.zeros((chunk, *s.shape), s.dtype), shapes)

    def more(carry):
        i, _, _, bad = carry
        return (i < n) & (bad < 0)

    def body(carry):
        i, state, buffers, _ = carry
        state, metrics = prog.step(cfg, state, state.update + 1)
        bad = divergence.first_nonfinite(state.learner, metrics)
        return i + 1, state, jax.tree.map(lambda b, m: b.at[i].set(m), buffers, metrics), bad

    i, state, buffers, bad = lax.while_loop(
        more, body, (jnp.int32(0), state, buffers, jnp.int32(-1)))
    return state, buffers, (i, bad)


_PROGRAMS: dict[Any, tuple[Program, Callable, Callable, int]] = {}


def _host_programs(cfg: Any) -> tuple[Program, Callable, Callable, int]:
    """The host loop's jitted ``init(hyper, key)`` and ``chunk(hyper, state, n)`` for ``cfg``
    (``hyper``: ``hyperparameters(cfg)``). Kept per static config (the config's pytree
    structure): running the same config again, resuming it, or a config that differs only in
    hyperparameters reuses the compiled programs."""
    structure = jax.tree.structure(cfg)
    if structure in _PROGRAMS:
        return _PROGRAMS[structure]
    prog = program(cfg)
    chunk = min(cfg.log_every, cfg.num_updates)
    spec = prog.state_spec
    init_fn = jax.jit(spmd(lambda hyper, key: program(hyper).init(key), prog.num_devices,
                           (P(), P()), spec))
    chunk_fn = jax.jit(spmd(lambda hyper, state, n: run_chunk(hyper, chunk, state, n),
                            prog.num_devices, (P(), spec, P()), (spec, P(), P())),
                       donate_argnums=1)
    _PROGRAMS[structure] = prog, init_fn, chunk_fn, chunk
    return _PROGRAMS[structure]


def place(state: RunState, prog: Program) -> RunState:
    """Put a state (restored from a checkpoint: numpy or on any device) where the runner keeps
    it: on the first device, or sharded over ``num_devices`` like ``init`` leaves it."""
    if prog.num_devices == 1:
        return jax.device_put(state, jax.local_devices()[0])
    mesh = Mesh(np.array(jax.devices()[:prog.num_devices]), (AXIS,))
    return jax.tree.map(lambda spec, sub: put_global(sub, NamedSharding(mesh, spec)),
                        prog.state_spec, state, is_leaf=lambda x: isinstance(x, P))


def _deliver(pending: tuple[int, int, Any, Any], callbacks: Callbacks, rows: list[dict],
             cfg: Any, state: RunState) -> None:
    """Hand a finished chunk's metric rows to the callbacks (and append them to ``rows``); if
    an update of it went non-finite, only the rows up to that one, then raise
    ``TrainingDiverged``. The chunk after it is in flight by then and stops after its first
    update (the state is not finite); ``CheckpointSink`` writes no non-finite state."""
    begin, n, buffers, flag = pending
    ran, bad = (int(x) for x in jax.device_get(flag))
    n = ran if bad >= 0 else n
    rows.append({k: v[:n] for k, v in to_numpy(buffers).items()})
    callbacks.on_metrics(begin, rows[-1])
    if bad >= 0:
        what = divergence.watched(state.learner, rows[-1])[bad]
        metrics = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
        raise TrainingDiverged(TrainResult(state, metrics, None), begin + ran, what,
                               cfg.num_updates)
