"""Experience replay on the device: one ring of transitions per env, sampled per env.

The buffer lives in the learner state (wrapped in ``PerEnv``), so under both runners ``learn``
inserts its trajectory and then takes a fixed number of sampled gradient steps: the
samples-per-insert ratio is set by the config and cannot drift with actor or learner speed.

Ours rather than flashbax's trajectory buffer (``experiments/bench/bench_replay.py`` compares them;
the figures are in docs/results.md):

- less work per call: insert is one ``dynamic_update_slice`` per leaf (the per-env capacity is a
  multiple of the rollout length, so an insert never wraps) where flashbax scatters to modular
  indices, and a batch gathers only what the n-step target needs;
- every env draws its samples with its own key, ``fold_in(key, global env id)``, so a batch is
  the same whether the envs (and their rings) sit on one device or are split over several;
  flashbax draws (row, time) pairs with one key over the rows it holds;
- counters are per env (``PerEnv`` gives every leaf the env axis), so the buffer shards with the
  envs without special cases.

Layout after ``runners.common.with_env_axis``: every leaf of ``data`` is ``[B, C, ...]`` (env,
slot), C slots per env written in time order; ``pos``, ``size`` and ``inserted`` are ``[B]``
and equal for every env (all envs insert together).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax import lax

from jaxrl_async.algos.base import Trajectory
from jaxrl_async.algos.returns import n_step_return
from jaxrl_async.config.shared import TrainConfig, config, fail, positive, positive_int, static


class Replay(NamedTuple):
    data: Any  # leaves [B, C, ...]
    pos: jax.Array  # [B] int32 next slot to write
    size: jax.Array  # [B] int32 slots holding data (<= C)
    inserted: jax.Array  # [B] int32 items inserted into the env's ring, ever (counted)
    sampled: jax.Array  # [B] int32 items drawn from it by the gradient steps that ran, ever


class Transition(NamedTuple):
    """What the replay keeps of a trajectory step (``next_obs`` is the true, pre-reset one)."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: jax.Array
    env_id: jax.Array | int = 0  # global id of the env that took the step
    step: jax.Array | int = 0  # the env's step index (``Trajectory.step``): a jump is a gap


def transitions(traj: Trajectory) -> Transition:
    """The ``[T, B]`` transitions of a trajectory."""
    if traj.step is None:
        raise ValueError("replay needs Trajectory.step (the env's step index) to find gaps")
    return Transition(traj.obs, traj.action, traj.reward, traj.terminated, traj.truncated,
                      traj.next_obs, traj.env_id, traj.step)


def init(item: Any, capacity: int) -> Replay:
    """ONE env's empty ring of ``capacity`` slots shaped like ``item`` (no batch axes)."""
    data = jax.tree.map(lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.asarray(x).dtype),
                        item)
    zero = jnp.zeros((), jnp.int32)
    return Replay(data, zero, zero, zero, zero)


def capacity(replay: Replay) -> int:
    return jax.tree.leaves(replay.data)[0].shape[1]


def insert(replay: Replay, items: Any) -> Replay:
    """Append ``items`` (leaves ``[T, B, ...]``, time-major like a trajectory) to every env's
    ring, overwriting the oldest slots once full."""
    num_items = jax.tree.leaves(items)[0].shape[0]
    slots = capacity(replay)
    chex.assert_trees_all_equal_structs(items, replay.data)
    pos = replay.pos[0]
    if slots % num_items == 0:  # never wraps: pos is a multiple of T
        write = lambda buf, new: lax.dynamic_update_slice_in_dim(buf, new, pos, axis=1)
    else:
        where = (pos + jnp.arange(num_items)) % slots
        write = lambda buf, new: buf.at[:, where].set(new)
    data = jax.tree.map(lambda buf, new: write(buf, jnp.swapaxes(new, 0, 1).astype(buf.dtype)),
                        replay.data, items)
    return Replay(
        data,
        (replay.pos + num_items) % slots,
        jnp.minimum(replay.size + num_items, slots),
        replay.inserted + num_items,
        replay.sampled,
    )


