"""Host actors for the async runner (Podracer's "Sebulba" proper): CPU envs stepped by Python
threads, the policy jitted on the actor devices, the learner unchanged.

Selected by a host env id (``env="gymnasium:CartPole-v1"``, ``"envpool:Pong-v5"``, see
``envs/host.py``) with ``runner=AsyncConfig(...)``; ``runners.run`` hands such configs here.

- **Streams.** As for JAX envs, each actor device runs ``actors_per_device`` streams; a stream
  is one thread owning one host vector env of ``num_envs / num_streams`` envs (global env ids
  ``s * per_stream ...``). While a thread steps its envs in Python, the other streams' policy
  calls and the learner's update run in XLA (which releases the GIL), so env stepping, inference
  and learning overlap.
- **Acting.** One jitted program per actor device, called once per env step: ``algo.act``
  vmapped over the stream's envs with the keys the JAX rollout draws at step ``t`` of update
  ``u`` (``env_keys(fold_in(rollout_key(u), t), env_id)``, split, the first half), so a host
  env and a JAX env with the same observations act alike. The packed params are unpacked once
  per rollout by a second small program.
- **Trajectories.** Built on the host as numpy ``[T, B, ...]`` arrays in the format of
  ``rollout.rollout`` (``next_obs`` = the final observation where an episode ended, from the
  vector env's same-step autoreset), episode statistics summed on the host into
  ``EpisodeSums``, then split per learner device and packed exactly as ``Packing.pack`` does,
  with numpy, and copied host -> learner devices. The learner program is the one the JAX-env
  actors feed (``programs.compile_with_learner``), and so are the schedule (tickets,
  lock-step or free-running, ``max_staleness``), the params hand-over and the failure handling.
- **Seeds.** Env ``i`` is reset once, with a 32-bit seed drawn from the run key and its global
  id; with deterministic envs and ``deterministic=True`` a seed reproduces a run exactly.
  ``RunState.env`` holds these seeds ``[num_envs] uint32``: host env states live in Python
  objects and cannot be checkpointed, so a run cannot be resumed from a state.
"""

from __future__ import annotations

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
from jaxrl_async.rollout import EpisodeSums, env_keys, step_index, step_keys
from jaxrl_async.runners.actor_learner import Setup, drive
from jaxrl_async.runners.common import init_state, update_keys
from jaxrl_async.runners.pipeline import Batch, Pipeline, RoleStats, schedule
from jaxrl_async.runners.placement import (
    Layout,
    Packing,
    Stream,
    is_bytes,
    layout,
    learner_state_spec,
    place_tree,
    put_global,
    shapes_on,
    split_for_learners,
    to_learner,
    wide_dtype,
    words,
)
from jaxrl_async.runners.programs import Programs, acting_params, compile_with_learner
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


def env_seeds(key: jax.Array, env_id: jax.Array) -> jax.Array:
    """``[B] uint32`` reset seeds of the host envs ``env_id``, from the reset key."""
    return jax.vmap(lambda k: jax.random.bits(k, (), jnp.uint32))(env_keys(key, env_id))


def act_keys(run_key: jax.Array, update: jax.Array, num_steps: int,
             env_id: jax.Array) -> jax.Array:
    """``[T, B, 2] uint32``: the key data of the act keys ``rollout.rollout`` draws at every
    step of rollout ``update`` for the envs ``env_id [B]``."""
    rollout_key, _ = update_keys(run_key, update)
    return jax.random.key_data(step_keys(rollout_key, num_steps, env_id)[:, :, 0])


def policy_step(algo: Algorithm, params: Any, obs: jax.Array,
                key_data: jax.Array) -> tuple[jax.Array, dict]:
    """``algo.act`` of a feedforward policy (no memory) over the envs, ``obs [B, ...]``, with
    the act keys ``key_data [B, 2]``."""
    keys = jax.random.wrap_key_data(key_data)
    one = lambda p, o, k: algo.act(p, o, k, (), False)[:2]
    return jax.vmap(one, in_axes=(None, 0, 0))(params, obs, keys)


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

    def init(key: jax.Array) -> RunState:  # RunState.env: the envs' reset seeds
        return init_state(None, algo, key, jnp.arange(cfg.num_envs, dtype=jnp.int32),
                          reset_envs=env_seeds)

    run_state = jax.eval_shape(init, jax.random.key(0))
    params_packing = Packing.of(acting_params(algo, run_state))  # no obs statistics
    # The packed params are unpacked inside the policy step: one argument to hand over per call
    # instead of one per leaf (the per-call overhead is what limits a host actor).
    obs = jax.ShapeDtypeStruct((per_stream, *spec.obs_shape), spec.obs_dtype)
    key_data = jax.ShapeDtypeStruct((per_stream, 2), jnp.uint32)
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
    programs = compile_with_learner(cfg, algo, where, init, piece, lowered)
    return HostPrograms(programs.actor[0::2], programs.actor[1::2],
                        programs._replace(actor=[]), acted, piece)


