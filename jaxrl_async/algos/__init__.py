"""The algorithm registry: ``name -> (Config, make_algorithm)``. One line per algorithm."""

from __future__ import annotations

from jaxrl_async.algos import impala, ppo
from jaxrl_async.algos.base import Algorithm, LearnerState, Trajectory

REGISTRY = {
    "ppo": (ppo.PPOConfig, ppo.make_algorithm),
    "impala": (impala.ImpalaConfig, impala.make_algorithm),
}


def make_algorithm(cfg, spec) -> Algorithm:
    """The algorithm bundle for a config (dispatch on ``cfg.name``)."""
    return REGISTRY[cfg.name][1](cfg, spec)


__all__ = ["REGISTRY", "Algorithm", "LearnerState", "Trajectory", "make_algorithm"]
