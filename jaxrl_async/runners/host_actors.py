"""Host actors for the async runner (Podracer's "Sebulba" proper), the entry point: CPU envs
stepped on the host, the policy jitted on the actor devices, the learner unchanged.

Selected by a host env id (``env="gymnasium:CartPole-v1"``, ``"envpool:Pong-v5"``, see
``envs/host.py``) with ``runner=AsyncConfig(...)``; ``runners.run`` hands such configs here.
A host env's data goes one way, one module per role:

1. **env workers** (``envs/host_workers.py``: gymnasium envs in worker processes writing into
   shared memory; ``envs/host_envpool.py``: EnvPool pools) step a group of envs;
2. the **batcher** (``host_batcher.py``) acts on each group with one jitted policy call while
   the other groups step;
3. the **trajectory builder** (``host_trajectory.py``) records the steps into ``[T, B, ...]``
   buffers in ``rollout.rollout``'s format and hands the packed rollout to the pipeline;
4. the **pipeline** and **learner** (``pipeline.py``, ``actor_learner.py``) as for JAX envs:
   the same learner program, schedule (tickets, lock-step or free-running), params hand-over
   and failure handling.

This module compiles the programs, makes each stream's envs and runs one thread per stream
(``actors_per_device`` per actor device, each with ``num_envs / streams`` envs, global env ids
``s * per_stream ...``).

- **Acting.** The act keys are those the JAX rollout draws at step ``t`` of update ``u`` for
  each env, so a host env and a JAX env with the same observations act alike; the packed params
  are unpacked inside the policy program (one argument per call).
- **Seeds.** Env ``i`` is reset once, with a 32-bit seed drawn from the run key and its global
  id; with deterministic envs and ``deterministic=True`` a seed reproduces a run exactly.
- **Run state.** The learner's part is a JAX-env run's (params, optimiser state, counters, the
  run key, the acting params of the deterministic schedule); ``RunState.env`` is a
  ``HostEnvState``: the envs' reset seeds and their normalisation state
  (``envs/host_normalize.py``), which each stream's batcher keeps and hands over after every
  log chunk (a copy per chunk end, as the JAX actors keep their env carries). The envs
  themselves live in worker processes or EnvPool: a run resumed from a checkpoint resets
  them, with seeds drawn for the update it resumes at (``resume_seeds``), and continues the
  learner and the normalisation exactly.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding

from jaxrl_async.algos import Algorithm, Trajectory, make_algorithm
from jaxrl_async.algos.base import has_memory
from jaxrl_async.envs import EnvSpec, HostVecEnv, host_env_spec, make_host_env
from jaxrl_async.envs import host_normalize as normalization
from jaxrl_async.envs.host import source_obs_dtype, split_host_id
from jaxrl_async.envs.host_workers import default_workers
from jaxrl_async.runners.actor_learner import Setup, drive
from jaxrl_async.runners.common import init_state
from jaxrl_async.runners.host_batcher import Batcher, act_keys, groups, policy_step
from jaxrl_async.runners.host_trajectory import hand_over
from jaxrl_async.runners.pipeline import Pipeline, RoleStats, chunk_ends, schedule
from jaxrl_async.runners.placement import (
    Layout,
    Packing,
    Stream,
    layout,
    learner_state_spec,
    place_tree,
    put_global,
    shapes_on,
)
from jaxrl_async.runners.programs import Programs, acting_params, compile_with_learner
from jaxrl_async.runners.rollout import EpisodeSums, env_keys
from jaxrl_async.runners.state import Callbacks, RunState, TrainingInterrupted, TrainResult


class HostPrograms(NamedTuple):
    """The compiled programs of a host-env run.

    - ``keys[d](run_key, update, env_id) -> [T, B, 2] uint32``: on actor device ``d``, the act
      keys (raw key data) of every step of rollout ``update`` of the envs ``env_id [B]``;
    - ``policy[d](params, obs, key_data) -> acted``: one step, ``params`` packed,
      ``obs [B, ...]``, ``key_data [B, 2]``; ``acted`` the packed ``(action, extras)`` (laid out
      by ``acted``), one vector so that one transfer brings it to the host;
    - ``learner``: the async runner's programs (learner, pack_params, init with
      ``RunState.env`` = the env seeds);
    - ``piece``: the packing of one learner device's share of a stream's rollout.
    """

    keys: list[Callable]
    policy: list[Callable]
    learner: Programs
    acted: Packing
    piece: Packing


class HostEnvState(NamedTuple):
    """``RunState.env`` of a host-env run (see the module docstring), leading axis num_envs."""

    seeds: Any  # [num_envs] uint32: what the envs were last reset with
    normalizer: Any = ()  # host_normalize.HostNormState of every env; () without normalisation


_RESUME_STREAM = 0x2E5E7  # folded into the run key: a resumed run's reset seeds, apart


def env_seeds(key: jax.Array, env_id: jax.Array) -> jax.Array:
    """``[B] uint32`` reset seeds of the host envs ``env_id``, from the reset key."""
    return jax.vmap(lambda k: jax.random.bits(k, (), jnp.uint32))(env_keys(key, env_id))


def resume_seeds(run_key: jax.Array, update: int, num_envs: int) -> np.ndarray:
    """``[num_envs] uint32``: the seeds a run resumed at ``update`` resets its envs with (fresh
    episodes, drawn from the run key and the update on a stream of their own)."""
    key = jax.random.fold_in(jax.random.fold_in(run_key, update), _RESUME_STREAM)
    return np.asarray(env_seeds(key, jnp.arange(num_envs, dtype=jnp.int32)))


def learning_spec(cfg: Any) -> EnvSpec:
    """The spec the policy and learner see: the host env's, with float32 observations where
    they are normalised."""
    spec = host_env_spec(cfg.env, flatten_obs=cfg.flatten_obs)
    return dataclasses.replace(spec, obs_dtype=np.dtype(np.float32)) if cfg.normalize_obs else spec


def fresh_normalizer(cfg: Any) -> Any:
    """The normalisation state of all ``cfg.num_envs`` fresh envs (``()``: none)."""
    spec = host_env_spec(cfg.env, flatten_obs=cfg.flatten_obs)
    return normalization.init_state(normalization.from_config(cfg), cfg.num_envs,
                                    spec.obs_shape, source_obs_dtype(cfg.env))


def abstract_state(cfg: Any) -> RunState:
    """Shapes and dtypes of a host-env run's state (what a checkpoint holds)."""
    algo = make_algorithm(cfg, learning_spec(cfg))
    ids = jnp.arange(cfg.num_envs, dtype=jnp.int32)
    state = jax.eval_shape(lambda key: init_state(None, algo, key, ids, reset_envs=env_seeds),
                           jax.random.key(0))
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), fresh_normalizer(cfg))
    state = state._replace(env=HostEnvState(state.env, shapes))
    if not cfg.runner.deterministic:
        return state
    size = Packing.of(acting_params(algo, state)).size
    return state._replace(behaviour_params=jax.ShapeDtypeStruct((size,), jnp.uint32))