# --------------------------------------------------------------------------- host side
def pack_numpy(packing: Packing, tree: Any) -> np.ndarray:
    """``packing.pack(tree)`` with numpy on the host, bit for bit: one flat ``uint32`` vector."""
    leaves, treedef = jax.tree.flatten(tree)
    if treedef != packing.treedef:
        raise ValueError(f"structure {treedef} does not match the packing's {packing.treedef}")
    flat = []
    for x, want in zip(leaves, packing.leaves):
        x = np.asarray(x)
        if x.shape != want.shape or x.dtype != want.dtype:
            raise ValueError(f"leaf {x.dtype}{list(x.shape)} does not match the packing's "
                             f"{want.dtype}{list(want.shape)}")
        if is_bytes(x.dtype):  # four to a word, as Packing.pack
            x = np.pad(x.ravel(), (0, -x.size % 4))
            flat.append(np.ascontiguousarray(x).view(np.uint32))
            continue
        wide = np.dtype(wide_dtype(x.dtype))
        flat.append(np.ascontiguousarray(x, dtype=wide).view(np.uint32).ravel())
    return np.concatenate(flat)


def unpack_numpy(packing: Packing, flat: np.ndarray) -> Any:
    """``packing.unpack(flat)`` with numpy on the host."""
    flat = np.asarray(flat, np.uint32)
    if flat.shape != (packing.size,):
        raise ValueError(f"expected a packed vector of {packing.size}, got shape {flat.shape}")
    leaves, offset = [], 0
    for want in packing.leaves:
        n, w = int(np.prod(want.shape)), words(want)
        if is_bytes(want.dtype):
            leaves.append(flat[offset:offset + w].view(want.dtype)[:n].reshape(want.shape))
        else:
            wide = flat[offset:offset + n].view(np.dtype(wide_dtype(want.dtype)))
            leaves.append(wide.reshape(want.shape).astype(want.dtype))
        offset += w
    return jax.tree.unflatten(packing.treedef, leaves)


class EpisodeTracker:
    """Running return and length of each host env's current episode."""

    def __init__(self, num_envs: int):
        self.ret = np.zeros(num_envs, np.float32)  # [B]
        self.length = np.zeros(num_envs, np.int32)  # [B]

    def step(self, reward: np.ndarray, done: np.ndarray) -> tuple[float, int, int]:
        """Add one step; (return sum, length sum, count) of the episodes that ended in it."""
        self.ret += reward
        self.length += 1
        ended = (float(self.ret[done].sum()), int(self.length[done].sum()), int(done.sum()))
        self.ret[done], self.length[done] = 0.0, 0
        return ended


class HostActor:
    """One stream's envs, its programs and where its episodes stand."""

    def __init__(self, env: HostVecEnv, programs: HostPrograms, stream: Stream, num_steps: int):
        self.env, self.stream, self.num_steps = env, stream, num_steps
        self.keys = programs.keys[stream.device_index]
        self.policy = programs.policy[stream.device_index]
        self.acted = programs.acted
        self.env_id = np.asarray(stream.env_id)  # [B] global ids
        self.episodes = EpisodeTracker(self.env_id.size)
        self.obs: np.ndarray | None = None  # [B, *obs_shape] the envs' current observations

    def reset(self, seeds: Sequence[int]) -> None:
        """Reset the envs, env ``i`` with ``seeds[i]``."""
        self.obs = self.env.reset([int(s) for s in seeds])

    def rollout(self, params: jax.Array, run_key: jax.Array, update: int,
                version: int) -> tuple[Trajectory, EpisodeSums]:
        """Rollout ``update``: ``num_steps`` steps of every env, acting with the (packed) params
        of ``version``; numpy arrays ``[T, B, ...]`` and the sums of the episodes that ended."""
        key_data = np.asarray(self.keys(run_key, np.int32(update), self.stream.env_id))
        steps, sums = [], np.zeros(3, np.float64)
        for t in range(self.num_steps):
            obs = self.obs
            action, extras = unpack_numpy(self.acted,
                                          np.asarray(self.policy(params, obs, key_data[t])))
            out = self.env.step(action)
            sums += self.episodes.step(out.reward, out.terminated | out.truncated)
            steps.append((obs, action, out.reward, out.terminated, out.truncated, out.final_obs,
                          extras))
            self.obs = out.obs
        obs, action, reward, terminated, truncated, next_obs, extras = jax.tree.map(
            lambda *xs: np.stack(xs), *steps)
        time_batch = reward.shape  # [T, B]
        traj = Trajectory(obs, action, reward, terminated, truncated, next_obs, extras,
                          env_id=np.broadcast_to(self.env_id.astype(np.int32), time_batch),
                          policy_version=np.full(time_batch, version, np.int32),
                          step=step_index(int(update) * self.num_steps, *time_batch))
        return traj, EpisodeSums(*sums.astype(np.float32))


