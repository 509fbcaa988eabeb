"""flax.linen networks and the two action distributions they output.

Distributions are a few clear lines rather than distrax: we need sample, log-prob, entropy and
mode on a single observation (the rollout vmaps), and this keeps the traced graph small.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_async.conv import Conv, scale_frames
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


def _orthonormal_columns(a: jax.Array, num_columns: jax.Array | int) -> jax.Array:
    """Q of the QR decomposition of the first ``num_columns`` columns of ``a [n, m]`` (n >= m),
    with diag(R) > 0: Gram-Schmidt applied twice per column (as stable as Householder here).
    Columns from ``num_columns`` on are left as they are (padding, see ``init_params``)."""
    m = a.shape[1]

    def column(j: int, q: jax.Array) -> jax.Array:
        done = q * (jnp.arange(m) < j)  # the columns already orthonormalised
        v = q[:, j]
        v = v - done @ (done.T @ v)
        v = v - done @ (done.T @ v)
        v = jnp.where(j < num_columns, v / jnp.maximum(jnp.linalg.norm(v), 1e-30), q[:, j])
        return q.at[:, j].set(v)

    return jax.lax.fori_loop(0, m, column, a)


def _orthogonal_matrix(a: jax.Array, rows: int, cols: int) -> jax.Array:
    """flax's orthogonal ``[rows, cols]`` matrix from the normal draw ``a [max, min]``."""
    q = _orthonormal_columns(a, min(rows, cols))
    return q.T if rows < cols else q


class _Recorder:
    """While active, ``orthogonal`` initializers return zeros and log ``(shape, scale)``."""

    calls: list[tuple[tuple[int, ...], float]] | None = None


