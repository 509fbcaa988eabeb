"""Soft Actor-Critic (Haarnoja et al., 2018, with the learned temperature of "SAC: Algorithms and
Applications") for continuous actions: a tanh-squashed Gaussian policy, twin critics with Polyak
target copies, the temperature tuned toward a target entropy, learning from the device-resident
replay buffer (``jaxrl_async.algos.replay``) with a fixed samples-per-insert ratio.

The three losses are summed into one and differentiated once, with ``stop_gradient`` keeping each
loss to its own parameters; one flattened Adam then steps all of them (one optimizer update per
gradient step instead of three). The actor's loss sees the critics of the same step (not the
critics after their update, as in the sequential form): a one-step difference.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl_async.algos.base import Algorithm, PerEnv, Trajectory, make_optimizer, memoryless, pmean
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
    TrainConfig,
    boolean,
    config,
    hyper,
    in_range,
    positive,
    redefault,
    static,
)
from jaxrl_async.envs import EnvSpec
from jaxrl_async.networks.heads import SquashedGaussianActor, TanhGaussian, TwinQ
from jaxrl_async.networks.initializers import init_params


@config
class SACConfig(OffPolicyConfig):
    """SAC; the defaults learn Pendulum-v1 (see tests/test_sac.py)."""

    env: str = redefault(TrainConfig, "env", "Pendulum-v1")
    total_timesteps: int = redefault(TrainConfig, "total_timesteps", 20_000)
    num_envs: int = redefault(TrainConfig, "num_envs", 4)
    num_steps: int = redefault(TrainConfig, "num_steps", 8)
    hidden_sizes: tuple[int, ...] = redefault(TrainConfig, "hidden_sizes", (128, 128))
    activation: str = redefault(TrainConfig, "activation", "relu")
    batch_size: int = redefault(OffPolicyConfig, "batch_size", 128)
    samples_per_insert: float = redefault(OffPolicyConfig, "samples_per_insert", 128.0)
    learning_starts: int = redefault(OffPolicyConfig, "learning_starts", 1_024)
    lr: float = hyper(1e-3, positive)
    """Adam learning rate of the actor, the critics and the temperature."""
    tau: float = hyper(0.005, in_range(0.0, 1.0, lo_open=True))
    """Polyak step of the target critics after every gradient step."""
    init_alpha: float = hyper(1.0, positive)
    """Initial temperature (the entropy bonus weight)."""
    learn_alpha: bool = static(True, boolean)
    """Tune the temperature toward target_entropy (else keep init_alpha)."""
    target_entropy_scale: float = hyper(1.0, in_range(0.0, 10.0))
    """Target entropy is -target_entropy_scale * action_dim (in the squashed [-1, 1] space)."""

    name = "sac"

    def validate(self) -> None:
        super().validate()
        self.require_discrete(False)


class SACParams(NamedTuple):
    actor: Any
    critic: Any
    log_alpha: jax.Array  # []


class SACState(NamedTuple):
    params: SACParams
    target_critic: Any
    opt_state: Any
    replay: PerEnv  # PerEnv(replay.Replay)


class Learner(NamedTuple):  # what the gradient steps change
    params: SACParams
    target_critic: Any
    opt_state: Any


def make_algorithm(cfg: SACConfig, spec: EnvSpec) -> Algorithm:
    """SAC's init/act/learn for ``spec``; ``cfg``'s hyperparameters may be traced."""
    action_dim = int(math.prod(spec.action_shape))
    actor = SquashedGaussianActor(action_dim, cfg.hidden_sizes, cfg.activation)
    critic = TwinQ(cfg.hidden_sizes, cfg.activation)
    optimizer = make_optimizer(None, cfg.lr)
    low = np.asarray(spec.action_low, np.float32).reshape(spec.action_shape)
    high = np.asarray(spec.action_high, np.float32).reshape(spec.action_shape)
    target_entropy = -cfg.target_entropy_scale * action_dim

    def to_env(unit_action: jax.Array) -> jax.Array:  # (-1, 1) -> [low, high]
        return low + 0.5 * (unit_action + 1.0) * (high - low)

    def sample(actor_params, obs: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Env actions and their log-probs (squashed space) for ``obs [N, ...]``, ``key [N]``."""
        pi = actor.apply(actor_params, obs)
        unit, log_prob = jax.vmap(lambda m, s, k: TanhGaussian(m, s).sample_and_log_prob(k))(
            pi.mean, pi.log_std, key)
        return to_env(unit), log_prob

    def init(key: jax.Array) -> SACState:
        actor_key, critic_key = jax.random.split(key)
        obs = jnp.zeros(spec.obs_shape, spec.obs_dtype)
        action = jnp.zeros(spec.action_shape, jnp.float32)
        params = SACParams(init_params(actor, actor_key, obs),
                           init_params(critic, critic_key, obs, action),
                           jnp.log(jnp.asarray(cfg.init_alpha, jnp.float32)))
        item = Transition(obs, action, 0.0, False, False, obs)
        return SACState(params, params.critic, optimizer.init(params),
                        PerEnv(init_replay(item, cfg.capacity_per_env)))

    def act(actor_params, obs: jax.Array, key: jax.Array):
        unit, _ = actor.apply(actor_params, obs).sample_and_log_prob(key)
        return to_env(unit), {}

    def eval_act(actor_params, obs: jax.Array, key: jax.Array, greedy: bool) -> jax.Array:
        """The tanh-squashed mean (``greedy``) or a sample, in the env's action range."""
        pi = actor.apply(actor_params, obs)
        return to_env(pi.mode() if greedy else pi.sample_and_log_prob(key)[0])

    def loss(params: SACParams, target_critic, batch: ReplayBatch):
        alpha = jnp.exp(params.log_alpha) if cfg.learn_alpha else cfg.init_alpha
        alpha = jax.lax.stop_gradient(alpha)
        next_key, key = jax.vmap(jax.random.split, out_axes=1)(batch.key)
        # 1. Critics: soft n-step target from the smaller target critic at the next action.
        next_action, next_log_prob = sample(params.actor, batch.next_obs, next_key)
        next_q = critic.apply(target_critic, batch.next_obs, next_action).min(-1)  # [N]
        target = jax.lax.stop_gradient(
            batch.n_step_return + batch.discount * (next_q - alpha * next_log_prob))
        q = critic.apply(params.critic, batch.obs, batch.action)  # [N, 2]
        critic_loss = 0.5 * jnp.square(q - target[:, None]).sum(-1).mean()
        # 2. Actor: maximise min Q - alpha * log pi at a fresh (reparameterised) action.
        action, log_prob = sample(params.actor, batch.obs, key)
        q_pi = critic.apply(jax.lax.stop_gradient(params.critic), batch.obs, action).min(-1)
        actor_loss = (alpha * log_prob - q_pi).mean()
        # 3. Temperature: raise alpha when the entropy is below the target, lower it above.
        alpha_loss = -(params.log_alpha * jax.lax.stop_gradient(log_prob + target_entropy)).mean()
        total = critic_loss + actor_loss + (alpha_loss if cfg.learn_alpha else 0.0)
        return total, {"critic_loss": critic_loss, "actor_loss": actor_loss,
                       "alpha": alpha, "entropy": -log_prob.mean(), "q_mean": q.mean()}

    def gradient_step(learner: Learner, batch: ReplayBatch, axis_name):
        grads, metrics = jax.grad(loss, has_aux=True)(learner.params, learner.target_critic,
                                                      batch)
        grads = pmean(grads, axis_name)
        updates, opt_state = optimizer.update(grads, learner.opt_state, learner.params)
        params = optax.apply_updates(learner.params, updates)
        target = optax.incremental_update(params.critic, learner.target_critic, cfg.tau)
        return Learner(params, target, opt_state), metrics

    def learn(state: SACState, traj: Trajectory, key: jax.Array, axis_name=None):
        chex.assert_rank(traj.reward, 2)  # [T, B]
        learner = Learner(state.params, state.target_critic, state.opt_state)
        learner, replay, metrics = insert_then_train(
            lambda s, b: gradient_step(s, b, axis_name), learner, state.replay.value, traj,
            key, cfg)
        new_state = SACState(learner.params, learner.target_critic, learner.opt_state,
                             PerEnv(replay))
        return new_state, pmean(metrics, axis_name)

    return Algorithm(init=init, act=memoryless(act), learn=learn,
                     policy_params=lambda state: state.params.actor,
                     eval_act=memoryless(eval_act, evaluation=True))
