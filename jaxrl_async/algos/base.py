"""The algorithm contract: a trajectory in, pure ``init``/``act``/``learn`` functions out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from jaxrl_async.networks.heads import EpsilonGreedy


class Trajectory(NamedTuple):
    """``T`` steps of ``B`` envs. Every leaf has the leading axes ``[T, B]``."""

    obs: jax.Array  # [T, B, *obs_shape]
    action: jax.Array  # [T, B, *action_shape]
    reward: jax.Array  # [T, B]
    terminated: jax.Array  # [T, B] bool: a terminal state; do not bootstrap
    truncated: jax.Array  # [T, B] bool: a time limit; bootstrap from next_obs
    next_obs: jax.Array  # [T, B, *obs_shape] true next obs (the final one where an episode ended)
    extras: dict[str, jax.Array]  # [T, B, ...] what ``act`` returned (log_prob, value ...)
    env_id: jax.Array  # [T, B] int32 global index of the env (device-count-invariant shuffles)
    policy_version: jax.Array  # [T, B] int32 number of learner updates behind the acting params
    # [T, B] int32 the env's step index (rollout index * T + t): consecutive within an env's
    # data unless rollouts were dropped in between (free-running async), which replay cuts at
    step: Any = None


class Algorithm(NamedTuple):
    """An algorithm as pure functions, closed over its config and env spec.

    One calling convention for every policy, recurrent or not (a feedforward policy's memory is
    ``()``, and ``memoryless`` adapts a policy written without one):

    - ``init(key) -> state``: learner state (params, optimizer state, counters).
    - ``act(params, obs, key, memory, first) -> (action, extras, memory)``: behaviour policy for
      ONE observation (the rollout vmaps it over envs); ``extras`` go into
      ``Trajectory.extras``; ``memory`` is the policy's state before this step, to be reset
      where ``first`` (the first step of an episode).
    - ``learn(state, traj, key, axis_name=None) -> (state, metrics)``: one update from a
      ``[T, B]`` trajectory; with ``axis_name`` it all-reduces gradients and metrics over it.
    - ``policy_params(state) -> params``: what the actors need from the learner state.
    - ``init_memory() -> memory``: one env's initial memory; ``()`` for feedforward policies.
    - ``eval_act(params, obs, key, greedy, memory, first) -> (action, memory)``: the policy
      for evaluation, on ONE observation; ``greedy=True`` takes the distribution's mode (argmax,
      or the Gaussian mean), ``greedy=False`` samples as in training (no exploration schedule).
      Optional (``None``): ``jra.evaluate`` then needs ``greedy=False`` and falls back to
      ``act``.

    Learner state that belongs to the envs rather than to the learner (a replay buffer) is
    wrapped in ``PerEnv``: ``init`` returns ONE env's share, runners give every env its copy
    (``runners.common.with_env_axis``) and keep it with the env's shard (not replicated) over
    devices.
    """

    init: Callable[[jax.Array], Any]
    act: Callable[..., tuple[jax.Array, dict[str, jax.Array], Any]]
    learn: Callable[..., tuple[Any, dict[str, jax.Array]]]
    policy_params: Callable[[Any], Any] = lambda state: state.params
    init_memory: Callable[[], Any] = lambda: ()
    eval_act: Callable[..., tuple[jax.Array, Any]] | None = None


def memoryless(act: Callable[..., Any] | None, evaluation: bool = False) -> Any:
    """A feedforward policy in ``Algorithm``'s convention: ``act(params, obs, key) -> (action,
    extras)`` (or, with ``evaluation``, ``eval_act(params, obs, key, greedy) -> action``) taking
    and returning the (empty) memory it is given."""
    if act is None:
        return None
    if evaluation:
        return lambda params, obs, key, greedy, memory, first: (act(params, obs, key, greedy),
                                                                memory)

    def with_memory(params, obs, key, memory, first):
        action, extras = act(params, obs, key)
        return action, extras, memory

    return with_memory


def has_memory(algo: Algorithm) -> bool:
    """Whether ``algo``'s policy is recurrent (its memory has arrays)."""
    return bool(jax.tree.leaves(jax.eval_shape(algo.init_memory)))


class PerEnv(NamedTuple):
    """Per-env learner state (e.g. a replay buffer): ``init`` returns one env's share (no env
    axis); after ``runners.common.with_env_axis`` every leaf has the leading env axis ``B`` and
    ``learn`` sees the envs of its trajectory. Runners split it over devices with the envs."""

    value: Any


def is_per_env(x: Any) -> bool:
    return isinstance(x, PerEnv)