def sample(
    replay: Replay, key: jax.Array, env_id: jax.Array, per_env: int, window: int = 1
) -> jax.Array:
    """``[B, per_env]`` slots starting windows of ``window`` consecutive transitions, uniform
    over the windows that lie in written slots (none crosses the write position). Env ``b``
    draws with ``fold_in(key, env_id[b])``. Needs ``size >= window``."""
    slots = capacity(replay)

    def one_env(env: jax.Array, pos: jax.Array, size: jax.Array) -> jax.Array:
        start = jax.random.randint(jax.random.fold_in(key, env), (per_env,), 0,
                                   size - window + 1)  # logical: 0 is the oldest item
        return (pos - size + start) % slots

    return jax.vmap(one_env)(env_id, replay.pos, replay.size)


def gather(replay: Replay, slots: jax.Array) -> Any:
    """The items at ``slots [B, ...]`` (taken modulo the capacity) of each env's ring."""
    size = capacity(replay)
    return jax.tree.map(lambda buf: jax.vmap(lambda b, s: b[s % size])(buf, slots), replay.data)


# --------------------------------------------------------------------------- off-policy learning
@config
class OffPolicyConfig(TrainConfig):
    """Fields of the algorithms that learn from the replay buffer."""

    buffer_size: int = static(100_000, positive_int)
    """Replay capacity in transitions over all envs (each env keeps buffer_size / num_envs)."""
    batch_size: int = static(128, positive_int)
    """Transitions per gradient step (each env's ring gives batch_size / num_envs)."""
    samples_per_insert: float = static(32.0, positive)
    """Transitions sampled per transition inserted: every update inserts num_envs * num_steps
    and then takes samples_per_insert * num_envs * num_steps / batch_size gradient steps."""
    learning_starts: int = static(1_000, positive_int)
    """Transitions (over all envs) in the buffer before the first gradient step."""
    n_step: int = static(1, positive_int)
    """Steps of the n-step return (stopped at episode ends; truncation bootstraps)."""

    name = "off_policy"

    @property
    def capacity_per_env(self) -> int:
        return self.buffer_size // self.num_envs

    @property
    def gradient_steps(self) -> int:
        """Gradient steps per update (a whole number, checked in ``validate``)."""
        return round(self.samples_per_insert * self.steps_per_update / self.batch_size)

    def validate(self) -> None:
        super().validate()
        if self.buffer_size % self.num_envs or self.capacity_per_env % self.num_steps:
            fail(self, "buffer_size", f"must be a multiple of num_envs * num_steps = "
                 f"{self.steps_per_update} (each env's ring holds whole rollouts)")
        if self.capacity_per_env < max(self.n_step, self.num_steps):
            fail(self, "buffer_size", "must hold at least n_step and num_steps transitions per env")
        if self.batch_size % self.num_envs:
            fail(self, "batch_size", f"must be a multiple of num_envs = {self.num_envs} (every "
                 "env's ring gives the same number of samples)")
        steps = self.samples_per_insert * self.steps_per_update / self.batch_size
        if steps < 1 or abs(steps - round(steps)) > 1e-9:
            fail(self, "samples_per_insert", f"must make samples_per_insert * num_envs * "
                 f"num_steps / batch_size (gradient steps per update) a positive integer, it "
                 f"is {steps:g}")
        if self.learning_starts < self.n_step * self.num_envs:
            fail(self, "learning_starts", f"must be >= n_step * num_envs = "
                 f"{self.n_step * self.num_envs} (a whole window in every env's ring)")
        if self.learning_starts > self.buffer_size:
            fail(self, "learning_starts", f"must be <= buffer_size = {self.buffer_size}")


class Batch(NamedTuple):
    """Sampled n-step transitions, leaves ``[N, ...]`` with N = local envs * samples per env."""

    obs: jax.Array  # [N, *obs]
    action: jax.Array  # [N, *action]
    n_step_return: jax.Array  # [N] discounted rewards up to the bootstrap step
    discount: jax.Array  # [N] gamma^k (0 where the episode terminated inside the window)
    next_obs: jax.Array  # [N, *obs] the observation to bootstrap from
    key: jax.Array  # [N] a key per sample (device-count invariant)


