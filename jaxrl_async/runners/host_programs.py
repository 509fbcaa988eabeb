"""A host-env run's compiled programs (``HostPrograms``), from shapes alone: the act keys and
the policy step on every actor device, and the learner programs for the pieces the host actors
hand over; ``abstract_state``: the shapes of the run state a checkpoint holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import SingleDeviceSharding

from jaxrl_async.algos import Algorithm, Trajectory, make_algorithm
from jaxrl_async.algos.base import has_memory
from jaxrl_async.envs import EnvSpec, HostEnvPlan
from jaxrl_async.runners.common import init_state
from jaxrl_async.runners.host_batcher import act_keys, policy_step
from jaxrl_async.runners.host_streams import HostEnvState, env_seeds, stream_groups
from jaxrl_async.runners.placement import Layout, Packing, shapes_on
from jaxrl_async.runners.programs import Programs, acting_params, compile_with_learner
from jaxrl_async.runners.rollout import EpisodeSums
from jaxrl_async.runners.state import RunState


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


def abstract_state(cfg: Any, host: HostEnvPlan) -> RunState:
    """Shapes and dtypes of a host-env run's state (what a checkpoint holds); ``host``: the
    plan of its envs (``host_streams.host_plan``)."""
    algo = make_algorithm(cfg, host.policy_spec)
    ids = jnp.arange(cfg.num_envs, dtype=jnp.int32)
    state = jax.eval_shape(lambda key: init_state(None, algo, key, ids, reset_envs=env_seeds),
                           jax.random.key(0))
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                          host.fresh_normalizer(cfg.num_envs))
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


def compile_host_programs(cfg: Any, host: HostEnvPlan, algo: Algorithm,
                          where: Layout) -> HostPrograms:
    """Compile the policy step and params unpacking for every actor device, and the learner
    programs for the pieces host actors deliver, from shapes alone (the policy sees
    ``host.policy_spec``)."""
    if has_memory(algo):
        raise ValueError(f"{type(cfg).__name__}.env: host envs support feedforward policies "
                         "only (this algorithm's policy is recurrent)")
    spec, per_stream = host.policy_spec, where.per_stream
    per_group = per_stream // stream_groups(cfg.runner, host, where)

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
    programs = compile_with_learner(cfg, algo, where, init, piece, lowered,  # no evaluation:
                                    merges_obs_sums=False)  # host envs are not JAX programs
    return HostPrograms(programs.actor[0::2], programs.actor[1::2],
                        programs._replace(actor=[]), acted, piece)