def rows(tree: Any) -> Any:
    """Leaves ``[T, B, ...]`` as rows ``[T*B, ...]`` (time-major). A learner's network applied
    to rows runs each layer's weight gradient as one plain matmul; on two batch axes XLA:CPU
    first transposes an operand of every one (a quarter of a vmapped PPO update's time,
    docs/results.md)."""
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), tree)


def on_rows(apply: Callable[[jax.Array], Any], x: jax.Array) -> Any:
    """``apply(x)`` for ``x [T, B, ...]`` computed on ``rows(x)``, its outputs reshaped back to
    ``[T, B, ...]``: for a loss that needs the time axis (V-trace)."""
    lead = x.shape[:2]
    return jax.tree.map(lambda y: y.reshape(*lead, *y.shape[1:]), apply(rows(x)))


# --------------------------------------------------------------------------- optimisers
def make_optimizer(
    max_grad_norm: Any, learning_rate: Any, kind: str = "adam", **kwargs: Any
) -> optax.GradientTransformation:
    """``kind`` (``"adam"`` or ``"rmsprop"``, with ``kwargs``) at ``learning_rate`` (a float or a
    schedule ``count -> rate``), after global-norm clipping at ``max_grad_norm`` (``None``: no
    clipping), on one flat vector: ``optax.flatten`` runs it as one kernel instead of one per
    leaf."""
    step = {"adam": optax.adam, "rmsprop": optax.rmsprop}[kind](learning_rate, **kwargs)
    if max_grad_norm is None:
        return optax.flatten(step)
    return optax.flatten(optax.chain(optax.clip_by_global_norm(max_grad_norm), step))


