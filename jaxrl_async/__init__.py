"""jaxrl_async: fast, vectorized, asynchronous reinforcement learning in JAX."""

from jaxrl_async.algos.dqn import DQNConfig
from jaxrl_async.algos.ppo import PPOConfig
from jaxrl_async.algos.pqn import PQNConfig
from jaxrl_async.algos.recurrent_ppo import RecurrentPPOConfig
from jaxrl_async.algos.sac import SACConfig
from jaxrl_async.config import SyncConfig
from jaxrl_async.envs import EnvSpec, env_spec, make_env
from jaxrl_async.runners.common import RunState, TrainResult
from jaxrl_async.train import make_train, train

__all__ = [
    "PPOConfig",
    "DQNConfig",
    "PQNConfig",
    "SACConfig",
    "RecurrentPPOConfig",
    "SyncConfig",
    "EnvSpec",
    "env_spec",
    "make_env",
    "make_train",
    "train",
    "RunState",
    "TrainResult",
]
