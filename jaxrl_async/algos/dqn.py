"""Deep Q-Networks (Mnih et al., 2015) from a device-resident replay buffer, with double
Q-learning (van Hasselt et al., 2016), a target network (periodic copy or Polyak averaging), a
linear epsilon-greedy schedule and n-step returns that bootstrap at truncation.

Every update inserts its trajectory into the buffer and then takes ``cfg.gradient_steps``
sampled gradient steps (``replay.insert_then_train``), so samples-per-insert is fixed by the
config under either runner.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from jaxrl_async.algos.base import (
    Algorithm,
    PerEnv,
    Trajectory,
    epsilon_greedy_policy,
    linear_to_zero,
    make_optimizer,
    memoryless,
    pmean,
)
from jaxrl_async.algos.replay import (
    Batch as ReplayBatch,
)
from jaxrl_async.algos.replay import (
    OffPolicyConfig,
    Transition,
    insert_then_train,
)
from jaxrl_async.algos.replay import init as init_replay
from jaxrl_async.config.shared import (
    EpsilonGreedyFields,
    OptimizerFields,
    TrainConfig,
    boolean,
    config,
    hyper,
    in_range,
    one_of,
    positive_int,
    redefault,
    static,
)
from jaxrl_async.envs import EnvSpec
from jaxrl_async.networks.heads import q_network_for
from jaxrl_async.networks.initializers import init_params


@config
class DQNConfig(EpsilonGreedyFields, OptimizerFields, OffPolicyConfig):
    """DQN; the defaults learn CartPole-v1 (see tests/test_dqn.py)."""

    total_timesteps: int = redefault(TrainConfig, "total_timesteps", 100_032)
    num_envs: int = redefault(TrainConfig, "num_envs", 8)
    num_steps: int = redefault(TrainConfig, "num_steps", 8)
    activation: str = redefault(TrainConfig, "activation", "relu")
    buffer_size: int = redefault(OffPolicyConfig, "buffer_size", 50_048)
    samples_per_insert: float = redefault(OffPolicyConfig, "samples_per_insert", 16.0)
    n_step: int = redefault(OffPolicyConfig, "n_step", 3)
    lr: float = redefault(OptimizerFields, "lr", 5e-4)
    anneal_lr: bool = redefault(OptimizerFields, "anneal_lr", True)
    """Anneal the learning rate linearly to 0 over the gradient steps of the run."""
    layer_norm: bool = static(True, boolean)
    """LayerNorm after every hidden layer of the Q-network. It keeps TD learning from diverging
    (Gallici et al., 2024): without it all 4 CartPole seeds tried here diverged (Q > 1000),
    with td_loss="huber"."""
    double_q: bool = static(True, boolean)
    """Pick the bootstrap action with the online network, value it with the target network."""
    target_update_every: int = static(1, positive_int)
    """Gradient steps between target-network updates."""
    tau: float = hyper(0.02, in_range(0.0, 1.0, lo_open=True))
    """Target update: target <- tau * online + (1 - tau) * target (1: a copy; with
    target_update_every=1 and a small tau: Polyak averaging)."""
    max_grad_norm: float = redefault(OptimizerFields, "max_grad_norm", 10.0)
    td_loss: str = static("huber", one_of("huber", "mse"))
    """Loss on the TD error: huber (optax.huber_loss, delta 1: quadratic within 1, linear
    beyond) or mse (the mean squared error, as CleanRL's dqn.py and dqn_jax.py). Huber caps
    each sample's gradient at 1, so rare large errors (CartPole's terminal steps, target 1
    against Q near 100) weigh no more than small ones: at CleanRL's dqn_jax.py settings (no
    LayerNorm, hard target copies) it did not learn CartPole here; mse did (docs/results.md)."""

    name = "dqn"

    def validate(self) -> None:
        super().validate()
        self.require_discrete(True)


class DQNState(NamedTuple):
    params: Any  # online Q-network
    target_params: Any
    opt_state: Any
    replay: PerEnv  # PerEnv(replay.Replay)
    updates: jax.Array  # [] int32 learn calls so far (sets epsilon)
    gradient_steps: jax.Array  # [] int32 (sets the target updates)


class Learner(NamedTuple):  # what the gradient steps change
    params: Any
    target_params: Any
    opt_state: Any
    gradient_steps: jax.Array


def learning_rate(cfg: DQNConfig) -> optax.Schedule | float:
    """The rate by gradient step: annealed to 0 over the gradient steps the run takes, those
    of the updates from the first with ``learning_starts`` transitions in the buffer."""
    first_trained = -(-cfg.learning_starts // cfg.steps_per_update)  # ceil: updates to fill
    total_steps = max(cfg.num_updates - first_trained + 1, 1) * cfg.gradient_steps
    return linear_to_zero(cfg.lr, total_steps, cfg.anneal_lr)


def td_error_loss(q: jax.Array, target: jax.Array, kind: str) -> jax.Array:
    """The mean over the batch of ``kind`` (``DQNConfig.td_loss``) of the TD errors."""
    chex.assert_equal_shape([q, target])
    if kind == "mse":
        return jnp.square(q - target).mean()
    return optax.huber_loss(q, target).mean()


def make_algorithm(cfg: DQNConfig, spec: EnvSpec) -> Algorithm:
    """DQN's init/act/learn for ``spec``; ``cfg``'s hyperparameters may be traced."""
    network = q_network_for(spec, cfg.resolved_torso, cfg.hidden_sizes, cfg.activation,
                            cfg.layer_norm)
    optimizer = make_optimizer(cfg.max_grad_norm, learning_rate(cfg))
    policy = epsilon_greedy_policy(network, cfg)

    def init(key: jax.Array) -> DQNState:
        obs = jnp.zeros(spec.obs_shape, spec.obs_dtype)
        params = init_params(network, key, obs)
        item = Transition(obs, jnp.zeros((), jnp.int32), 0.0, False, False, obs)
        zero = jnp.zeros((), jnp.int32)
        return DQNState(params, params, optimizer.init(params),
                        PerEnv(init_replay(item, cfg.capacity_per_env)), zero, zero)

    def loss(params, target_params, batch: ReplayBatch):
        n = batch.obs.shape[0]
        q, q_next_online = jnp.split(
            network.apply(params, jnp.concatenate([batch.obs, batch.next_obs])), [n])  # [N, A]
        q_next_target = network.apply(target_params, batch.next_obs)  # [N, A]
        # 1. The bootstrap action: online argmax (double Q) or target argmax.
        next_action = jnp.argmax(q_next_online if cfg.double_q else q_next_target, -1)
        # 2. The n-step target: rewards up to the episode's end or n steps, then gamma^k Q.
        bootstrap = jnp.take_along_axis(q_next_target, next_action[:, None], -1)[:, 0]
        target = jax.lax.stop_gradient(batch.n_step_return + batch.discount * bootstrap)
        q_taken = jnp.take_along_axis(q, batch.action[:, None].astype(jnp.int32), -1)[:, 0]
        td_loss = td_error_loss(q_taken, target, cfg.td_loss)
        return td_loss, {"loss": td_loss, "q_mean": q_taken.mean()}

    def gradient_step(learner: Learner, batch: ReplayBatch, axis_name):
        grads, metrics = jax.grad(loss, has_aux=True)(learner.params, learner.target_params,
                                                      batch)
        grads = pmean(grads, axis_name)
        updates, opt_state = optimizer.update(grads, learner.opt_state, learner.params)
        params = optax.apply_updates(learner.params, updates)
        steps = learner.gradient_steps + 1
        # 3. Target network: every target_update_every steps, a copy (tau=1) or a Polyak step.
        due = steps % cfg.target_update_every == 0
        target = jax.tree.map(
            lambda p, t: jnp.where(due, cfg.tau * p + (1.0 - cfg.tau) * t, t),
            params, learner.target_params)
        return Learner(params, target, opt_state, steps), metrics

    def learn(state: DQNState, traj: Trajectory, key: jax.Array, axis_name=None):
        chex.assert_rank(traj.reward, 2)  # [T, B]
        learner = Learner(state.params, state.target_params, state.opt_state,
                          state.gradient_steps)
        learner, replay, metrics = insert_then_train(
            lambda s, b: gradient_step(s, b, axis_name), learner, state.replay.value, traj,
            key, cfg)
        metrics = {**metrics, "epsilon": policy.epsilon(state.updates)}
        new_state = DQNState(learner.params, learner.target_params, learner.opt_state,
                             PerEnv(replay), state.updates + 1, learner.gradient_steps)
        return new_state, pmean(metrics, axis_name)

    return Algorithm(init=init, act=memoryless(policy.act), learn=learn,
                     policy_params=policy.policy_params,
                     eval_act=memoryless(policy.eval_act, evaluation=True))
