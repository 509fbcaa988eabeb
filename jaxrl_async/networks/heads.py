"""The networks an algorithm learns (actor-critics, Q-networks, the SAC actor and twin Q)
and the action distributions they output.

Distributions are a few clear lines rather than distrax: we need sample, log-prob, entropy and
mode on a single observation (the rollout vmaps), and this keeps the traced graph small.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_async.envs import EnvSpec
from jaxrl_async.networks.initializers import orthogonal
from jaxrl_async.networks.torsos import ACTIVATIONS, MLP, TORSOS, resolve_torso

_LOG_2PI = math.log(2 * math.pi)


class Categorical(NamedTuple):
    logits: jax.Array  # [..., num_actions]

    def sample(self, key: jax.Array) -> jax.Array:
        return jax.random.categorical(key, self.logits)

    def log_prob(self, action: jax.Array) -> jax.Array:
        logp = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), -1)[..., 0]

    def entropy(self) -> jax.Array:
        logp = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(logp) * logp, -1)

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, -1)


class DiagGaussian(NamedTuple):
    mean: jax.Array  # [..., action_dim]
    log_std: jax.Array  # [..., action_dim]

    def sample(self, key: jax.Array) -> jax.Array:
        return self.mean + jnp.exp(self.log_std) * jax.random.normal(key, self.mean.shape)

    def log_prob(self, action: jax.Array) -> jax.Array:
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z**2 - self.log_std - 0.5 * _LOG_2PI, -1)

    def entropy(self) -> jax.Array:
        return jnp.sum(self.log_std + 0.5 * (1.0 + _LOG_2PI), -1)

    def mode(self) -> jax.Array:
        return self.mean


class EpsilonGreedy(NamedTuple):
    """The greedy action of ``q`` with probability 1 - epsilon, else a uniform one."""

    q: jax.Array  # [..., num_actions]
    epsilon: jax.Array  # []

    def sample(self, key: jax.Array) -> jax.Array:
        explore_key, action_key = jax.random.split(key)
        random_action = jax.random.randint(action_key, self.q.shape[:-1], 0, self.q.shape[-1])
        explore = jax.random.uniform(explore_key, self.q.shape[:-1]) < self.epsilon
        return jnp.where(explore, random_action, self.mode())

    def mode(self) -> jax.Array:
        return jnp.argmax(self.q, -1)


class ActorCritic(nn.Module):
    """Separate actor and critic torsos; a categorical or diagonal-Gaussian policy head.

    (Not stacked with ``nn.vmap`` into batched matmuls: XLA:CPU runs plain matmuls through its
    fast path and batched ones through a loop; see docs/results.md.)
    """

    discrete: bool
    action_dim: int
    torso: str = "mlp"  # a key of TORSOS
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    log_std_init: float = 0.0
    masked: bool = False  # the last action_dim observation entries are the legal-action mask

    def setup(self) -> None:
        torso_cls = TORSOS[self.torso]
        self.actor_torso = torso_cls(tuple(self.hidden_sizes), self.activation)
        self.critic_torso = torso_cls(tuple(self.hidden_sizes), self.activation)
        self.policy_head = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))
        self.value_head = nn.Dense(1, kernel_init=orthogonal(1.0))
        if not self.discrete:
            self.log_std = self.param(
                "log_std", nn.initializers.constant(self.log_std_init), (self.action_dim,)
            )

    def __call__(self, obs: jax.Array) -> tuple[Categorical | DiagGaussian, jax.Array]:
        return self.policy(obs), self.value(obs)

    def policy(self, obs: jax.Array) -> Categorical | DiagGaussian:
        out = self.policy_head(self.actor_torso(obs))
        if self.discrete:
            return Categorical(mask_logits(out, obs) if self.masked else out)
        return DiagGaussian(out, jnp.broadcast_to(self.log_std, out.shape))

    def value(self, obs: jax.Array) -> jax.Array:
        return self.value_head(self.critic_torso(obs))[..., 0]


def mask_logits(logits: jax.Array, obs: jax.Array) -> jax.Array:
    """``logits [..., n]`` with the actions the mask (the last n entries of ``obs [..., D]``,
    1 legal, 0 illegal) rules out set to -1e9: probability 0, never sampled, never the mode."""
    legal = obs[..., obs.shape[-1] - logits.shape[-1]:] > 0.5
    return jnp.where(legal, logits, -1e9)


def actor_critic_for(
    spec: EnvSpec, torso: str, hidden_sizes: Sequence[int], activation: str
) -> ActorCritic:
    """The actor-critic for an env spec (``torso="auto"``: CNN for image observations)."""
    torso = resolve_torso(torso, spec.obs_shape)
    action_dim = spec.num_actions if spec.discrete else int(math.prod(spec.action_shape))
    return ActorCritic(spec.discrete, action_dim, torso, tuple(hidden_sizes), activation,
                       masked=spec.action_mask)


# --------------------------------------------------------------------------- Q-learning
class QNetwork(nn.Module):
    """Q-values of every action: ``obs [..., *obs_shape] -> [..., num_actions]``."""

    num_actions: int
    torso: str = "mlp"  # a key of TORSOS
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        torso_cls = TORSOS[self.torso]
        x = torso_cls(tuple(self.hidden_sizes), self.activation, self.layer_norm)(obs)
        return nn.Dense(self.num_actions, kernel_init=orthogonal(1.0))(x)


def q_network_for(spec: EnvSpec, torso: str, hidden_sizes: Sequence[int], activation: str,
                  layer_norm: bool = False) -> QNetwork:
    """The Q-network for a discrete-action env spec (``torso="auto"``: CNN for images)."""
    torso = resolve_torso(torso, spec.obs_shape)
    return QNetwork(spec.num_actions, torso, tuple(hidden_sizes), activation, layer_norm)


# --------------------------------------------------------------------------- SAC
class TanhGaussian(NamedTuple):
    """A diagonal Gaussian squashed by tanh into (-1, 1)."""

    mean: jax.Array  # [..., action_dim] pre-squash
    log_std: jax.Array  # [..., action_dim]

    def sample_and_log_prob(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A reparameterised sample and its log-density (with the tanh Jacobian)."""
        u = self.mean + jnp.exp(self.log_std) * jax.random.normal(key, self.mean.shape)
        log_prob = DiagGaussian(self.mean, self.log_std).log_prob(u)
        # log(1 - tanh(u)^2), in the numerically stable form
        log_det = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
        return jnp.tanh(u), log_prob - jnp.sum(log_det, -1)

    def mode(self) -> jax.Array:
        return jnp.tanh(self.mean)


