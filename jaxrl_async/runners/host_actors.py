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

Before them, ``runners.run`` plans the envs once from the config (``envs/host_plan.py``: the
spec, the normalisation, how to make them) and hands the plan in; ``host_streams.py`` sizes
each stream's envs (workers, groups, seeds) and ``host_programs.py`` compiles the programs from
shapes. This module makes each stream's envs and batcher and runs one thread per stream
(``actors_per_device`` per actor device, each with ``num_envs / streams`` envs, global env
ids ``s * per_stream ...``).

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

import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxrl_async.algos import make_algorithm
from jaxrl_async.envs import HostEnvPlan, HostVecEnv
from jaxrl_async.runners.actor_learner import Setup, drive
from jaxrl_async.runners.host_batcher import Batcher
from jaxrl_async.runners.host_programs import HostPrograms, compile_host_programs
from jaxrl_async.runners.host_streams import HostEnvState, make_envs, resume_seeds
from jaxrl_async.runners.host_trajectory import hand_over
from jaxrl_async.runners.pipeline import Pipeline, RoleStats, chunk_ends, schedule
from jaxrl_async.runners.placement import (
    Layout,
    Packing,
    Stream,
    layout,
    learner_state_spec,
    over_processes,
    place_tree,
    put_global,
)
from jaxrl_async.runners.state import Callbacks, RunState, TrainingInterrupted, TrainResult


# --------------------------------------------------------------------------- host side
def make_batcher(cfg: Any, host: HostEnvPlan, env: HostVecEnv, programs: HostPrograms,
                 stream: Stream, normalizer: Any) -> Batcher:
    """The batcher of ``stream``: its envs, its device's programs and its envs' normalisation
    state (``normalizer``: a copy of their part of ``HostEnvState.normalizer``; ``()``: none)."""
    d = stream.device_index
    return Batcher(env, programs.keys[d], programs.policy[d], programs.acted, stream,
                   cfg.num_steps, host.normalization, normalizer, host.policy_spec.obs_dtype)


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
    host: HostEnvPlan,
    key: jax.Array,
    callbacks: Callbacks | None = None,
    state: RunState | None = None,
    devices: Sequence[Any] | None = None,
) -> TrainResult:
    """``run`` for a host env: the same result, metrics and timing (``actor_busy``: the
    fraction of wall time a stream spent stepping envs and acting). ``host``: the plan of its
    envs (``host_streams.host_plan(cfg)``). ``state``: continue from it (a restored checkpoint;
    the envs restart from fresh resets, see the module docstring)."""
    try:
        return _run(cfg, host, key, callbacks or Callbacks(), state, devices)
    except BaseException as error:
        traceback.clear_frames(error.__traceback__)  # as run: nothing outlives it
        raise


def _run(cfg: Any, host: HostEnvPlan, key: jax.Array, callbacks: Callbacks,
         state: RunState | None, devices: Sequence[Any] | None) -> TrainResult:
    if state is not None and int(state.update) >= cfg.num_updates:
        return TrainResult(state, {}, None)  # a finished run: nothing to compile
    start = time.perf_counter()
    where = layout(cfg, jax.local_devices() if devices is None else devices)
    programs = compile_host_programs(cfg, host, make_algorithm(cfg, host.policy_spec), where)
    resumed = state is not None
    if not resumed:
        state = programs.learner.init(key)
        env = HostEnvState(np.asarray(state.env), host.fresh_normalizer(cfg.num_envs))
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
            envs.append(make_envs(cfg.runner, host, where))
        batchers = [make_batcher(cfg, host, e, programs, s, share(env.normalizer, s))
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
            return HostEnvState(env.seeds, over_processes(  # seeds: every process has all
                jax.tree.map(lambda *xs: np.concatenate(xs), *parts))
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
