"""What both runners compute alike: the env and algorithm of a config, the per-update keys, a
rollout and an update, the run's first state, the metrics of one update."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh

from jaxrl_async.algos import Algorithm, Trajectory, make_algorithm
from jaxrl_async.algos.base import PerEnv, is_per_env
from jaxrl_async.envs import VecEnv, make_env, merge_moments, normalize, obs_sums, set_moments
from jaxrl_async.runners.rollout import (
    EnvCarry,
    EpisodeSums,
    episode_metrics,
    reset,
    rollout,
    run_episodes,
)
from jaxrl_async.runners.state import RunState

AXIS = "devices"
EVAL_METRICS = ("eval_return", "eval_length")
_EVAL_STREAM = 0x5EED  # folded into an update's key: evaluation keys apart from training's


def build(cfg: Any) -> tuple[VecEnv, Algorithm]:
    """The env and algorithm a config describes (hyperparameters may be traced)."""
    env = make_env(cfg.env, flatten_obs=cfg.flatten_obs, normalize_obs=cfg.normalize_obs,
                   normalize_reward=cfg.normalize_reward, gamma=cfg.gamma, obs_clip=cfg.obs_clip,
                   reward_clip=cfg.reward_clip)
    return env, make_algorithm(cfg, env.spec)


def update_keys(base_key: jax.Array, update: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(rollout key, learn key) of update number ``update``: the same under every runner."""
    k = jax.random.split(jax.random.fold_in(base_key, update))
    return k[0], k[1]


def collect(
    env: VecEnv,
    algo: Algorithm,
    params: Any,
    carry: EnvCarry,
    run_key: jax.Array,
    update: jax.Array,
    num_steps: int,
    env_id: jax.Array,
    policy_version: jax.Array,
) -> tuple[EnvCarry, Trajectory, EpisodeSums]:
    """The rollout of update number ``update`` (its keys come from ``update_keys``; its steps
    are numbered from ``update * num_steps``)."""
    rollout_key, _ = update_keys(run_key, update)
    return rollout(env, algo, params, carry, rollout_key, num_steps, env_id, policy_version,
                   jnp.asarray(update, jnp.int32) * num_steps)


def eval_key(run_key: jax.Array, updates_done: jax.Array | int) -> jax.Array:
    """The key of the evaluation after ``updates_done`` updates (``jra.evaluate(..., key=)``
    with it reproduces that evaluation): folded from the update's key on a stream of its own,
    so evaluating never changes training."""
    return jax.random.fold_in(jax.random.fold_in(run_key, updates_done), _EVAL_STREAM)


def evaluation(cfg: Any, algo: Algorithm, axis_name: str | None = None,
               num_shards: int = 1) -> Callable[[RunState], dict] | None:
    """``state -> {"eval_return", "eval_length"}``: the mean over ``cfg.eval_episodes`` fresh
    episodes of the policy of ``state`` (as ``jra.evaluate`` with ``eval_key``), or ``None``
    when ``cfg.eval_every`` is 0. With ``axis_name`` (``num_shards`` devices along it) the
    episodes are split over the devices when they divide them (global env ids: the same
    episodes), else every device runs them all."""
    if not cfg.eval_every:
        return None
    env = make_env(cfg.env, flatten_obs=cfg.flatten_obs, normalize_obs=False)
    episodes = cfg.eval_episodes
    split = axis_name is not None and episodes % num_shards == 0
    local = episodes // num_shards if split else episodes
    max_steps = env.spec.max_episode_steps or 10_000

    def evaluate(state: RunState) -> dict:
        offset = lax.axis_index(axis_name) * local if split else 0
        ids = offset + jnp.arange(local, dtype=jnp.int32)
        moments = state.obs_moments
        observe = ((lambda obs: normalize(obs, moments, cfg.obs_clip)) if cfg.normalize_obs
                   else None)
        returns, lengths, _ = run_episodes(env, algo, algo.policy_params(state.learner),
                                           eval_key(state.key, state.update), ids,
                                           cfg.eval_greedy, max_steps, observe)
        sums = jnp.stack([returns.sum(), lengths.sum()])
        if split:
            sums = lax.psum(sums, axis_name)
        return dict(zip(EVAL_METRICS, sums / episodes))

    return evaluate


