"""jaxrl_async: fast, vectorized, asynchronous reinforcement learning in JAX."""

from jaxrl_async import distributed
from jaxrl_async.algos.impala import ImpalaConfig
from jaxrl_async.algos.ppo import PPOConfig
from jaxrl_async.config import AsyncConfig, SyncConfig
from jaxrl_async.envs import EnvSpec, env_spec, make_env
from jaxrl_async.runners.common import RunState, TrainResult
from jaxrl_async.train import make_train, train

__all__ = [
    "distributed",
    "PPOConfig",
    "ImpalaConfig",
    "SyncConfig",
    "AsyncConfig",
    "EnvSpec",
    "env_spec",
    "make_env",
    "make_train",
    "train",
    "RunState",
    "TrainResult",
]