def host_actor_loop(cfg: Any, actor: HostActor, seeds: np.ndarray, run_key: jax.Array,
                    where: Layout, piece: Packing, pipeline: Pipeline, stats: RoleStats) -> None:
    """One host actor stream: reset its envs, then rollouts as ``pipeline.schedule`` says."""
    actor.reset(seeds)
    for update, ticket, version, params in schedule(cfg, actor.stream, 0, pipeline):
        jax.block_until_ready(params)  # published as soon as dispatched: wait here, not in XLA
        start = time.perf_counter()
        traj, sums = actor.rollout(params, run_key, update, version)
        pieces = [pack_numpy(piece, p)
                  for p in split_for_learners(traj, sums, len(where.learner_devices))]
        stats.busy_s += time.perf_counter() - start
        stats.rollouts += 1
        pipeline.deliver(ticket, Batch(to_learner(pieces, where), version))


# --------------------------------------------------------------------------- the entry point
def run(
    cfg: Any,
    key: jax.Array,
    callbacks: Callbacks | None = None,
    state: RunState | None = None,
    devices: Sequence[Any] | None = None,
) -> TrainResult:
    """``run`` for a host env: the same result, metrics and timing (``actor_busy``:
    the fraction of wall time a stream spent stepping envs and acting). ``state`` must be ``None``:
    host env states cannot be restored."""
    if state is not None:
        raise ValueError(f"{type(cfg).__name__}.env: a run on the host env {cfg.env!r} cannot "
                         "be resumed from a state (host env states live in Python objects and "
                         "are not part of RunState)")
    try:
        return _run(cfg, key, callbacks or Callbacks(), devices)
    except BaseException as error:
        traceback.clear_frames(error.__traceback__)  # as run: nothing outlives it
        raise


def _run(cfg: Any, key: jax.Array, callbacks: Callbacks,
         devices: Sequence[Any] | None) -> TrainResult:
    start = time.perf_counter()
    where = layout(cfg, jax.local_devices() if devices is None else devices)
    spec = host_env_spec(cfg.env, flatten_obs=cfg.flatten_obs)
    programs = compile_host_programs(cfg, make_algorithm(cfg, spec), spec, where)
    state = programs.learner.init(key)
    seeds = np.asarray(state.env)  # [num_envs]
    learner_state = place_tree(learner_state_spec(programs.learner.algo),
                                   state._replace(env=()), where, put_global)
    run_keys = [jax.device_put(state.key, d) for d in where.actor_devices]
    setup = Setup(where, programs.learner, 0, learner_state, [], run_keys, ())
    del state, learner_state

    envs: list[HostVecEnv] = []
    failed = True
    try:
        for _ in where.streams:
            envs.append(make_host_env(cfg.env, where.per_stream, flatten_obs=cfg.flatten_obs,
                                      vectorization={"sync": "inline", "async": "workers"}[
                                          cfg.runner.host_vectorization],
                                      step_timeout=cfg.runner.host_step_timeout))
        compile_s = time.perf_counter() - start

        def actors(pipeline: Pipeline, stats: list[RoleStats]) -> list[tuple[Callable, tuple]]:
            threads = []
            for s, env in zip(where.streams, envs):
                begin = where.env_offset + s.index * where.per_stream
                threads.append((host_actor_loop, (
                    cfg, HostActor(env, programs, s, cfg.num_steps),
                    seeds[begin:begin + where.per_stream], run_keys[s.device_index], where,
                    programs.piece, pipeline, stats[s.index])))
            return threads

        result = drive(cfg, setup, callbacks, compile_s, actors,
                              lambda pipeline, done: seeds)
        failed = False
        return result
    except TrainingInterrupted:  # Ctrl-C: a clean stop
        failed = False
        raise
    finally:
        for env in envs:
            env.close(failed=failed)