class SquashedGaussianActor(nn.Module):
    """SAC's policy: ``obs -> TanhGaussian`` with the log-std clipped to [-5, 2]."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> TanhGaussian:
        x = MLP(tuple(self.hidden_sizes), self.activation)(obs)
        mean = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))(x)
        log_std = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))(x)
        return TanhGaussian(mean, jnp.clip(log_std, -5.0, 2.0))


class TwinQ(nn.Module):
    """SAC's two critics: ``(obs, action) -> [..., 2]`` (two separate MLPs; stacking them with
    ``nn.vmap`` is slower on XLA:CPU, see ``ActorCritic``)."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], -1)
        qs = [nn.Dense(1, kernel_init=orthogonal(1.0))(MLP(tuple(self.hidden_sizes),
                                                          self.activation)(x))[..., 0]
              for _ in range(2)]
        return jnp.stack(qs, -1)


# --------------------------------------------------------------------------- recurrent
class RecurrentActorCritic(nn.Module):
    """obs -> dense embedding -> GRU -> actor and critic heads; the memory is reset to zeros
    where ``first`` (the first step of an episode), before it is used.

    ``(memory [..., M], obs [..., *obs], first [...]) -> (memory, policy, value)``: the same
    call acts on one observation and on a ``[N]`` batch of them (one step of a sequence).
    """

    discrete: bool
    action_dim: int
    memory_size: int = 128
    hidden_sizes: Sequence[int] = (64,)
    activation: str = "tanh"
    log_std_init: float = 0.0

    @nn.compact
    def __call__(self, memory: jax.Array, obs: jax.Array, first: jax.Array):
        act = ACTIVATIONS[self.activation]
        memory = jnp.where(first[..., None], jnp.zeros_like(memory), memory)
        x = act(nn.Dense(self.memory_size, kernel_init=orthogonal())(obs))
        memory, x = nn.GRUCell(self.memory_size, kernel_init=orthogonal(1.0),
                               recurrent_kernel_init=orthogonal(1.0))(memory, x)
        out = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))(
            MLP(tuple(self.hidden_sizes), self.activation)(x))
        value = nn.Dense(1, kernel_init=orthogonal(1.0))(
            MLP(tuple(self.hidden_sizes), self.activation)(x))[..., 0]
        if self.discrete:
            return memory, Categorical(out), value
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init),
                             (self.action_dim,))
        return memory, DiagGaussian(out, jnp.broadcast_to(log_std, out.shape)), value
