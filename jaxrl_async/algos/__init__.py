"""The algorithm registry: ``name -> (Config, make_algorithm)``, one line per algorithm; and the
config registry built on it (``known_configs``, ``from_dict``: a saved config back to its class)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from jaxrl_async.algos import dqn, impala, ppo, pqn, recurrent_ppo, sac
from jaxrl_async.algos.base import Algorithm, LearnerState, Trajectory
from jaxrl_async.config.shared import AsyncConfig, SyncConfig

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


def known_configs() -> dict[str, type]:
    """Every config class by name: the algorithms' (from the registry) and the runners'."""
    classes = {entry[0].__name__: entry[0] for entry in REGISTRY.values()}
    classes.update({cls.__name__: cls for cls in (SyncConfig, AsyncConfig)})
    return classes


def from_dict(data: dict[str, Any], ignore: Sequence[str] = ()) -> Any:
    """Rebuild (and so validate) a config written by ``to_dict``; keys in ``ignore`` are
    skipped, any other unknown key is an error."""
    classes = known_configs()
    cls = classes.get(data.get("_type"))
    if cls is None:
        raise ValueError(f"unknown config type {data.get('_type')!r}; known: {sorted(classes)}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(data.keys() - names - {"_type", *ignore})
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {', '.join(unknown)}")
    kwargs = {}
    for name in names & data.keys():
        value = data[name]
        if isinstance(value, dict) and "_type" in value:
            value = from_dict(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


__all__ = ["REGISTRY", "Algorithm", "LearnerState", "Trajectory", "from_dict", "known_configs",
           "make_algorithm"]