def with_evaluation(cfg: Any, evaluate: Callable | None, state: Any, metrics: dict,
                    updates_done: jax.Array) -> dict:
    """``metrics`` with ``evaluate(state)``'s (``state``: whatever ``evaluate`` takes) when
    ``updates_done`` is a multiple of ``cfg.eval_every`` or the last update, NaN otherwise (a
    ``lax.cond``: evaluation costs nothing between evaluations; ``updates_done`` must not be
    batched, or ``vmap`` turns the cond into a select that evaluates every update).
    ``metrics`` unchanged without evaluation."""
    if evaluate is None:
        return metrics
    due = (updates_done % cfg.eval_every == 0) | (updates_done == cfg.num_updates)
    shapes = jax.eval_shape(evaluate, state)

    def skipped(_: Any) -> dict:
        return jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)

    return {**metrics, **lax.cond(due, evaluate, skipped, state)}


def learn_update(
    algo: Algorithm,
    state: RunState,
    traj: Trajectory,
    sums: EpisodeSums,
    steps_per_update: int,
    axis_name: str | None = None,
) -> tuple[RunState, dict]:
    """One learner update on ``traj`` (``sums``: its finished episodes, over all envs), with the
    learn key of update ``state.update``; ``state.env`` is passed through untouched."""
    _, learn_key = update_keys(state.key, state.update)
    learner, learn_metrics = algo.learn(state.learner, traj, learn_key, axis_name)
    metrics, last_episode = update_metrics(state, sums, learn_metrics, steps_per_update)
    state = state._replace(learner=learner, update=state.update + 1, last_episode=last_episode)
    return state, metrics


def init_state(env: VecEnv | None, algo: Algorithm, key: jax.Array, env_id: jax.Array,
               reset_envs: Callable[[jax.Array, jax.Array], Any] | None = None,
               axis_name: str | None = None) -> RunState:
    """A fresh run: learner init (``PerEnv`` parts copied for each env of ``env_id``) and env
    reset of the envs ``env_id`` (by ``reset_envs(reset_key, env_id)`` when given: host envs
    keep their reset seeds there). With ``axis_name`` the envs are one shard of those over it
    (observation statistics merge over it)."""
    init_key, reset_key, run_key = jax.random.split(key, 3)
    if reset_envs is None:
        env_carry = reset(env, algo, reset_key, env_id)
    else:
        env_carry = reset_envs(reset_key, env_id)
    moments: Any = ()
    if isinstance(env_carry, EnvCarry) and hasattr(env_carry.env_state, "moments"):
        first = jax.tree.map(lambda x: x[0], env_carry.env_state.moments)  # normalize_obs
        env_carry, moments = merge_obs_statistics(env_carry, first,
                                                  obs_sums(env_carry.env_state), axis_name,
                                                  env.clip)  # the NormalizeObservation's
    return RunState(
        learner=with_env_axis(algo.init(init_key), env_id.shape[0]),
        env=env_carry,
        key=run_key,
        update=jnp.zeros((), jnp.int32),
        last_episode=jnp.full((2,), jnp.nan, jnp.float32),
        obs_moments=moments,
    )


def merge_obs_statistics(carry: EnvCarry, moments: Any, sums: Any,
                         axis_name: str | None = None, clip: Any = 10.0) -> tuple[EnvCarry, Any]:
    """normalize_obs: (carry acting with the new moments, new moments), the sums of raw
    observations ``sums`` (of this shard; summed over ``axis_name``) merged into the run's
    ``moments``. Both runners call it once per rollout, so every shard acts with the statistics
    of all envs. ``(carry, ())`` unchanged when not normalising (``moments == ()``)."""
    if moments == ():
        return carry, moments
    if axis_name:
        sums = lax.psum(sums, axis_name)
    moments = merge_moments(moments, sums)
    return with_moments(carry, moments, clip), moments


def with_moments(carry: EnvCarry, moments: Any, clip: Any = 10.0) -> EnvCarry:
    """The carry acting with observation statistics ``moments`` (unchanged for ()), its
    current observations clipped to ``clip`` (``obs_clip``)."""
    if moments == ():
        return carry
    obs, env_state = set_moments(carry.obs, carry.env_state, moments, clip)
    return carry._replace(obs=obs, env_state=env_state)


