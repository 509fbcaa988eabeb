"""A host-env run's streams of envs, before anything compiles: how many worker processes and
groups a stream's envs step in (``make_envs``), the seeds they reset with (``env_seeds``,
``resume_seeds``), the spec the policy sees (``learning_spec``) and their normalisation state
(``HostEnvState``, ``fresh_normalizer``)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.envs import EnvSpec, HostVecEnv, host_env_spec, make_host_env
from jaxrl_async.envs import host_normalize as normalization
from jaxrl_async.envs.host import source_obs_dtype, split_host_id
from jaxrl_async.envs.host_workers import default_workers
from jaxrl_async.runners.host_batcher import groups
from jaxrl_async.runners.placement import Layout
from jaxrl_async.runners.rollout import env_keys


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
