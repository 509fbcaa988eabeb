"""PPO with a GRU actor-critic, for partially observable tasks.

The rollout carries the GRU memory from step to step, resets it where an episode starts, and
stores in the trajectory the memory each step was given (``extras["memory"]``) and the episode
starts (``extras["first"]``). The learner re-runs the GRU over the whole trajectory from the
memory stored at its start, with the current params, to get both values of GAE and the memory at
every step. It then trains by truncated backpropagation through time: the trajectory is
cut into chunks of ``bptt_length`` steps, each starting from the memory of that re-run, and a
minibatch is a random set of chunks of every env (the same set on any number of devices).
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
from jax import lax

from jaxrl_async.algos.base import (
    Algorithm,
    LearnerState,
    Trajectory,
    minibatch_epochs,
    standardize,
)
from jaxrl_async.algos.ppo import PPOConfig, clipped_loss, ppo_optimizer
from jaxrl_async.algos.returns import gae
from jaxrl_async.config.shared import config, fail, positive_int, static
from jaxrl_async.envs import EnvSpec
from jaxrl_async.networks.heads import RecurrentActorCritic
from jaxrl_async.networks.initializers import init_params


@config
class RecurrentPPOConfig(PPOConfig):
    """PPO with a GRU actor-critic; the PPO fields mean what they mean there."""

    memory_size: int = static(128, positive_int)
    """GRU hidden units."""
    bptt_length: int = static(32, positive_int)
    """Steps backpropagated through: the trajectory is cut into chunks of this length."""

    name = "recurrent_ppo"
    title = "Recurrent PPO"

    def validate(self) -> None:
        super().validate()
        if self.resolved_torso in ("cnn", "nature"):
            fail(self, "torso", "must be 'mlp' (image observations are then flattened; the "
                 "recurrent network has no CNN)")
        if self.minibatch_layout != "time":
            fail(self, "minibatch_layout", "must be 'time' (a minibatch is a set of whole "
                 "chunks of bptt_length steps, the GRU runs through them in order)")
        if self.num_steps % self.bptt_length:
            fail(self, "bptt_length", f"must divide num_steps = {self.num_steps}")
        if (self.num_steps // self.bptt_length) % self.num_minibatches:
            fail(self, "num_minibatches", f"must divide num_steps / bptt_length = "
                 f"{self.num_steps // self.bptt_length} (a minibatch is a set of chunks)")
        else:
            self.require_micro_batches(
                self.num_steps // self.bptt_length // self.num_minibatches, "chunks")


def unroll(network: RecurrentActorCritic, params, memory: jax.Array, obs: jax.Array,
           first: jax.Array):
    """Run the GRU over ``obs [L, N, ...]`` from ``memory [N, M]``; per step: the memory it
    was given, the memory after it, the policy and the value."""

    def step(memory, xs):
        obs_t, first_t = xs
        new_memory, pi, value = network.apply(params, memory, obs_t, first_t)
        return new_memory, (memory, new_memory, pi, value)

    return lax.scan(step, memory, (obs, first))[1]


def advantages_and_targets(network: RecurrentActorCritic, params, traj: Trajectory,
                           cfg: RecurrentPPOConfig) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(memory [T, B, M] given to every step, advantages [T, B], value targets [T, B])``:
    the GRU re-run over ``traj`` with ``params`` from the memory stored at its start, and GAE
    on the values of that re-run.

    Both values of every TD error come from the learner's ``params``, as in ``ppo`` (the
    behaviour value stored by the actor is older by the runner's lag): V(obs) along the re-run,
    V(next obs) from the memory after each step (no reset: the next obs is the true one, in
    the same episode).
    """
    first = traj.extras["first"]
    memory, memory_after, _, value = unroll(network, params, traj.extras["memory"][0],
                                            traj.obs, first)  # learner's params
    _, _, next_value = network.apply(params, memory_after, traj.next_obs,
                                     jnp.zeros_like(first))  # learner's params
    advantages, targets = gae(traj.reward, value, next_value, traj.terminated, traj.truncated,
                              cfg.gamma, cfg.gae_lambda)
    return memory, advantages, targets


