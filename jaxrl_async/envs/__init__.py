"""Environments: ``make_env(env_id)`` for gymnax ids, Brax, the env suites (Craftax,
XLand-MiniGrid, Navix, Jumanji) and registered envs, wrapped and batched on the device; host envs
(``gymnasium:<id>``, ``envpool:<id>``) for the async runner's host actors in ``host``."""

from __future__ import annotations

import functools
from typing import Any

import jax

from jaxrl_async.envs import brax, registry
from jaxrl_async.envs.core import (
    AutoReset,
    EnvSpec,
    GymnaxVecEnv,
    VecEnv,
    continuous_spec,
    discrete_spec,
    spec_from_gymnax,
)
from jaxrl_async.envs.host import (
    HostEnvError,
    HostEnvTimeout,
    HostStep,
    HostVecEnv,
    InlineVecEnv,
    check_host_env_id,
    host_env_spec,
    is_host_env,
)
from jaxrl_async.envs.host_envpool import EnvPoolVecEnv
from jaxrl_async.envs.host_plan import HOST_VECTORIZATIONS, HostEnvPlan, plan_host_envs
from jaxrl_async.envs.host_workers import WorkerVecEnv
from jaxrl_async.envs.registry import register_env, registered_ids
from jaxrl_async.envs.wrappers import (
    ClipAction,
    EpisodeStatistics,
    FlattenObservation,
    NormalizeObservation,
    NormalizeReward,
    ObsSums,
    RunningMoments,
    merge_moments,
    normalize,
    obs_sums,
    set_moments,
)

__all__ = [
    "AutoReset",
    "EnvSpec",
    "VecEnv",
    "continuous_spec",
    "discrete_spec",
    "make_env",
    "register_env",
    "registered_ids",
    "env_spec",
    "known_env_ids",
    "HostVecEnv",
    "HostStep",
    "HostEnvError",
    "HostEnvTimeout",
    "InlineVecEnv",
    "WorkerVecEnv",
    "EnvPoolVecEnv",
    "is_host_env",
    "make_host_env",
    "HostEnvPlan",
    "plan_host_envs",
    "HOST_VECTORIZATIONS",
    "ClipAction",
    "EpisodeStatistics",
    "FlattenObservation",
    "NormalizeObservation",
    "NormalizeReward",
    "ObsSums",
    "RunningMoments",
    "merge_moments",
    "normalize",
    "obs_sums",
    "set_moments",
]


def make_host_env(env_id: str, num_envs: int, *, groups: int = 1, vectorization: str = "workers",
                  workers: int = 0, threads: int = 0, flatten_obs: bool = False,
                  step_timeout: float = 0.0, **options: Any) -> HostVecEnv:
    """``num_envs`` host envs of ``env_id`` (``gymnasium:<id>`` or ``envpool:<id>``) in
    ``groups`` equal groups. Gymnasium envs: ``vectorization`` 'workers' (``workers``
    processes, 0: the cores; ``threads`` per worker, 0: one per env; ``step_timeout`` seconds,
    0: none) or 'inline'. EnvPool envs: a pool per group with ``threads`` C++ threads (0:
    EnvPool's default); ``options`` go to ``envpool.make``. (``plan_host_envs(...).make``: a
    run's envs, planned once.)"""
    plan = plan_host_envs(env_id, flatten_obs=flatten_obs, vectorization=vectorization,
                          threads=threads, step_timeout=step_timeout)
    return plan.make(num_envs, groups, workers, **options)


