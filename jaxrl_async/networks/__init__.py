"""The networks: ``heads`` (actor-critics, Q-networks and the action distributions),
``torsos`` (MLP and CNNs), ``initializers`` (orthogonal, in creation order) and ``conv``
(a convolution fast on a CPU)."""

from jaxrl_async.networks.heads import (
    ActorCritic,
    Categorical,
    DiagGaussian,
    EpsilonGreedy,
    QNetwork,
    RecurrentActorCritic,
    SquashedGaussianActor,
    TanhGaussian,
    TwinQ,
    actor_critic_for,
    mask_logits,
    q_network_for,
)
from jaxrl_async.networks.initializers import init_params, orthogonal
from jaxrl_async.networks.torsos import (
    ACTIVATIONS,
    MLP,
    TORSOS,
    MinAtarCNN,
    NatureCNN,
    resolve_torso,
)

__all__ = [
    "ACTIVATIONS", "MLP", "TORSOS", "ActorCritic", "Categorical", "DiagGaussian",
    "EpsilonGreedy", "MinAtarCNN", "NatureCNN", "QNetwork", "RecurrentActorCritic",
    "SquashedGaussianActor", "TanhGaussian", "TwinQ", "actor_critic_for", "init_params",
    "mask_logits", "orthogonal", "q_network_for", "resolve_torso",
]