def piece_shapes(cfg: Any, spec: EnvSpec, act_out: Any, width: int) -> tuple:
    """Shapes of one learner device's share (``width`` envs) of a stream's rollout:
    ``(Trajectory, EpisodeSums)``, as the JAX-env actors produce it. ``act_out``: the shapes of
    ``policy_step``'s output for one env."""
    def steps(shape: tuple, dtype: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((cfg.num_steps, width, *shape), dtype)

    action, extras = act_out
    obs = steps(spec.obs_shape, spec.obs_dtype)
    traj = Trajectory(
        obs=obs, action=steps(action.shape, action.dtype), reward=steps((), jnp.float32),
        terminated=steps((), jnp.bool_), truncated=steps((), jnp.bool_), next_obs=obs,
        extras=jax.tree.map(lambda x: steps(x.shape, x.dtype), extras),
        env_id=steps((), jnp.int32), policy_version=steps((), jnp.int32), step=steps((), jnp.int32))
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    return traj, EpisodeSums(scalar, scalar, scalar)


def compile_host_programs(cfg: Any, algo: Algorithm, spec: EnvSpec, where: Layout) -> HostPrograms:
    """Compile the policy step and params unpacking for every actor device, and the learner
    programs for the pieces host actors deliver, from shapes alone."""
    if has_memory(algo):
        raise ValueError(f"{type(cfg).__name__}.env: host envs support feedforward policies "
                         "only (this algorithm's policy is recurrent)")
    per_stream = where.per_stream
    per_group = per_stream // stream_groups(cfg, where)

    def init(key: jax.Array) -> RunState:  # RunState.env: the envs' reset seeds
        return init_state(None, algo, key, jnp.arange(cfg.num_envs, dtype=jnp.int32),
                          reset_envs=env_seeds)

    run_state = jax.eval_shape(init, jax.random.key(0))
    params_packing = Packing.of(acting_params(algo, run_state))  # no obs statistics
    # The packed params are unpacked inside the policy step: one argument to hand over per call
    # instead of one per leaf (the per-call overhead is what limits a host actor).
    obs = jax.ShapeDtypeStruct((per_group, *spec.obs_shape), spec.obs_dtype)
    key_data = jax.ShapeDtypeStruct((per_group, 2), jnp.uint32)
    packed = jax.ShapeDtypeStruct((params_packing.size,), jnp.uint32)
    acted = Packing.of(jax.eval_shape(lambda p, o, k: policy_step(algo, p, o, k),
                                      jax.eval_shape(params_packing.unpack, packed)[0], obs,
                                      key_data))

    def policy(params, obs, key_data):
        return acted.pack(policy_step(algo, params_packing.unpack(params)[0], obs, key_data))

    def keys(run_key, update, env_id):
        return act_keys(run_key, update, cfg.num_steps, env_id)

    one_env = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                           jax.tree.unflatten(acted.treedef, acted.leaves))
    width = per_stream // len(where.learner_devices)
    piece = Packing.of(piece_shapes(cfg, spec, one_env, width))

    lowered = []
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    for device in where.actor_devices:
        here = SingleDeviceSharding(device)
        ids = jax.ShapeDtypeStruct((per_stream,), jnp.int32)
        lowered.append(jax.jit(keys).lower(*shapes_on((run_state.key, scalar, ids), here)))
        lowered.append(jax.jit(policy).lower(*shapes_on((packed, obs, key_data), here)))
    programs = compile_with_learner(cfg, algo, where, init, piece, lowered,
                                    merges_obs_sums=False)
    return HostPrograms(programs.actor[0::2], programs.actor[1::2],
                        programs._replace(actor=[]), acted, piece)


