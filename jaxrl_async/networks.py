"""flax.linen networks and the two action distributions they output.

Distributions are a few clear lines rather than distrax: we need sample, log-prob, entropy and
mode on a single observation (the rollout vmaps), and this keeps the traced graph small.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_async.envs import EnvSpec

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


def _orthonormal_columns(a: jax.Array) -> jax.Array:
    """Q of the QR decomposition of ``a [n, k]`` (n >= k) with diag(R) > 0, by Gram-Schmidt
    applied twice per column (as stable as Householder for this use)."""
    k = a.shape[1]

    def column(j: int, q: jax.Array) -> jax.Array:
        done = q * (jnp.arange(k) < j)  # the columns already orthonormalised
        v = q[:, j]
        v = v - done @ (done.T @ v)
        v = v - done @ (done.T @ v)
        return q.at[:, j].set(v / jnp.linalg.norm(v))

    return jax.lax.fori_loop(0, k, column, a)


def orthogonal(scale: float = math.sqrt(2)) -> Callable:
    """flax's orthogonal initializer (same matrix for the same key, to float error), without LAPACK.

    flax computes ``Q`` with a LAPACK QR. Under ``vmap`` (many seeds or configs) that becomes a
    *batched* LAPACK call, which deadlocks XLA:CPU (jaxlib 0.10.2) when two executions reach it at
    once (sweeps over devices, the async runner's actor and learner); see DESIGN.md. Gram-Schmidt
    is plain vectorisable arithmetic: no LAPACK, no deadlock, and about 0.1 s less compile time
    per layer than the QR custom call.
    """

    def init(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        rows, cols = math.prod(shape[:-1]), shape[-1]
        a = jax.random.normal(key, (max(rows, cols), min(rows, cols)), jnp.float32)
        q = _orthonormal_columns(a)
        q = q.T if rows < cols else q
        return (scale * q).reshape(shape).astype(dtype)

    return init


ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


class MLP(nn.Module):
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for size in self.hidden_sizes:
            x = ACTIVATIONS[self.activation](nn.Dense(size, kernel_init=orthogonal())(x))
        return x


class MinAtarCNN(nn.Module):
    """The MinAtar paper's torso: one 3x3 conv with 16 channels, then dense layers."""

    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [..., H, W, C]
        act = ACTIVATIONS[self.activation]
        x = act(nn.Conv(16, (3, 3), padding="VALID", kernel_init=orthogonal())(x))
        x = x.reshape(*x.shape[:-3], -1)
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=orthogonal())(x))
        return x


class ActorCritic(nn.Module):
    """Separate actor and critic torsos; a categorical or diagonal-Gaussian policy head.

    (Stacking the two torsos with ``nn.vmap`` into batched matmuls was measured: 30% slower on
    XLA:CPU, which runs plain matmuls through its fast path and batched ones through a loop.)
    """

    discrete: bool
    action_dim: int
    torso: str = "mlp"  # "mlp" | "cnn"
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    log_std_init: float = 0.0

    def setup(self) -> None:
        torso_cls = MinAtarCNN if self.torso == "cnn" else MLP
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
            return Categorical(out)
        return DiagGaussian(out, jnp.broadcast_to(self.log_std, out.shape))

    def value(self, obs: jax.Array) -> jax.Array:
        return self.value_head(self.critic_torso(obs))[..., 0]


def actor_critic_for(
    spec: EnvSpec, torso: str, hidden_sizes: Sequence[int], activation: str
) -> ActorCritic:
    """The actor-critic for an env spec (``torso="auto"``: CNN for image observations)."""
    if torso == "auto":
        torso = "cnn" if len(spec.obs_shape) == 3 else "mlp"
    action_dim = spec.num_actions if spec.discrete else int(math.prod(spec.action_shape))
    return ActorCritic(spec.discrete, action_dim, torso, tuple(hidden_sizes), activation)