def orthogonal(scale: float = math.sqrt(2)) -> Callable:
    """flax's orthogonal kernel initializer (the same distribution), without LAPACK.

    flax computes ``Q`` with a LAPACK QR. Under ``vmap`` (many seeds or configs) that becomes a
    *batched* LAPACK call, which deadlocks XLA:CPU (jaxlib 0.10.2) when two executions reach it at
    once (sweeps over devices, the async runner's actor and learner; docs/design.md). Gram-Schmidt
    is plain vectorisable arithmetic: no LAPACK, no deadlock. ``init_params`` goes further and
    draws every such kernel of a network in one call.
    """

    def init(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        if _Recorder.calls is not None:
            _Recorder.calls.append((tuple(shape), scale))
            return jnp.zeros(shape, dtype)
        rows, cols = math.prod(shape[:-1]), shape[-1]
        a = jax.random.normal(key, (max(rows, cols), min(rows, cols)), jnp.float32)
        return (scale * _orthogonal_matrix(a, rows, cols)).reshape(shape).astype(dtype)

    return init


def _in_creation_order(tree: Any, path: tuple = ()):
    """(path, leaf) of a params dict in insertion (= creation) order, unlike ``jax.tree``."""
    if isinstance(tree, dict):
        for name, sub in tree.items():
            yield from _in_creation_order(sub, (*path, name))
    else:
        yield path, tree


def _set(tree: dict, path: tuple, value: Any) -> None:
    for name in path[:-1]:
        tree = tree[name]
    tree[path[-1]] = value


def init_params(module: nn.Module, key: jax.Array, *example_inputs: Any) -> Any:
    """``module.init`` with every ``orthogonal`` kernel drawn at once: one normal draw and one
    batched Gram-Schmidt for the whole network instead of a draw per layer. The result has the
    same distribution as flax's orthogonal init and compiles faster (XLA:CPU spends much of a
    small program's compile time on random draws; figures in docs/results.md)."""
    init_key, draw_key = jax.random.split(key)
    _Recorder.calls = []
    try:
        params = module.init(init_key, *example_inputs)
        calls = _Recorder.calls
    finally:
        _Recorder.calls = None
    kernels = [(p, leaf) for p, leaf in _in_creation_order(params) if p[-1] == "kernel"]
    if [tuple(leaf.shape) for _, leaf in kernels] != [shape for shape, _ in calls]:
        raise ValueError("init_params: every kernel must use networks.orthogonal(...)")
    if not calls:
        return params

    dims = [(math.prod(shape[:-1]), shape[-1]) for shape, _ in calls]  # (rows, cols)
    n = max(max(r, c) for r, c in dims)
    m = max(min(r, c) for r, c in dims)
    # (Philox would compile faster here but fails to lower under shard_map in JAX 0.10.2,
    # and "rbg" gives different numbers under vmap: threefry keeps vmap == one-by-one.)
    # Drawn flat, then shaped: the same numbers as a [L, n, m] draw (threefry counts elements in
    # order), but one axis compiles several times faster on XLA:CPU (docs/results.md).
    draw = jax.random.normal(draw_key, (len(calls) * n * m,)).reshape(len(calls), n, m)
    mask = jnp.stack([(jnp.arange(n)[:, None] < max(r, c)) & (jnp.arange(m)[None] < min(r, c))
                      for r, c in dims])
    q = jax.vmap(_orthonormal_columns)(draw * mask, jnp.array([min(r, c) for r, c in dims]))
    params = jax.tree.map(lambda x: x, params)  # a copy we may write into
    for (path, leaf), (shape, scale), (rows, cols), q_l in zip(kernels, calls, dims, q):
        block = q_l[: max(rows, cols), : min(rows, cols)]
        matrix = block.T if rows < cols else block
        _set(params, path, (scale * matrix).reshape(shape).astype(leaf.dtype))
    return params


ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


class MLP(nn.Module):
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    layer_norm: bool = False  # Dense -> LayerNorm -> activation (PQN)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for size in self.hidden_sizes:
            x = nn.Dense(size, kernel_init=orthogonal())(x)
            x = ACTIVATIONS[self.activation](nn.LayerNorm()(x) if self.layer_norm else x)
        return x


class MinAtarCNN(nn.Module):
    """The MinAtar paper's torso: one 3x3 conv with 16 channels, then dense layers. The conv is
    ``conv.Conv`` (the parameters of ``nn.Conv``, fast on a CPU)."""

    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [..., H, W, C]
        act = ACTIVATIONS[self.activation]
        norm = (lambda y: nn.LayerNorm()(y)) if self.layer_norm else (lambda y: y)
        x = act(norm(Conv(16, (3, 3), kernel_init=orthogonal())(scale_frames(x))))
        x = x.reshape(*x.shape[:-3], -1)
        for size in self.hidden_sizes:
            x = act(norm(nn.Dense(size, kernel_init=orthogonal())(x)))
        return x


class NatureCNN(nn.Module):
    """The Nature-DQN torso (Mnih et al. 2015) on stacked Atari frames ``[..., F, 84, 84]``
    (frames first, as EnvPool and ALE stack them; uint8, scaled inside): convs 8x8/4 (32),
    4x4/2 (64), 3x3/1 (64), then the dense layers (512 in the paper; ``hidden_sizes``).
    ReLU after the convs; ``activation`` after the dense layers."""

    hidden_sizes: Sequence[int] = (512,)
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [..., F, H, W]
        act = ACTIVATIONS[self.activation]
        norm = (lambda y: nn.LayerNorm()(y)) if self.layer_norm else (lambda y: y)
        x = jnp.moveaxis(scale_frames(x), -3, -1)  # [..., H, W, F]
        for features, size, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = nn.relu(norm(Conv(features, (size, size), (stride, stride),
                                  kernel_init=orthogonal())(x)))
        x = x.reshape(*x.shape[:-3], -1)
        for size in self.hidden_sizes:
            x = act(norm(nn.Dense(size, kernel_init=orthogonal())(x)))
        return x


TORSOS = {"mlp": MLP, "cnn": MinAtarCNN, "nature": NatureCNN}


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


def resolve_torso(torso: str, obs_shape: Sequence[int]) -> str:
    """``"auto"``: the Nature-DQN CNN for stacked Atari frames ``[F, 84, 84]``, the MinAtar CNN
    for other image observations ``[H, W, C]``, else the MLP."""
    if torso == "auto":
        if len(obs_shape) == 3 and tuple(obs_shape[1:]) == (84, 84):
            return "nature"
        return "cnn" if len(obs_shape) == 3 else "mlp"
    return torso


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
