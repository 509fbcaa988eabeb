"""Host actors' batcher: the policy acting on a stream's host envs, one group at a time.

A stream's B envs are split into G equal groups (``groups``). In every step the batcher takes
each group in turn: it waits for the group's last step (``env.recv``), records it
(``host_trajectory.TrajectoryBuilder``), makes ONE jitted policy call for the whole group
(fixed shapes, so it compiles once; the observations cross as one contiguous array, a slice of
the trajectory's buffer) and starts the group's next step (``env.send``). While the policy acts
on one group, the others step in their workers or pools (double buffering with G = 2).

The act keys are those of ``rollout.rollout``, per env and step (``act_keys``), so a rollout does
not depend on G or on timing, and ``deterministic=True`` reproduces a run bit for bit. With
``normalize_obs``/``normalize_reward`` each step's observations and rewards are normalised
(``envs/host_normalize.py``, per env) before the policy sees them and the trajectory records
them; episode returns are counted in the raw rewards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxrl_async.algos import Algorithm, Trajectory
from jaxrl_async.envs import HostVecEnv
from jaxrl_async.envs.host_normalize import Normalization, normalize_reset, normalize_step
from jaxrl_async.runners.common import update_keys
from jaxrl_async.runners.host_trajectory import TrajectoryBuilder, numpy_unpacker
from jaxrl_async.runners.placement import Packing, Stream
from jaxrl_async.runners.rollout import EpisodeSums, step_keys

ENVS_PER_GROUP = 16
"""The default rule's threshold: 4 groups only where each group still holds this many envs."""


def groups(runner: Any, per_stream: int, workers: int) -> int:
    """The groups a stream's envs split into: ``runner.host_groups``, or (0) 4 where the envs
    step in ``workers`` worker processes (0: none, EnvPool or inline envs) and 4 groups of at
    least ``ENVS_PER_GROUP`` divide them, else 2 where the envs are even, else 1. A group's step
    lasts as long as its slowest env, each env's wake-up queued behind the others' on the cores
    (docs/results.md, "Host envs at their own speed"): smaller groups shorten that tail, at one
    more policy call per step each, which envs of 1 ms cannot afford at 16 envs a group."""
    if runner.host_groups:
        return runner.host_groups
    if workers and per_stream % 4 == 0 and per_stream // 4 >= ENVS_PER_GROUP:
        return 4
    return 2 if per_stream % 2 == 0 else 1


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


class Batcher:
    """One stream's envs acted on by its device's policy (see the module docstring).
    ``keys(run_key, update, env_id) -> [T, B, 2]`` and ``policy(params, obs, key_data) ->
    packed (action, extras)`` are the stream's compiled programs, the policy for one group;
    ``norm``/``norm_state``: what to normalise and the stream's envs' normalisation state
    (``host_normalize.HostNormState``, updated in place; ``()`` without normalisation);
    ``obs_dtype``: the policy's observations' (float32 where they are normalised)."""

    def __init__(self, env: HostVecEnv, keys: Callable, policy: Callable, acted: Packing,
                 stream: Stream, num_steps: int, norm: Normalization, norm_state: Any,
                 obs_dtype: Any):
        self.env, self.stream, self.num_steps = env, stream, num_steps
        self.keys, self.policy, self.acted = keys, policy, acted
        self.unpack = numpy_unpacker(acted)
        self.norm, self.norm_state = norm, norm_state
        self.builder = TrajectoryBuilder(env.spec.obs_shape, obs_dtype, acted,
                                         np.asarray(stream.env_id), num_steps)

    def reset(self, seeds: Sequence[int], resumed: bool = False) -> None:
        """Reset the envs, env ``i`` with ``seeds[i]`` (``resumed``: the first observations
        are not added to the normalisation moments, ``host_normalize.normalize_reset``)."""
        obs = self.env.reset([int(s) for s in seeds])
        self.builder.start(normalize_reset(self.norm, self.norm_state, slice(None), obs,
                                           counted=not resumed))

    def norm_snapshot(self) -> Any:
        """A copy of the stream's normalisation state (``()`` without normalisation)."""
        return jax.tree.map(np.copy, self.norm_state)

    def rollout(self, params: jax.Array, run_key: jax.Array, update: int,
                version: int) -> tuple[Trajectory, EpisodeSums]:
        """Rollout ``update``: ``num_steps`` steps of every env, acting with the (packed) params
        of ``version``; numpy arrays ``[T, B, ...]`` (valid until ``next_rollout``) and the
        sums of the episodes that ended."""
        env, builder, T = self.env, self.builder, self.num_steps
        key_data = np.asarray(self.keys(run_key, np.int32(update), self.stream.env_id))
        parts = [env.group(g) for g in range(env.groups)]
        norm, state = self.norm, self.norm_state
        for t in range(T):
            for g, part in enumerate(parts):
                if t:
                    out = env.recv(g)
                    builder.record(t - 1, part, normalize_step(norm, state, part, out),
                                   out.reward)
                acted = np.asarray(self.policy(params, builder.obs[t, part], key_data[t, part]))
                action, extras = self.unpack(acted)
                env.send(g, action)  # the envs step while the step is recorded
                builder.act(t, part, (action, extras))
        for g, part in enumerate(parts):
            out = env.recv(g)
            builder.record(T - 1, part, normalize_step(norm, state, part, out), out.reward)
        return builder.finish(update, version)

    def next_rollout(self) -> None:
        self.builder.next_rollout()
