"""IMPALA (Espeholt et al., 2018): an actor-critic whose learner corrects for the lag between
the behaviour policy mu (the params that acted) and the current policy pi with V-trace.

One gradient step per trajectory, as in the paper: the value head regresses on the V-trace
targets v_s, the policy follows rho_s * (r_s + gamma * v_{s+1} - V(x_s)) * grad log pi(a_s|x_s),
plus an entropy bonus. RMSProp (the paper's optimiser) or Adam, global-norm clipped.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax

from jaxrl_async.algos.base import (
    Algorithm,
    LearnerState,
    Trajectory,
    linear_anneal,
    make_optimizer,
    memoryless,
    on_rows,
    pmean,
    standardize,
)
from jaxrl_async.algos.returns import vtrace
from jaxrl_async.config.shared import (
    OptimizerFields,
    TrainConfig,
    boolean,
    config,
    hyper,
    in_range,
    non_negative,
    one_of,
    positive,
    redefault,
    static,
)
from jaxrl_async.envs import EnvSpec
from jaxrl_async.networks.heads import actor_critic_for
from jaxrl_async.networks.initializers import init_params


@config
class ImpalaConfig(OptimizerFields, TrainConfig):
    """IMPALA with V-trace; the defaults learn CartPole-v1 in about 5e5 steps."""

    num_envs: int = redefault(TrainConfig, "num_envs", 32)
    num_steps: int = redefault(TrainConfig, "num_steps", 16)
    lr: float = redefault(OptimizerFields, "lr", 3e-3)
    """Learning rate."""
    optimizer: str = static("rmsprop", one_of("rmsprop", "adam"))
    """The paper's RMSProp, or Adam."""
    rms_decay: float = hyper(0.99, in_range(0.0, 1.0, hi_open=True))
    """RMSProp decay of the squared-gradient average."""
    opt_eps: float = hyper(1e-5, positive)
    """Epsilon of RMSProp or Adam."""
    ent_coef: float = hyper(0.01, non_negative)
    """Entropy bonus coefficient."""
    vf_coef: float = hyper(0.5, non_negative)
    """Value loss coefficient."""
    vtrace_lambda: float = hyper(1.0, in_range(0.0, 1.0))
    """lambda of V-trace's traces c_s = lambda * min(c_bar, pi/mu)."""
    clip_rho: float = hyper(1.0, positive)
    """rho_bar: truncation of the importance weight in the value targets."""
    clip_c: float = hyper(1.0, positive)
    """c_bar: truncation of the importance weight in the traces."""
    clip_pg_rho: float = hyper(1.0, positive)
    """Truncation of the importance weight in the policy-gradient advantage."""
    normalize_advantages: bool = static(False, boolean)
    """Standardise the policy-gradient advantages per batch (statistics over all devices)."""

    name = "impala"
    masks_actions = True


def make_algorithm(cfg: ImpalaConfig, spec: EnvSpec) -> Algorithm:
    """IMPALA's init/act/learn for ``spec``; ``cfg``'s hyperparameters may be traced."""
    network = actor_critic_for(spec, cfg.resolved_torso, cfg.hidden_sizes, cfg.activation)

    lr = linear_anneal(cfg.lr, cfg.num_updates, anneal=cfg.anneal_lr)  # one step per update
    extra = {"decay": cfg.rms_decay} if cfg.optimizer == "rmsprop" else {}
    optimizer = make_optimizer(cfg.max_grad_norm, lr, cfg.optimizer, eps=cfg.opt_eps, **extra)

    def init(key: jax.Array) -> LearnerState:
        params = init_params(network, key, jnp.zeros(spec.obs_shape, spec.obs_dtype))
        return LearnerState(params, optimizer.init(params))

    def act(params, obs: jax.Array, key: jax.Array):
        pi = network.apply(params, obs, method="policy")
        action = pi.sample(key)
        return action, {"log_prob": pi.log_prob(action)}

    def eval_act(params, obs: jax.Array, key: jax.Array, greedy: bool) -> jax.Array:
        pi = network.apply(params, obs, method="policy")
        return pi.mode() if greedy else pi.sample(key)

    def loss(params, traj: Trajectory, axis_name):
        # V(x_s) and V(x_s+1) both from the learner's params (the ones being trained); only the
        # log-prob mu comes from the acting params, and V-trace corrects for it.
        pi, value = on_rows(lambda obs: network.apply(params, obs), traj.obs)  # [T, B]
        next_value = network.apply(params, traj.next_obs, method="value")  # learner's params
        log_prob = pi.log_prob(traj.action)
        log_rho = log_prob - traj.extras["log_prob"]  # current over behaviour policy
        targets, advantages = jax.lax.stop_gradient(vtrace(
            traj.reward, value, next_value, traj.terminated, traj.truncated, log_rho, cfg.gamma,
            cfg.vtrace_lambda, cfg.clip_rho, cfg.clip_c, cfg.clip_pg_rho,
        ))
        if cfg.normalize_advantages:
            advantages = standardize(advantages, axis_name)

        policy_loss = -(advantages * log_prob).mean()
        value_loss = 0.5 * jnp.square(targets - value).mean()
        entropy = pi.entropy().mean()
        total = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        rho = jnp.exp(log_rho)
        return total, {
            "loss": total,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "rho_mean": rho.mean(),
            "rho_clip_frac": (rho > cfg.clip_rho).mean(),
        }

    def learn(state: LearnerState, traj: Trajectory, key: jax.Array, axis_name=None):
        del key  # one full-batch step: nothing random
        chex.assert_rank(traj.reward, 2)  # [T, B]
        chex.assert_equal_shape([traj.reward, traj.extras["log_prob"]])
        grads, metrics = jax.grad(loss, has_aux=True)(state.params, traj, axis_name)
        grads = pmean(grads, axis_name)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        return LearnerState(params, opt_state), pmean(metrics, axis_name)

    return Algorithm(init=init, act=memoryless(act), learn=learn, eval_act=memoryless(eval_act,
                     evaluation=True))
