"""Proximal Policy Optimization (Schulman et al., 2017), clipped surrogate, discrete or continuous.

The ratio is taken against the behaviour log-prob stored in the trajectory, so the loss stays
valid when the async runner trains on data a few updates old.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax

from jaxrl_async.algos.base import (
    MINIBATCH_LAYOUTS,
    Algorithm,
    LearnerState,
    Trajectory,
    linear_anneal,
    make_optimizer,
    memoryless,
    minibatch_epochs,
    rows,
    standardize,
)
from jaxrl_async.algos.returns import gae
from jaxrl_async.config.shared import (
    OptimizerFields,
    TrainConfig,
    boolean,
    config,
    fail,
    hyper,
    in_range,
    non_negative,
    one_of,
    positive,
    positive_int,
    static,
)
from jaxrl_async.envs import EnvSpec
from jaxrl_async.networks.heads import actor_critic_for
from jaxrl_async.networks.initializers import init_params


@config
class PPOConfig(OptimizerFields, TrainConfig):
    """PPO; the defaults are PureJaxRL's CartPole-v1 settings."""

    update_epochs: int = static(4, positive_int)
    """Passes over each rollout."""
    num_minibatches: int = static(4, positive_int)
    """Minibatches per epoch; each holds num_steps / num_minibatches random steps of every env."""
    minibatch_layout: str = static("time", one_of(*MINIBATCH_LAYOUTS))
    """Which steps a minibatch takes: 'time': the same random time steps of every env (one
    permutation of the time steps per epoch); 'sample': each env's own random time steps (one
    permutation per env), so a minibatch mixes times across envs, as per-sample shuffling does
    (gymnax-blines, Stable-Baselines3)."""
    gae_lambda: float = hyper(0.95, in_range(0.0, 1.0))
    """GAE lambda."""
    clip_eps: float = hyper(0.2, positive)
    """Clip range of the probability ratio (and of the value change, with clip_value)."""
    clip_value: bool = static(True, boolean)
    """Clip the value loss like the policy loss."""
    ent_coef: float = hyper(0.01, non_negative)
    """Entropy bonus coefficient."""
    vf_coef: float = hyper(0.5, non_negative)
    """Value loss coefficient."""
    normalize_advantages: bool = static(True, boolean)
    """Standardise advantages per minibatch (statistics over all devices)."""

    name = "ppo"
    masks_actions = True
    accumulates_gradients = True

    def validate(self) -> None:
        super().validate()
        if self.num_steps % self.num_minibatches:
            fail(self, "num_minibatches", f"must divide num_steps = {self.num_steps} (each "
                 "minibatch takes num_steps / num_minibatches steps of every env)")
        else:
            self.require_micro_batches(self.num_steps // self.num_minibatches,
                                       "steps (num_steps / num_minibatches)")


