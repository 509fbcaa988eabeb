"""What both runners share: the run state, the per-update keys, the metrics of one update."""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh

from jaxrl_async.algos import Algorithm, Trajectory, make_algorithm
from jaxrl_async.algos.base import is_per_env, with_env_axis
from jaxrl_async.envs import VecEnv, make_env, merge_moments, obs_sums, set_moments
from jaxrl_async.rollout import EnvCarry, EpisodeSums, episode_metrics, reset, rollout

AXIS = "devices"


class RunState(NamedTuple):
    """Everything a run continues from (checkpointed whole)."""

    learner: Any  # the algorithm's learner state (identical on every learner device, but for
    #               its ``PerEnv`` parts, which have the env axis and are split like ``env``)
    env: EnvCarry  # env states and observations, leading axis num_envs
    key: jax.Array  # the run's base key; update k uses fold_in(key, k)
    update: jax.Array  # [] int32 updates done
    last_episode: jax.Array  # [2] mean (return, length) of the latest update in which an
    #                          episode ended (NaN before); informative only, no metric uses it
    # The async runner's deterministic schedule: the (packed) params the actors act with at
    # update ``update`` when they are older than the learner's (lag, sync_every); () otherwise.
    behaviour_params: Any = ()
    # normalize_obs: the observation statistics of the whole run (one copy, no env axis), merged
    # from every shard's sums once per rollout (``merge_obs_statistics``) and set back into the
    # env state, which acts with them; () otherwise.
    obs_moments: Any = ()


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

    def on_state(self, state: RunState, final: bool, update: int | None = None) -> None:
        """The run state after a chunk of updates, ``update`` updates done (``None``: read
        ``state.update``, which waits for the chunk). ``final`` after the last chunk, or the
        last one before a Ctrl-C stop. Runners may donate ``state``'s buffers to the next
        chunk: copy what you keep before returning."""


class TrainingInterrupted(KeyboardInterrupt):
    """Raised by a runner stopped by Ctrl-C, after its callbacks saw the final state."""

    def __init__(self, result: TrainResult):
        super().__init__(f"training stopped by Ctrl-C after update {int(result.state.update)}")
        self.result = result


class StopOnInterrupt:
    """Ctrl-C handling for every host-level runner (the one place it lives).

    Inside ``with StopOnInterrupt() as stop:`` the first SIGINT only sets ``stop.requested``;
    the runner then finishes the chunk in flight, passes its state to
    ``callbacks.on_state(..., final=True)`` (so a checkpoint sink writes it), delivers the
    metrics, and raises ``TrainingInterrupted``. A second Ctrl-C raises ``KeyboardInterrupt`` at
    once. Outside the main thread (where Python cannot take signals) it never triggers.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> StopOnInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def runner_module(cfg: Any) -> Any:
    """The module of ``cfg``'s runner: ``jaxrl_async.runners.sync`` or ``.async_``. Besides
    ``run(cfg, key, callbacks, state=None)``, a runner whose state is not laid out like
    ``init_state``'s may define ``abstract_state(cfg)`` (checkpoints are checked and restored
    against it)."""
    name = {"sync": "sync", "async": "async_"}[cfg.runner.name]
    return importlib.import_module(f"jaxrl_async.runners.{name}")


def build(cfg: Any) -> tuple[VecEnv, Algorithm]:
    """The env and algorithm a config describes (hyperparameters may be traced)."""
    env = make_env(cfg.env, flatten_obs=cfg.flatten_obs, normalize_obs=cfg.normalize_obs)
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
                                                  obs_sums(env_carry.env_state), axis_name)
    return RunState(
        learner=with_env_axis(algo.init(init_key), env_id.shape[0]),
        env=env_carry,
        key=run_key,
        update=jnp.zeros((), jnp.int32),
        last_episode=jnp.full((2,), jnp.nan, jnp.float32),
        obs_moments=moments,
    )


def merge_obs_statistics(carry: EnvCarry, moments: Any, sums: Any,
                         axis_name: str | None = None) -> tuple[EnvCarry, Any]:
    """normalize_obs: (carry acting with the new moments, new moments), the sums of raw
    observations ``sums`` (of this shard; summed over ``axis_name``) merged into the run's
    ``moments``. Both runners call it once per rollout, so every shard acts with the statistics
    of all envs. ``(carry, ())`` unchanged when not normalising (``moments == ()``)."""
    if moments == ():
        return carry, moments
    if axis_name:
        sums = lax.psum(sums, axis_name)
    moments = merge_moments(moments, sums)
    return with_moments(carry, moments), moments


def with_moments(carry: EnvCarry, moments: Any) -> EnvCarry:
    """The carry acting with observation statistics ``moments`` (unchanged for ())."""
    if moments == ():
        return carry
    obs, env_state = set_moments(carry.obs, carry.env_state, moments)
    return carry._replace(obs=obs, env_state=env_state)


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


def compiler_options(cfg: Any) -> dict[str, Any]:
    """XLA options for the host-level runners' compiles (``cfg.fast_compile`` on a CPU)."""
    if cfg.fast_compile and jax.default_backend() == "cpu":
        return {"xla_cpu_use_fusion_emitters": False}
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