def sample_batch(replay: Replay, key: jax.Array, env_id: jax.Array, cfg: OffPolicyConfig
                 ) -> Batch:
    """``batch_size / num_envs`` n-step windows of every local env, flattened."""
    per_env = cfg.batch_size // cfg.num_envs
    sample_key, noise_key = jax.random.split(key)
    slots = sample(replay, sample_key, env_id, per_env, cfg.n_step)  # [B, K]
    obs, action, ret, discount, next_obs = n_step_windows(replay, slots, cfg.n_step, cfg.gamma)
    keys = jax.vmap(lambda e: jax.random.split(jax.random.fold_in(noise_key, e), per_env))(env_id)
    flat = lambda x: x.reshape(-1, *x.shape[2:])
    return Batch(flat(obs), flat(action), flat(ret), flat(discount), flat(next_obs), flat(keys))


def n_step_windows(replay: Replay, slots: jax.Array, n: int, gamma: float | jax.Array
                   ) -> tuple[jax.Array, ...]:
    """``(obs, action, n-step return, discount, next_obs)`` of the windows starting at
    ``slots [B, K]``, each ``[B, K, ...]``. A window ends at an episode's end and at a gap in
    the env's steps (rollouts dropped in between): there it bootstraps from the stored
    ``next_obs``, the true next observation, as at a truncation."""
    d = replay.data
    reward, terminated, truncated, step = gather(
        replay._replace(data=(d.reward, d.terminated, d.truncated, d.step)),
        slots[..., None] + jnp.arange(n))  # [B, K, n] each
    gap = jnp.concatenate([step[..., 1:] != step[..., :-1] + 1,
                           jnp.zeros_like(truncated[..., :1])], -1)  # a jump after step k
    ret, discount, last = n_step_return(reward, terminated, truncated | gap, gamma)
    obs, action = gather(replay._replace(data=(d.obs, d.action)), slots)
    next_obs = gather(replay._replace(data=d.next_obs), slots + last)
    return obs, action, ret, discount, next_obs


def insert_then_train(
    gradient_step: Callable[[Any, Batch], tuple[Any, dict]],
    train_state: Any,
    replay: Replay,
    traj: Trajectory,
    key: jax.Array,
    cfg: OffPolicyConfig,
) -> tuple[Any, Replay, dict]:
    """Insert ``traj`` and take ``cfg.gradient_steps`` steps of ``gradient_step`` on sampled
    batches, once the buffer holds ``learning_starts`` transitions. Metrics are the mean over
    the steps (zeros before learning starts), and ``samples_per_insert``: the rows the steps
    that ran drew over the rows this update inserted (counted, per env)."""
    before = replay.inserted
    replay = insert(replay, transitions(traj))
    env_id = traj.env_id[0]  # [B] global ids
    ready = replay.size[0] * cfg.num_envs >= cfg.learning_starts

    def train(state: Any) -> tuple[Any, jax.Array, dict]:
        def step(carry: tuple[Any, jax.Array], step_key: jax.Array):
            state, drawn = carry
            batch = sample_batch(replay, step_key, env_id, cfg)
            state, metrics = gradient_step(state, batch)
            return (state, drawn + batch.obs.shape[0] // env_id.shape[0]), metrics

        (state, drawn), metrics = lax.scan(step, (state, jnp.zeros((), jnp.int32)),
                                           jax.random.split(key, cfg.gradient_steps))
        return state, drawn, jax.tree.map(jnp.mean, metrics)

    def wait(state: Any) -> tuple[Any, jax.Array, dict]:
        shapes = jax.eval_shape(train, state)[2]
        return (state, jnp.zeros((), jnp.int32),
                jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))

    train_state, drawn, metrics = lax.cond(ready, train, wait, train_state)  # drawn: per env
    replay = replay._replace(sampled=replay.sampled + drawn)
    metrics = {
        **metrics,
        "samples_per_insert": drawn / (replay.inserted - before)[0],
        "replay_size": (replay.size[0] * cfg.num_envs).astype(jnp.float32),
    }
    return train_state, replay, metrics