def known_env_ids() -> list[str]:
    """Every id ``make_env`` accepts: gymnax's (classic control, MinAtar, bsuite, misc), the
    registered ones and, for each optional extra installed, its suite's (``brax/<name>``,
    ``craftax/...``, ``xminigrid/...``, ``navix/...``, ``jumanji/...``)."""
    import gymnax

    suites = [i for suite in registry.SUITES.values() for i in suite.known_ids()]
    return [*gymnax.registered_envs, *registry.registered_ids(), *brax.known_ids(), *suites]


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` listing the known ids when ``env_id`` is unknown (for a host env:
    naming the missing package or the unknown id)."""
    if is_host_env(env_id):
        return check_host_env_id(env_id)
    import gymnax

    if env_id in gymnax.registered_envs:  # without importing brax (seconds) for a gymnax id
        return
    if registry.suite_of(env_id) is not None:
        return registry.check_suite_id(env_id)
    if env_id.startswith(brax.PREFIX):
        if not brax.available():
            raise ValueError(f"{env_id!r} needs the optional extra: pip install "
                             "'jaxrl_async[brax]'")
        if env_id in brax.known_ids():
            return
    elif registry.is_registered(env_id):
        return
    suites = [prefix + "<id>" for prefix in registry.SUITES]  # listed without importing them
    known = [*gymnax.registered_envs, *registry.registered_ids(), *brax.known_ids(), *suites]
    raise ValueError(registry.unknown_message(env_id, known))


def _gymnax_ids() -> list[str]:
    import gymnax

    return gymnax.registered_envs


@functools.cache
def _gymnax(env_id: str, env_kwargs: tuple = ()) -> tuple[Any, Any, EnvSpec]:
    """The gymnax env, its params and spec (cached). Built under ``ensure_compile_time_eval``:
    the arrays an env's ``__init__`` makes (MinAtar's, bsuite's) are then concrete even when
    the first call comes from inside a ``jit``/``vmap`` trace, so the cached env never holds
    a tracer that a later trace would reuse."""
    import gymnax

    check_env_id(env_id)
    with jax.ensure_compile_time_eval():
        env, params = gymnax.make(env_id, **dict(env_kwargs))
        return env, params, spec_from_gymnax(env_id, env, params)


def env_spec(env_id: str, *, flatten_obs: bool = False) -> EnvSpec:
    """The spec of ``make_env(env_id, flatten_obs=...)`` without building wrappers (of
    ``make_host_env`` for a host env)."""
    if is_host_env(env_id):
        return host_env_spec(env_id, flatten_obs=flatten_obs)
    return make_env(env_id, flatten_obs=flatten_obs).spec


def make_env(
    env_id: str,
    *,
    flatten_obs: bool = False,
    normalize_obs: bool = False,
    clip_action: bool = True,
    episode_stats: bool = True,
    normalize_reward: bool = False,
    gamma: Any = 0.99,
    obs_clip: Any = 10.0,
    reward_clip: Any = 10.0,
    **env_kwargs: Any,
) -> VecEnv:
    """A batched, auto-resetting env: gymnax ``env_id`` under the requested wrappers.

    Wrapper order, inner to outer: flatten, clip action (continuous only), episode statistics,
    reward normalisation (``gamma``, clipped to ``reward_clip``; episode returns stay raw),
    observation normalisation (outermost, so its statistics see what the agent sees; clipped to
    ``obs_clip``).
    ``brax/<name>`` ids take ``episode_length`` and ``backend`` as ``env_kwargs``; a suite id
    its suite's (docs/envs.md); a registered id passes them to its factory.
    """
    vec: VecEnv
    if is_host_env(env_id):
        raise ValueError(f"{env_id!r} is a host env, stepped by Python threads and not inside a "
                         "JAX program: train it with runner=AsyncConfig(...), or make it with "
                         "jaxrl_async.envs.make_host_env")
    kwargs = tuple(sorted(env_kwargs.items()))
    suite = registry.suite_of(env_id)
    if env_id.startswith(brax.PREFIX) or suite is not None:
        check_env_id(env_id)
        vec = (suite or brax).make(env_id, kwargs)
        spec = vec.spec
    elif env_id not in _gymnax_ids() and registry.is_registered(env_id):
        vec = registry.make_registered(env_id, kwargs)
        spec = vec.spec
    else:
        env, params, spec = _gymnax(env_id, kwargs)
        vec = GymnaxVecEnv(env, params, spec)
    if flatten_obs and len(spec.obs_shape) > 1:
        vec = FlattenObservation(vec)
    if clip_action and not spec.discrete:
        vec = ClipAction(vec)
    if episode_stats:
        vec = EpisodeStatistics(vec)
    if normalize_reward:
        vec = NormalizeReward(vec, gamma, reward_clip)
    if normalize_obs:
        vec = NormalizeObservation(vec, obs_clip)
    return vec
