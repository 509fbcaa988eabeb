"""Parallelised Q-Network, PQN (Gallici et al., 2024, "Simplifying Deep Temporal Difference
Learning"): epsilon-greedy Q-learning over many parallel envs with no replay buffer and no target
network. LayerNorm keeps the TD updates stable; Peng's Q(lambda) targets are computed over each
rollout, then a few epochs of minibatch steps are taken on it, as PPO does.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp

from jaxrl_async.algos.base import (
    Algorithm,
    LearnerState,
    Trajectory,
    epsilon_greedy_policy,
    linear_to_zero,
    make_optimizer,
    memoryless,
    minibatch_epochs,
)
from jaxrl_async.algos.returns import q_lambda_returns
from jaxrl_async.config.shared import (
    EpsilonGreedyFields,
    OptimizerFields,
    TrainConfig,
    boolean,
    config,
    fail,
    hyper,
    in_range,
    positive_int,
    redefault,
    static,
)
from jaxrl_async.envs import EnvSpec
from jaxrl_async.networks.heads import q_network_for
from jaxrl_async.networks.initializers import init_params


@config
class PQNConfig(EpsilonGreedyFields, OptimizerFields, TrainConfig):
    """PQN; the defaults learn CartPole-v1 (see tests/test_pqn.py)."""

    total_timesteps: int = redefault(TrainConfig, "total_timesteps", 249_856)
    num_envs: int = redefault(TrainConfig, "num_envs", 32)
    num_steps: int = redefault(TrainConfig, "num_steps", 64)
    hidden_sizes: tuple[int, ...] = redefault(TrainConfig, "hidden_sizes", (256, 256))
    activation: str = redefault(TrainConfig, "activation", "relu")
    lr: float = redefault(OptimizerFields, "lr", 3e-4)
    max_grad_norm: float = redefault(OptimizerFields, "max_grad_norm", 10.0)
    eps_decay_fraction: float = redefault(EpsilonGreedyFields, "eps_decay_fraction", 0.2)
    update_epochs: int = static(4, positive_int)
    """Passes over each rollout."""
    num_minibatches: int = static(16, positive_int)
    """Minibatches per epoch; each holds num_steps / num_minibatches random steps of every env."""
    q_lambda: float = hyper(0.95, in_range(0.0, 1.0))
    """Lambda of the Q(lambda) targets (0: one-step Q-learning, 1: Monte Carlo)."""
    layer_norm: bool = static(True, boolean)
    """LayerNorm after every hidden layer (what makes Q-learning without a target network
    stable)."""

    name = "pqn"
    accumulates_gradients = True

    def validate(self) -> None:
        super().validate()
        self.require_discrete(True)
        if self.num_steps % self.num_minibatches:
            fail(self, "num_minibatches", f"must divide num_steps = {self.num_steps}")
        else:
            self.require_micro_batches(self.num_steps // self.num_minibatches,
                                       "steps (num_steps / num_minibatches)")


class PQNState(NamedTuple):
    params: Any
    opt_state: Any
    updates: jax.Array  # [] int32 learn calls so far (sets epsilon)


def make_algorithm(cfg: PQNConfig, spec: EnvSpec) -> Algorithm:
    """PQN's init/act/learn for ``spec``; ``cfg``'s hyperparameters may be traced."""
    network = q_network_for(spec, cfg.resolved_torso, cfg.hidden_sizes, cfg.activation,
                            cfg.layer_norm)
    total_steps = cfg.num_updates * cfg.update_epochs * cfg.num_minibatches
    optimizer = make_optimizer(cfg.max_grad_norm,
                               linear_to_zero(cfg.lr, total_steps, cfg.anneal_lr))
    policy = epsilon_greedy_policy(network, cfg)

    def init(key: jax.Array) -> PQNState:
        params = init_params(network, key, jnp.zeros(spec.obs_shape, spec.obs_dtype))
        return PQNState(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    def loss(params, minibatch):
        obs, action, target = minibatch  # [T/M, B, ...]
        q = network.apply(params, obs)
        q_taken = jnp.take_along_axis(q, action[..., None].astype(jnp.int32), -1)[..., 0]
        td_loss = 0.5 * jnp.square(q_taken - target).mean()
        return td_loss, {"loss": td_loss, "q_mean": q_taken.mean()}

    def learn(state: PQNState, traj: Trajectory, key: jax.Array, axis_name=None):
        chex.assert_rank(traj.reward, 2)  # [T, B]
        # 1. Q(lambda) targets with the current network: max_a Q(next obs) bootstraps every
        #    step (fully at truncation and at the rollout's end, not at termination).
        #    Those are its only values: all from one set of params, the learner's.
        next_q_max = network.apply(state.params, traj.next_obs).max(-1)  # [T, B] learner's
        targets = q_lambda_returns(traj.reward, next_q_max, traj.terminated, traj.truncated,
                                   cfg.gamma, cfg.q_lambda)
        # 2. Epochs of minibatch regression of Q(obs, action) on the fixed targets.
        learner, metrics = minibatch_epochs(
            loss, optimizer, LearnerState(state.params, state.opt_state),
            (traj.obs, traj.action, targets), key, cfg.update_epochs, cfg.num_minibatches,
            axis_name, micro_batches=cfg.grad_accum_steps)
        metrics = {**metrics, "epsilon": policy.epsilon(state.updates)}
        return PQNState(learner.params, learner.opt_state, state.updates + 1), metrics

    return Algorithm(init=init, act=memoryless(policy.act), learn=learn,
                     policy_params=policy.policy_params, eval_act=memoryless(policy.eval_act,
                     evaluation=True))