# --------------------------------------------------------------------------- host side
def make_batcher(cfg: Any, env: HostVecEnv, programs: HostPrograms, stream: Stream,
                 normalizer: Any = ()) -> Batcher:
    """The batcher of ``stream``: its envs, its device's programs and its envs' normalisation
    state (``normalizer``: a copy of their part of ``HostEnvState.normalizer``; ``()``: fresh,
    or none without normalisation)."""
    if normalizer == ():
        normalizer = normalization.init_state(normalization.from_config(cfg), env.num_envs,
                                              env.spec.obs_shape, source_obs_dtype(cfg.env))
    d = stream.device_index
    return Batcher(env, programs.keys[d], programs.policy[d], programs.acted, stream,
                   cfg.num_steps, normalization.from_config(cfg), normalizer,
                   learning_spec(cfg).obs_dtype)


LANES_PER_WORKER = 16
"""Most env lanes (threads, ``host_threads=0``: one per env) a default worker holds: a worker's
lanes take its GIL one after another when their waits end, so beyond this many the workers
grow (docs/results.md, "Host envs at their own speed")."""


def stream_workers(runner: Any, where: Layout) -> int:
    """Worker processes per stream: ``runner.host_workers``, or (0) the cores divided by the
    streams (at least 1), more where one lane per env would put over ``LANES_PER_WORKER``
    lanes in a worker."""
    if runner.host_workers:
        return runner.host_workers
    cores = max(1, default_workers() // len(where.streams))
    if runner.host_threads:
        return cores
    return max(cores, -(-where.per_stream // LANES_PER_WORKER))


def stream_groups(cfg: Any, where: Layout) -> int:
    """Groups per stream (``host_batcher.groups``), counting worker processes only where the
    envs step in them (not EnvPool's pools, not inline)."""
    in_workers = (split_host_id(cfg.env)[0] == "gymnasium"
                  and cfg.runner.host_vectorization == "workers")
    workers = stream_workers(cfg.runner, where) if in_workers else 0
    return groups(cfg.runner, where.per_stream, workers)


def make_envs(cfg: Any, where: Layout) -> HostVecEnv:
    """One stream's host envs, split as the config says."""
    runner, per_stream = cfg.runner, where.per_stream
    workers = stream_workers(runner, where)
    return make_host_env(cfg.env, per_stream, groups=stream_groups(cfg, where),
                         vectorization=runner.host_vectorization, workers=workers,
                         threads=runner.host_threads, flatten_obs=cfg.flatten_obs,
                         step_timeout=runner.host_step_timeout)


def host_actor_loop(cfg: Any, batcher: Batcher, run_key: jax.Array, first: int, where: Layout,
                    piece: Packing, pipeline: Pipeline, stats: RoleStats,
                    snapshots: dict) -> None:
    """One host actor stream (its envs reset): rollouts as ``pipeline.schedule`` says, from
    update ``first``. After a rollout that ends a log chunk it keeps a copy of its envs'
    normalisation state in ``snapshots``, keyed by the rollouts done (the stream's part of
    ``HostEnvState`` handed to ``on_state``), before the learner can end that chunk."""
    exact = cfg.runner.deterministic
    for update, ticket, version, params in schedule(cfg, batcher.stream, first, pipeline):
        jax.block_until_ready(params)  # published as soon as dispatched: wait here, not in XLA
        start = time.perf_counter()
        traj, sums = batcher.rollout(params, run_key, update, version)
        if chunk_ends(cfg, first, update + 1):
            pipeline.keep_snapshot(snapshots, update + 1, batcher.norm_snapshot(), exact)
        hand_over(traj, sums, piece, where, pipeline, ticket, version)
        batcher.next_rollout()
        stats.busy_s += time.perf_counter() - start
        stats.rollouts += 1


# --------------------------------------------------------------------------- the entry point
def run(
    cfg: Any,
    key: jax.Array,
    callbacks: Callbacks | None = None,
    state: RunState | None = None,
    devices: Sequence[Any] | None = None,
) -> TrainResult:
    """``run`` for a host env: the same result, metrics and timing (``actor_busy``: the
    fraction of wall time a stream spent stepping envs and acting). ``state``: continue from it
    (a restored checkpoint; the envs restart from fresh resets, see the module docstring)."""
    try:
        return _run(cfg, key, callbacks or Callbacks(), state, devices)
    except BaseException as error:
        traceback.clear_frames(error.__traceback__)  # as run: nothing outlives it
        raise


def _run(cfg: Any, key: jax.Array, callbacks: Callbacks, state: RunState | None,
         devices: Sequence[Any] | None) -> TrainResult:
    if state is not None and int(state.update) >= cfg.num_updates:
        return TrainResult(state, {}, None)  # a finished run: nothing to compile
    start = time.perf_counter()
    where = layout(cfg, jax.local_devices() if devices is None else devices)
    spec = learning_spec(cfg)
    programs = compile_host_programs(cfg, make_algorithm(cfg, spec), spec, where)
    resumed = state is not None
    if not resumed:
        state = programs.learner.init(key)
        env = HostEnvState(np.asarray(state.env), fresh_normalizer(cfg))
    else:  # fresh episodes, the normalisation continued
        env = HostEnvState(resume_seeds(state.key, int(state.update), cfg.num_envs),
                           state.env.normalizer)
    first = int(state.update)
    learner_state = place_tree(learner_state_spec(programs.learner.algo),
                               state._replace(env=(), behaviour_params=()), where, put_global)
    behaviour = put_global(state.behaviour_params, where.replicated)
    run_keys = [jax.device_put(state.key, d) for d in where.actor_devices]
    setup = Setup(where, programs.learner, first, learner_state, [], run_keys, behaviour)
    del state, learner_state

    def share(tree: Any, s: Stream) -> Any:  # stream s's envs of an [num_envs, ...] tree
        begin = where.env_offset + s.index * where.per_stream
        return jax.tree.map(lambda x: np.array(x[begin:begin + where.per_stream]), tree)

    envs: list[HostVecEnv] = []
    snapshots: list[dict] = [{} for _ in where.streams]
    failed = True
    try:
        for _ in where.streams:  # the workers start while the next are made
            envs.append(make_envs(cfg, where))
        batchers = [make_batcher(cfg, e, programs, s, share(env.normalizer, s))
                    for s, e in zip(where.streams, envs)]
        for s, batcher in zip(where.streams, batchers):  # starting envs is not training time
            batcher.reset(share(env.seeds, s), resumed)
            if not cfg.runner.deterministic:  # the newest state of each stream, from the start
                snapshots[s.index][first] = batcher.norm_snapshot()
        compile_s = time.perf_counter() - start

        def actors(pipeline: Pipeline, stats: list[RoleStats]) -> list[tuple[Callable, tuple]]:
            return [(host_actor_loop, (cfg, batchers[s.index], run_keys[s.device_index], first,
                                       where, programs.piece, pipeline, stats[s.index],
                                       snapshots[s.index]))
                    for s in where.streams]

        def env_state(pipeline: Pipeline, done: int) -> HostEnvState:
            exact = cfg.runner.deterministic
            parts = [pipeline.snapshot(store, done, exact) for store in snapshots]
            return HostEnvState(env.seeds, jax.tree.map(lambda *xs: np.concatenate(xs), *parts)
                                if env.normalizer != () else ())

        result = drive(cfg, setup, callbacks, compile_s, actors, env_state)
        failed = False
        return result
    except TrainingInterrupted:  # Ctrl-C: a clean stop
        failed = False
        raise
    finally:
        snapshots.clear()
        for e in envs:
            e.close(failed=failed)
