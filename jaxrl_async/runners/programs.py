"""The async runner's compiled programs, from shapes alone: the rollout for every actor device
(one packed piece per learner device), the update over the learner devices, the params packing
and the init."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from jax.sharding import SingleDeviceSharding

from jaxrl_async.algos import Algorithm
from jaxrl_async.envs import merge_moments, obs_sums
from jaxrl_async.runners import divergence
from jaxrl_async.runners.common import (
    AXIS,
    collect,
    compiler_options,
    evaluation,
    init_state,
    learn_update,
    spmd,
    with_evaluation,
    with_moments,
)
from jaxrl_async.runners.placement import (
    Layout,
    Packing,
    learner_state_spec,
    place_tree,
    shapes_on,
    split_for_learners,
)
from jaxrl_async.runners.state import (
    RunState,
)


class Programs(NamedTuple):
    """The compiled programs, exchanging packed vectors (see ``Packing``):

    - ``actor[d](params, carry, run_key, update, env_id, version) -> (carry, pieces)`` on actor
      device ``d`` (the carry is donated); ``pieces``: one packed ``(trajectory slice, episode
      sums)`` per learner device, the slice being that device's share of the stream's envs;
    - ``learner(state, batches) -> (state, metrics, params)``: one update over the learner
      devices from one batch (all its pieces) per stream; ``metrics`` a vector (``metric_names``,
      then ``divergence.first_nonfinite``, an index in ``watched`` or -1),
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
    watched: tuple[str, ...] = ()  # what the metrics vector's last entry indexes (divergence)


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
        carry, traj, sums = collect(env, algo, policy, with_moments(carry, moments, cfg.obs_clip),
                                    run_key, update, cfg.num_steps, env_id, version)
        if cfg.normalize_obs:  # the stream's raw-observation sums travel with its episode sums
            sums = (sums, obs_sums(carry.env_state))
        return carry, split_for_learners(traj, sums, num_learners)

    def actor_args(device: Any) -> tuple:
        carry = jax.tree.map(lambda x: jax.ShapeDtypeStruct((per_stream, *x.shape[1:]), x.dtype),
                             run_state.env)
        scalar = jax.ShapeDtypeStruct((), jnp.int32)
        args = (jax.ShapeDtypeStruct((params_packing.size,), jnp.uint32), carry, run_state.key,
                scalar, jax.ShapeDtypeStruct((per_stream,), jnp.int32), scalar)
        return shapes_on(args, SingleDeviceSharding(device))

    piece_packing = Packing.of(jax.eval_shape(rollout, *actor_args(where.actor_devices[0]))[1][0])

    def actor(*args):
        carry, pieces = rollout(*args)
        return carry, tuple(piece_packing.pack(piece) for piece in pieces)

    actors = [jax.jit(actor, donate_argnums=1).lower(*actor_args(d)) for d in where.actor_devices]
    evaluate = evaluation(cfg, algo, learner_axis(where), len(where.all_learner_devices))
    return compile_with_learner(cfg, algo, where, init, piece_packing, actors, evaluate)


def learner_axis(where: Layout) -> str | None:
    """The mesh axis the update runs over (``None`` on one learner device)."""
    return AXIS if len(where.all_learner_devices) > 1 else None


def compile_with_learner(cfg: Any, algo: Algorithm, where: Layout, init: Callable,
                         piece_packing: Packing, actors: list, evaluate: Callable | None = None,
                         merges_obs_sums: bool = True) -> Programs:
    """Compile the update for the learner devices (one packed piece per stream and learner
    device, laid out by ``piece_packing``), ``pack_params``, ``init`` and the lowered actor
    programs ``actors`` (kept, compiled, in ``Programs.actor``), from shapes alone.
    ``evaluate``: ``common.evaluation``'s, over ``learner_axis`` (``None``: no evaluation).
    ``merges_obs_sums``: with normalize_obs, the pieces carry the device envs' observation
    sums, which the update merges (host envs normalise on the host: ``False``)."""
    axis = learner_axis(where)
    run_state = jax.eval_shape(init, jax.random.key(0))
    spec = learner_state_spec(algo)
    learner_state = place_tree(spec, run_state._replace(env=()), where, shapes_on)
    params_packing = Packing.of(acting_params(algo, run_state))

    def update(state: RunState, batches: tuple[jax.Array, ...]):
        pieces = [piece_packing.unpack(batch) for batch in batches]  # this device's share
        traj = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *[t for t, _ in pieces])
        sums = jax.tree.map(lambda *xs: sum(xs), *[s for _, s in pieces])
        if axis:
            sums = lax.psum(sums, axis)
        if cfg.normalize_obs and merges_obs_sums:  # every stream's and device's, merged once
            sums, observed = sums
            state = state._replace(obs_moments=merge_moments(state.obs_moments, observed))
        staleness = (state.update - traj.policy_version).astype(jnp.float32)
        state, metrics = learn_update(algo, state, traj, sums, cfg.steps_per_update, axis)
        mean, most = staleness.mean(), staleness.max()
        if axis:
            mean, most = lax.pmean(mean, axis), lax.pmax(most, axis)
        metrics = {**metrics, "staleness": mean, "staleness_max": most}
        metrics = with_evaluation(cfg, evaluate, state, metrics, state.update)
        return state, metrics, params_packing.pack(acting_params(algo, state))

    batch = jax.ShapeDtypeStruct((piece_packing.size * len(where.all_learner_devices),),
                                 jnp.uint32, sharding=where.batch_sharding)
    batches = (batch,) * len(where.streams)
    on_learners = functools.partial(spmd, devices=where.all_learner_devices,
                                    in_specs=(spec, P(AXIS)), out_specs=(spec, P(), P()))
    names = tuple(sorted(jax.eval_shape(on_learners(update), learner_state, batches)[1]))

    def learner(state: RunState, batches: tuple[jax.Array, ...]):
        state, metrics, params = update(state, batches)
        bad = divergence.first_nonfinite(state.learner, metrics).astype(jnp.float32)
        return state, jnp.stack([metrics[k].astype(jnp.float32) for k in names] + [bad]), params

    def pack_params(state: RunState) -> jax.Array:
        return params_packing.pack(acting_params(algo, state))

    options, once = compiler_options(cfg), compiler_options(cfg, runs_once=True)
    lowered = [(program, options) for program in actors]
    lowered.append((jax.jit(on_learners(learner)).lower(learner_state, batches), options))
    lowered.append((jax.jit(pack_params).lower(learner_state), options))
    lowered.append((jax.jit(init).lower(jax.random.key(0)), once))
    # One after the other: parallel compiles compete for the same cores (docs/results.md).
    compiled = [program.compile(opts) for program, opts in lowered]
    *actor_fns, learner_fn, pack_fn, init_fn = compiled
    watched = divergence.watched(learner_state.learner, names)
    return Programs(actor_fns, learner_fn, pack_fn, init_fn, names, algo, watched)


def acting_params(algo: Algorithm, state: RunState) -> tuple[Any, Any]:
    """What the learner publishes to the actors (packed): the policy params and the run's
    observation statistics (``()`` unless normalize_obs), which actors set into their env
    states before a rollout (``common.with_moments``)."""
    return algo.policy_params(state.learner), state.obs_moments
