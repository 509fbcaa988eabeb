"""What both runners share: the run state, the per-update keys, the metrics of one update."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.algos import Algorithm, make_algorithm
from jaxrl_async.algos.base import is_per_env, with_env_axis
from jaxrl_async.envs import VecEnv, make_env
from jaxrl_async.rollout import EnvCarry, EpisodeSums, episode_metrics, reset


class RunState(NamedTuple):
    """Everything a run continues from (checkpointed whole)."""

    learner: Any  # the algorithm's learner state (identical on every learner device, but for
    #               its ``PerEnv`` parts, which have the env axis and are split like ``env``)
    env: EnvCarry  # env states and observations, leading axis num_envs
    key: jax.Array  # the run's base key; update k uses fold_in(key, k)
    update: jax.Array  # [] int32 updates done
    last_episode: jax.Array  # [2] last mean (return, length), carried when no episode ends


class TrainResult(NamedTuple):
    """What training returns under either runner."""

    state: RunState
    metrics: dict[str, Any]  # one row per update: [num_updates] each
    timing: dict[str, float] | None = None  # host-level runs: compile_s, train_s, sps

    @property
    def params(self) -> Any:
        return self.state.learner.params


class Callbacks:
    """What a host-level runner reports, at its edge (sinks and progress subclass this)."""

    def on_start(self, first_update: int) -> None:
        """Compilation is done; training starts at update ``first_update``."""

    def on_metrics(self, first_update: int, rows: dict[str, np.ndarray]) -> None:
        """Metrics of updates ``first_update + 1 ...``, one row per update."""

    def on_state(self, state: RunState, final: bool) -> None:
        """The run state after a chunk of updates (``final`` after the last one). Runners may
        donate ``state``'s buffers to the next chunk: copy what you keep before returning."""


def build(cfg: Any) -> tuple[VecEnv, Algorithm]:
    """The env and algorithm a config describes (hyperparameters may be traced)."""
    env = make_env(cfg.env, flatten_obs=cfg.flatten_obs, normalize_obs=cfg.normalize_obs)
    return env, make_algorithm(cfg, env.spec)


def update_keys(base_key: jax.Array, update: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(rollout key, learn key) of update number ``update``: the same under every runner."""
    k = jax.random.split(jax.random.fold_in(base_key, update))
    return k[0], k[1]


def init_state(env: VecEnv, algo: Algorithm, key: jax.Array, env_id: jax.Array) -> RunState:
    """A fresh run: learner init (``PerEnv`` parts copied for each env of ``env_id``) and env
    reset of the envs ``env_id``."""
    init_key, reset_key, run_key = jax.random.split(key, 3)
    return RunState(
        learner=with_env_axis(algo.init(init_key), env_id.shape[0]),
        env=reset(env, algo, reset_key, env_id),
        key=run_key,
        update=jnp.zeros((), jnp.int32),
        last_episode=jnp.full((2,), jnp.nan, jnp.float32),
    )


def learner_spec(algo: Algorithm, per_env: Any, replicated: Any) -> Any:
    """A sharding-spec prefix of ``algo``'s learner state: ``per_env`` for its ``PerEnv`` parts
    (split with the envs over devices), ``replicated`` for the rest."""
    shapes = jax.eval_shape(algo.init, jax.random.key(0))
    return jax.tree.map(lambda x: per_env if is_per_env(x) else replicated, shapes,
                        is_leaf=is_per_env)


def update_metrics(
    state: RunState, sums: EpisodeSums, learn_metrics: dict, steps_per_update: int
) -> tuple[dict, jax.Array]:
    """Scalar metrics of one update and the new ``last_episode``."""
    episodes = episode_metrics(sums, state.last_episode[0], state.last_episode[1])
    metrics = {
        "env_steps": (state.update + 1).astype(jnp.float32) * steps_per_update,
        **episodes,
        **learn_metrics,
    }
    return metrics, jnp.stack([episodes["episode_return"], episodes["episode_length"]])


def compiler_options(cfg: Any) -> dict[str, Any]:
    """XLA options for the host-level runners' compiles (``cfg.fast_compile`` on a CPU)."""
    if cfg.fast_compile and jax.default_backend() == "cpu":
        return {"xla_cpu_use_fusion_emitters": False}
    return {}


def check_devices(field: str, wanted: int, cfg: Any) -> None:
    """``ValueError`` naming ``field`` when more devices are wanted than exist."""
    have = jax.local_device_count()
    if wanted > have:
        raise ValueError(
            f"{type(cfg).__name__}.runner.{field} must be <= the {have} local device(s), got "
            f"{wanted} (on a CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N "
            "before importing jax)"
        )


def to_numpy(tree: Any) -> Any:
    return jax.tree.map(np.asarray, jax.device_get(tree))