def make_algorithm(cfg: RecurrentPPOConfig, spec: EnvSpec) -> Algorithm:
    """Recurrent PPO's init/act/learn for ``spec``; ``cfg``'s hyperparameters may be traced."""
    action_dim = spec.num_actions if spec.discrete else math.prod(spec.action_shape)
    network = RecurrentActorCritic(spec.discrete, action_dim, cfg.memory_size,
                                   tuple(cfg.hidden_sizes), cfg.activation)
    optimizer = ppo_optimizer(cfg)

    def init_memory() -> jax.Array:
        return jnp.zeros(cfg.memory_size, jnp.float32)

    def init(key: jax.Array) -> LearnerState:
        obs = jnp.zeros(spec.obs_shape, spec.obs_dtype)
        params = init_params(network, key, init_memory(), obs, jnp.array(True))
        return LearnerState(params, optimizer.init(params))

    def act(params, obs: jax.Array, key: jax.Array, memory: jax.Array, first: jax.Array):
        memory, pi, value = network.apply(params, memory, obs, first)
        action = pi.sample(key)
        return action, {"log_prob": pi.log_prob(action), "value": value}, memory

    def eval_act(params, obs: jax.Array, key: jax.Array, greedy: bool, memory: jax.Array,
                 first: jax.Array) -> tuple[jax.Array, jax.Array]:
        memory, pi, _ = network.apply(params, memory, obs, first)
        return (pi.mode() if greedy else pi.sample(key)), memory

    def loss(params, minibatch):
        memory, (obs, action, first, extras, advantages, targets) = minibatch
        # [C, L, B, ...] chunks -> sequences [L, C*B, ...] starting from memory [C*B, M]
        seq = lambda x: jnp.swapaxes(x, 0, 1).reshape(x.shape[1], -1, *x.shape[3:])
        obs, action, first, extras, advantages, targets = jax.tree.map(
            seq, (obs, action, first, extras, advantages, targets))
        _, _, pi, value = unroll(network, params, memory.reshape(-1, memory.shape[-1]), obs,
                                 first)
        return clipped_loss(cfg, pi, value, action, extras, advantages, targets)

    def learn(state: LearnerState, traj: Trajectory, key: jax.Array, axis_name=None):
        chex.assert_rank(traj.reward, 2)  # [T, B]
        first, extras = traj.extras["first"], traj.extras
        # 1. Re-run the GRU over the trajectory from its stored start memory (memory given to
        #    every step), then GAE from the values of that re-run.
        memory, advantages, targets = advantages_and_targets(network, state.params, traj, cfg)

        # 2. Truncated BPTT: chunks of bptt_length steps [C, L, B, ...], each with its start
        #    memory [C, B, M]; minibatches are random sets of chunks.
        chunk = lambda x: x.reshape(-1, cfg.bptt_length, *x.shape[1:])
        behaviour = {"log_prob": extras["log_prob"], "value": extras["value"]}
        data = jax.tree.map(chunk, (traj.obs, traj.action, first, behaviour, advantages,
                                    targets))
        start_memory = memory[:: cfg.bptt_length]

        def prepare(minibatch):  # advantages standardised over the minibatch, all devices
            memory, (obs, action, first, behaviour, adv, target) = minibatch
            if cfg.normalize_advantages:
                adv = standardize(adv, axis_name)
            return memory, (obs, action, first, behaviour, adv, target)

        return minibatch_epochs(loss, optimizer, state, (start_memory, data), key,
                                cfg.update_epochs, cfg.num_minibatches, axis_name, prepare,
                                cfg.grad_accum_steps)

    return Algorithm(init=init, act=act, learn=learn, init_memory=init_memory,
                     eval_act=eval_act)
