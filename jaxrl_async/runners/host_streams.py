"""A host-env run's streams of envs, before anything compiles: the plan of its envs from the
config (``host_plan``, made once by ``runners.run``), how many worker processes and groups a
stream's envs step in (``make_envs``), the seeds they reset with (``env_seeds``,
``resume_seeds``) and the run state of the envs (``HostEnvState``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.envs import HostEnvPlan, HostVecEnv, plan_host_envs
from jaxrl_async.envs import host_normalize as normalization
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


def host_plan(cfg: Any) -> HostEnvPlan:
    """The plan of the host envs of ``cfg`` (its env id, spaces, normalisation, vectorization)."""
    runner = cfg.runner
    return plan_host_envs(cfg.env, flatten_obs=cfg.flatten_obs,
                          normalization=normalization.from_config(cfg),
                          vectorization=runner.host_vectorization, threads=runner.host_threads,
                          step_timeout=runner.host_step_timeout)


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


def stream_groups(runner: Any, host: HostEnvPlan, where: Layout) -> int:
    """Groups per stream (``host_batcher.groups``), counting worker processes only where the
    envs step in them (not EnvPool's pools, not inline)."""
    workers = stream_workers(runner, where) if host.in_workers else 0
    return groups(runner, where.per_stream, workers)


def make_envs(runner: Any, host: HostEnvPlan, where: Layout) -> HostVecEnv:
    """One stream's host envs, split as the runner config says."""
    return host.make(where.per_stream, stream_groups(runner, host, where),
                     stream_workers(runner, where))