def clipped_loss(cfg: PPOConfig, pi, value, action, extras, advantages,
                 targets) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO's clipped surrogate, (clipped) value loss and entropy bonus on one (micro-)batch;
    ``extras`` holds the behaviour ``log_prob`` and ``value``; ``advantages`` are standardised
    already (``standardize``, over the whole minibatch on all devices)."""
    log_ratio = pi.log_prob(action) - extras["log_prob"]
    ratio = jnp.exp(log_ratio)
    clipped_ratio = jnp.clip(ratio, 1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps)
    policy_loss = -jnp.minimum(ratio * advantages, clipped_ratio * advantages).mean()

    value_loss = jnp.square(value - targets)
    if cfg.clip_value:
        old_value = extras["value"]  # the behaviour value: the clip's centre, not in GAE
        value_clipped = old_value + jnp.clip(value - old_value, -cfg.clip_eps, cfg.clip_eps)
        value_loss = jnp.maximum(value_loss, jnp.square(value_clipped - targets))
    value_loss = 0.5 * value_loss.mean()

    entropy = pi.entropy().mean()
    total = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
    return total, {
        "loss": total,
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        "clip_frac": (jnp.abs(ratio - 1.0) > cfg.clip_eps).mean(),
    }


def ppo_optimizer(cfg: PPOConfig) -> optax.GradientTransformation:
    """Adam after global-norm clipping, the learning rate annealed per update."""
    lr = linear_anneal(cfg.lr, cfg.num_updates, cfg.update_epochs * cfg.num_minibatches,
                       cfg.anneal_lr)
    return make_optimizer(cfg.max_grad_norm, lr, eps=1e-5)


def advantages_and_targets(network, params, traj: Trajectory,
                           cfg: PPOConfig) -> tuple[jax.Array, jax.Array]:
    """GAE advantages and value targets, each [T, B], of ``traj`` for the learner holding
    ``params``; truncated episodes bootstrap from V(final observation).

    Both values of every TD error come from the learner's ``params``. The behaviour value
    stored by the actor (``extras["value"]``) is older by the runner's lag: mixing it in would
    add gamma * (V_learner - V_behaviour)(s_t+1) to every TD error, which GAE sums. The
    behaviour critic for both learns as well (docs/results.md); the learner's is chosen as it
    asks nothing more of the actor (which would have to evaluate V(final obs) at truncations)
    and stays one critic whatever the lag or the push schedule.

    Under the sync runner (lag 0: the rollout acted with ``params``) the behaviour value is the
    learner's V(obs), so it is taken as it is, not computed again (one critic pass over the
    rollout saved; equal up to how a batched matmul rounds, ``docs/algorithms.md``).
    """
    if acts_with_learner_params(cfg):
        value = traj.extras["value"]  # [T, B] the acting params are the learner's
    else:
        value = network.apply(params, traj.obs, method="value")  # [T, B] learner's params
    next_value = network.apply(params, traj.next_obs, method="value")  # [T, B] learner's params
    return gae(traj.reward, value, next_value, traj.terminated, traj.truncated,
               cfg.gamma, cfg.gae_lambda)


def acts_with_learner_params(cfg: PPOConfig) -> bool:
    """Whether every rollout acts with the params the learner then updates (lag 0): the sync
    runner, and so every sweep."""
    return cfg.runner.name == "sync"


def make_algorithm(cfg: PPOConfig, spec: EnvSpec) -> Algorithm:
    """PPO's init/act/learn for ``spec``; ``cfg``'s hyperparameters may be traced."""
    network = actor_critic_for(spec, cfg.resolved_torso, cfg.hidden_sizes, cfg.activation)
    optimizer = ppo_optimizer(cfg)

    def init(key: jax.Array) -> LearnerState:
        params = init_params(network, key, jnp.zeros(spec.obs_shape, spec.obs_dtype))
        return LearnerState(params, optimizer.init(params))

    def act(params, obs: jax.Array, key: jax.Array):
        pi, value = network.apply(params, obs)
        action = pi.sample(key)
        return action, {"log_prob": pi.log_prob(action), "value": value}

    def eval_act(params, obs: jax.Array, key: jax.Array, greedy: bool) -> jax.Array:
        pi = network.apply(params, obs, method="policy")
        return pi.mode() if greedy else pi.sample(key)

    def loss(params, minibatch):
        obs, action, extras, advantages, targets = rows(minibatch)  # [T/M * B, ...]
        pi, value = network.apply(params, obs)
        return clipped_loss(cfg, pi, value, action, extras, advantages, targets)

    def learn(state: LearnerState, traj: Trajectory, key: jax.Array, axis_name=None):
        chex.assert_rank(traj.reward, 2)  # [T, B]

        # 1. Advantages: GAE, bootstrapping truncated episodes from V(final observation).
        advantages, targets = advantages_and_targets(network, state.params, traj, cfg)

        # 2. Epochs of minibatch steps. A minibatch holds T/M random time steps of every env
        #    (the same ones, or each env's own: ``minibatch_layout``; the same on any number of
        #    devices, see ``shuffled_minibatches``); its advantages are standardised before it
        #    is split into micro-batches.
        def prepare(minibatch):
            obs, action, extras, adv, target = minibatch
            if cfg.normalize_advantages:
                adv = standardize(adv, axis_name)
            return obs, action, extras, adv, target

        data = (traj.obs, traj.action, traj.extras, advantages, targets)  # [T, B, ...]
        return minibatch_epochs(loss, optimizer, state, data, key, cfg.update_epochs,
                                cfg.num_minibatches, axis_name, prepare, cfg.grad_accum_steps,
                                cfg.minibatch_layout)

    return Algorithm(init=init, act=memoryless(act), learn=learn, eval_act=memoryless(eval_act,
                     evaluation=True))
