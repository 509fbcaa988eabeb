"""The algorithm registry: ``name -> (Config, make_algorithm)``. One line per algorithm."""

from __future__ import annotations

from jaxrl_async.algos import dqn, impala, ppo, pqn, recurrent_ppo, sac
from jaxrl_async.algos.base import Algorithm, LearnerState, Trajectory

REGISTRY = {
    "ppo": (ppo.PPOConfig, ppo.make_algorithm),
    "impala": (impala.ImpalaConfig, impala.make_algorithm),
    "dqn": (dqn.DQNConfig, dqn.make_algorithm),
    "pqn": (pqn.PQNConfig, pqn.make_algorithm),
    "sac": (sac.SACConfig, sac.make_algorithm),
    "recurrent_ppo": (recurrent_ppo.RecurrentPPOConfig, recurrent_ppo.make_algorithm),
}


def make_algorithm(cfg, spec) -> Algorithm:
    """The algorithm bundle for a config (dispatch on ``cfg.name``)."""
    return REGISTRY[cfg.name][1](cfg, spec)


__all__ = ["REGISTRY", "Algorithm", "LearnerState", "Trajectory", "make_algorithm"]