def with_env_axis(state: Any, num_envs: int) -> Any:
    """``state`` with every ``PerEnv`` part copied for ``num_envs`` envs (leading axis)."""

    def expand(x: Any) -> Any:
        if not is_per_env(x):
            return x
        return PerEnv(jax.tree.map(lambda v: jnp.broadcast_to(v, (num_envs, *v.shape)), x.value))

    return jax.tree.map(expand, state, is_leaf=is_per_env)


def learner_spec(algo: Algorithm, per_env: Any, replicated: Any) -> Any:
    """A sharding-spec prefix of ``algo``'s learner state: ``per_env`` for its ``PerEnv`` parts
    (split with the envs over devices), ``replicated`` for the rest."""
    shapes = jax.eval_shape(algo.init, jax.random.key(0))
    return jax.tree.map(lambda x: per_env if is_per_env(x) else replicated, shapes,
                        is_leaf=is_per_env)


def update_metrics(
    state: RunState, sums: EpisodeSums, learn_metrics: dict, steps_per_update: int
) -> tuple[dict, jax.Array]:
    """Scalar metrics of one update (``episode_return`` NaN when no episode ended in it) and the
    new ``last_episode``."""
    episodes = episode_metrics(sums)
    metrics = {
        "env_steps": (state.update + 1).astype(jnp.float32) * steps_per_update,
        **episodes,
        **learn_metrics,
    }
    latest = jnp.stack([episodes["episode_return"], episodes["episode_length"]])
    return metrics, jnp.where(sums.count > 0, latest, state.last_episode)


def xla_option_probe(x: jax.Array) -> jax.Array:
    """The program ``xla_option_known`` compiles (``count_compiles`` leaves it out)."""
    return x + 1


@functools.cache
def xla_option_known(name: str, value: Any) -> bool:
    """Whether the running jaxlib's default backend accepts the XLA compile option ``name``
    (probed once by compiling a one-op program with it). Options come and go between jaxlib
    versions: jaxlib 0.11 dropped ``xla_cpu_use_fusion_emitters``, which 0.10 has."""
    try:
        jax.jit(xla_option_probe).lower(np.float32(0)).compile({name: value})
    except jax.errors.JaxRuntimeError as error:
        if "No such compile option" in str(error):
            return False
        raise
    return True


def known_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` less those the running jaxlib does not have (``xla_option_known``)."""
    return {name: value for name, value in options.items() if xla_option_known(name, value)}


def compiler_options(cfg: Any, *, runs_once: bool = False) -> dict[str, Any]:
    """XLA options for the host-level runners' compiles (``cfg.fast_compile`` on a CPU).
    ``runs_once``: a program run once per run (init), where compile time is all that counts:
    XLA:CPU's legacy emitters, which compile it in about 2/3 of the time to the same bits.
    Only jaxlib < 0.11 has them; on a jaxlib without them these are the default options."""
    if (cfg.fast_compile or runs_once) and jax.default_backend() == "cpu":
        return known_options({"xla_cpu_use_fusion_emitters": False})
    return {}


def check_devices(field: str, wanted: int, cfg: Any, *, local: bool = True) -> None:
    """``ValueError`` naming ``field`` when more devices are wanted than exist (this process's
    devices, or with ``local=False`` those of all processes of a distributed run)."""
    have = jax.local_device_count() if local else jax.device_count()
    if wanted > have:
        where = "local" if local else "global (all processes)"
        raise ValueError(
            f"{type(cfg).__name__}.runner.{field} must be <= the {have} {where} device(s), got "
            f"{wanted} (on a CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N "
            "before importing jax)"
        )


def spmd(fn: Callable, devices: Sequence[Any], in_specs: Any, out_specs: Any) -> Callable:
    """``fn`` itself on one device, else ``shard_map``-ed over ``devices`` along ``AXIS``."""
    if len(devices) == 1:
        return fn
    mesh = Mesh(np.array(devices), (AXIS,))
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def to_numpy(tree: Any) -> Any:
    return jax.tree.map(np.asarray, jax.device_get(tree))
