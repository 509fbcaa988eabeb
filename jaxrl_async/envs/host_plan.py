"""A host-env run's envs before any is made (``HostEnvPlan``): what one env looks like, what the
policy sees, what is normalised, and how to make a stream of them.

Built once from a config's env fields, above the runner (``runners.run``), and handed to the
host actors: the runner asks the env layer nothing more, and everything about the env id (its
spaces, its backend, whether it steps in worker processes) is read here, in one place.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaxrl_async.envs.core import EnvSpec
from jaxrl_async.envs.host import (
    HostVecEnv,
    InlineVecEnv,
    host_env_spec,
    source_obs_dtype,
    split_host_id,
)
from jaxrl_async.envs.host_envpool import EnvPoolVecEnv
from jaxrl_async.envs.host_normalize import HostNormState, Normalization, init_state
from jaxrl_async.envs.host_workers import WorkerVecEnv

HOST_VECTORIZATIONS = ("workers", "inline")
"""How gymnasium host envs step: in worker processes (``WorkerVecEnv``) or in the calling
thread (``InlineVecEnv``)."""
NOT_NORMALIZED = Normalization(obs=False, reward=False, gamma=0.99, obs_clip=10.0,
                               reward_clip=10.0)


@dataclasses.dataclass(frozen=True)
class HostEnvPlan:
    """The host envs of one run (see the module docstring); ``plan_host_envs`` builds it."""

    env_id: str  # "gymnasium:<id>" or "envpool:<id>"
    spec: EnvSpec  # one env's, observations cast to 32 bits (envs/host.py)
    policy_spec: EnvSpec  # what the policy and learner see: float32 observations if normalised
    source_obs_dtype: np.dtype  # the dtype the env itself returns observations in
    normalization: Normalization
    vectorization: str  # gymnasium envs: "workers" or "inline"; EnvPool: its own pools
    threads: int  # per worker (0: one per env); EnvPool: C++ threads per pool (0: its default)
    step_timeout: float  # seconds a worker may take for a step (0: no limit)

    @property
    def backend(self) -> str:
        """``"gymnasium"`` or ``"envpool"``: the env id's prefix."""
        return split_host_id(self.env_id)[0]

    @property
    def in_workers(self) -> bool:
        """Whether the envs step in worker processes (gymnasium's "workers")."""
        return self.backend == "gymnasium" and self.vectorization == "workers"

    def fresh_normalizer(self, num_envs: int) -> HostNormState | tuple:
        """The normalisation state of ``num_envs`` fresh envs (``()``: nothing normalised)."""
        return init_state(self.normalization, num_envs, self.spec.obs_shape,
                          self.source_obs_dtype)

    def make(self, num_envs: int, groups: int = 1, workers: int = 0,
             **options: Any) -> HostVecEnv:
        """``num_envs`` envs in ``groups`` equal groups; gymnasium's "workers" in ``workers``
        processes (0: the cores). ``options`` go to ``envpool.make``."""
        if self.backend == "envpool":
            return EnvPoolVecEnv(self.spec, num_envs, groups, self.threads, **options)
        if self.vectorization == "inline":
            return InlineVecEnv(self.spec, num_envs, groups)
        return WorkerVecEnv(self.spec, num_envs, groups, workers, self.threads, self.step_timeout)


def plan_host_envs(env_id: str, *, flatten_obs: bool = False,
                   normalization: Normalization = NOT_NORMALIZED,
                   vectorization: str = "workers", threads: int = 0,
                   step_timeout: float = 0.0) -> HostEnvPlan:
    """The plan of host env ``env_id``'s envs (reads its spaces off one instance, once).
    ``ValueError`` for an unknown id, a missing package or an unknown ``vectorization``."""
    if vectorization not in HOST_VECTORIZATIONS:
        raise ValueError(f"vectorization must be one of {HOST_VECTORIZATIONS}, got "
                         f"{vectorization!r}")
    spec = host_env_spec(env_id, flatten_obs=flatten_obs)
    policy_spec = (dataclasses.replace(spec, obs_dtype=np.dtype(np.float32))
                   if normalization.obs else spec)
    return HostEnvPlan(env_id, spec, policy_spec, source_obs_dtype(env_id), normalization,
                       vectorization, threads, step_timeout)