def linear_anneal(lr: Any, num_updates: int, steps_per_update: int = 1,
                  anneal: bool = True) -> Callable[[jax.Array], Any]:
    """The schedule ``count -> lr * (1 - updates done / num_updates)``, an update being
    ``steps_per_update`` optimiser steps (a constant ``lr`` when not ``anneal``)."""

    def learning_rate(count: jax.Array) -> Any:
        if not anneal:
            return lr
        return lr * (1.0 - (count // steps_per_update) / num_updates)

    return learning_rate


def linear_to_zero(lr: Any, total_steps: int, anneal: bool = True) -> optax.Schedule | Any:
    """``optax.linear_schedule`` from ``lr`` to 0 over ``total_steps`` optimiser steps, or the
    constant ``lr`` when not ``anneal``."""
    return optax.linear_schedule(lr, 0.0, total_steps) if anneal else lr


# --------------------------------------------------------------------------- policies
class EpsilonGreedyPolicy(NamedTuple):
    """Epsilon-greedy acting over a Q-network, for learner states with ``params`` and
    ``updates`` (learn calls so far, which set epsilon); the fields are ``Algorithm``'s."""

    epsilon: Callable[[jax.Array], jax.Array]  # updates -> epsilon
    act: Callable[..., Any]
    policy_params: Callable[[Any], Any]
    eval_act: Callable[..., Any]


def epsilon_greedy_policy(network: Any, cfg: Any) -> EpsilonGreedyPolicy:
    """Act epsilon-greedily on ``network``'s Q-values, epsilon falling linearly from
    ``cfg.eps_start`` to ``cfg.eps_end`` over ``cfg.eps_decay_fraction`` of the updates."""
    epsilon = optax.linear_schedule(
        cfg.eps_start, cfg.eps_end, max(1, int(cfg.eps_decay_fraction * cfg.num_updates)))

    def policy_params(state: Any):  # what the actors need (a selection: runners may call
        return state.params, state.updates  # this on shapes alone)

    def act(policy, obs: jax.Array, key: jax.Array):
        params, updates = policy
        return EpsilonGreedy(network.apply(params, obs), epsilon(updates)).sample(key), {}

    def eval_act(policy, obs: jax.Array, key: jax.Array, greedy: bool) -> jax.Array:
        """argmax of Q; ``greedy=False``: epsilon-greedy at the final ``eps_end``."""
        params, _ = policy
        pi = EpsilonGreedy(network.apply(params, obs), cfg.eps_end)
        return pi.mode() if greedy else pi.sample(key)

    return EpsilonGreedyPolicy(epsilon, act, policy_params, eval_act)


class LearnerState(NamedTuple):
    params: Any
    opt_state: Any


def accumulated_grad(
    loss: Callable[..., tuple[jax.Array, Any]], params: Any, batch: tuple, micro_batches: int
) -> tuple[Any, Any]:
    """``jax.grad(loss, has_aux=True)(params, *batch)``, computed over ``micro_batches`` equal
    slices of the batch's leading axis and averaged: the same gradient for a mean loss, with
    1/micro_batches of the activation memory (gradient accumulation)."""
    grad_fn = jax.grad(loss, has_aux=True)
    if micro_batches == 1:
        return grad_fn(params, *batch)
    micro = jax.tree.map(lambda x: x.reshape(micro_batches, -1, *x.shape[1:]), batch)

    def add(total, one):
        return jax.tree.map(jax.numpy.add, total, grad_fn(params, *one)), None

    zeros = jax.tree.map(jax.numpy.zeros_like,
                         jax.eval_shape(grad_fn, params, *jax.tree.map(lambda x: x[0], micro)))
    total, _ = lax.scan(add, zeros, micro)
    return jax.tree.map(lambda x: x / micro_batches, total)


def pmean(tree: Any, axis_name: str | None) -> Any:
    """``lax.pmean`` over ``axis_name``, or the identity when there is no such axis."""
    return tree if axis_name is None else lax.pmean(tree, axis_name)


def standardize(x: jax.Array, axis_name: str | None) -> jax.Array:
    """``(x - mean) / std``, the statistics taken over all devices on ``axis_name``."""
    mean = pmean(x.mean(), axis_name)
    std = jnp.sqrt(jnp.maximum(pmean(jnp.square(x).mean(), axis_name) - mean**2, 0))
    return (x - mean) / (std + 1e-8)


MINIBATCH_LAYOUTS = ("time", "sample")


def shuffled_minibatches(key: jax.Array, data: Any, num_minibatches: int,
                         layout: str = "time", axis_name: str | None = None) -> Any:
    """``[N, B, ...]`` leaves to ``[M, N/M, B, ...]`` minibatches that hold every sample once.

    ``layout="time"``: one random permutation of the leading axis (time steps or time chunks),
    the same for every env: a minibatch holds N/M whole time steps of all envs.
    ``layout="sample"``: every env's time steps permuted on their own (its key folds in the
    env's global index, offset along ``axis_name``), so a minibatch holds N/M random steps of
    each env, different steps for different envs (leaves need the env axis B).

    Either depends on the key (and the global env index) alone, so the minibatches are the same
    whatever the number of devices the envs are split over."""
    leaf = jax.tree.leaves(data)[0]
    n = leaf.shape[0]
    reshape = lambda x: x.reshape(num_minibatches, -1, *x.shape[1:])
    if layout == "time":
        order = jax.random.permutation(key, n)
        return jax.tree.map(lambda x: reshape(x[order]), data)
    b = leaf.shape[1]
    offset = lax.axis_index(axis_name) * b if axis_name is not None else 0
    env_ids = offset + jnp.arange(b)
    orders = jax.vmap(lambda i: jax.random.permutation(jax.random.fold_in(key, i), n))(env_ids)
    rows, cols = orders.T, jnp.arange(b)  # [N, B]: the step each slot takes, per env
    return jax.tree.map(lambda x: reshape(x[rows, cols]), data)


def minibatch_epochs(
    loss: Callable[[Any, Any], tuple[jax.Array, dict]],
    optimizer: optax.GradientTransformation,
    state: LearnerState,
    data: Any,  # leaves [N, B, ...]
    key: jax.Array,
    num_epochs: int,
    num_minibatches: int,
    axis_name: str | None,
    prepare: Callable[[Any], Any] = lambda minibatch: minibatch,
    micro_batches: int = 1,
    layout: str = "time",
) -> tuple[LearnerState, dict]:
    """``num_epochs`` passes of ``num_minibatches`` gradient steps of ``loss(params, minibatch)``
    over ``data`` (shuffled by ``shuffled_minibatches`` in ``layout``); gradients and metrics
    pmean-ed. Each minibatch goes through ``prepare`` (statistics over the whole minibatch),
    then its gradient is accumulated over ``micro_batches`` slices of its leading axis
    (``accumulated_grad``)."""

    def gradient_step(state: LearnerState, minibatch: Any):
        grads, metrics = accumulated_grad(loss, state.params, (prepare(minibatch),),
                                          micro_batches)
        grads = pmean(grads, axis_name)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        return LearnerState(optax.apply_updates(state.params, updates), opt_state), metrics

    def epoch(state: LearnerState, epoch_key: jax.Array):
        minibatches = shuffled_minibatches(epoch_key, data, num_minibatches, layout,
                                           axis_name)
        return lax.scan(gradient_step, state, minibatches)

    state, metrics = lax.scan(epoch, state, jax.random.split(key, num_epochs))
    return state, pmean(jax.tree.map(jnp.mean, metrics), axis_name)
