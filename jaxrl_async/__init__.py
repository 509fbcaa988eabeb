"""jaxrl_async: fast, vectorized, asynchronous reinforcement learning in JAX."""

from jaxrl_async.algos.dqn import DQNConfig
from jaxrl_async.algos.impala import ImpalaConfig
from jaxrl_async.algos.ppo import PPOConfig
from jaxrl_async.algos.pqn import PQNConfig
from jaxrl_async.algos.recurrent_ppo import RecurrentPPOConfig
from jaxrl_async.algos.sac import SACConfig
from jaxrl_async.config.shared import AsyncConfig, SyncConfig
from jaxrl_async.envs import EnvSpec, env_spec, make_env, register_env
from jaxrl_async.run import distributed
from jaxrl_async.run.checkpoint import CheckpointError
from jaxrl_async.run.compile_cache import use_compile_cache
from jaxrl_async.run.evaluate import evaluate, save_gif
from jaxrl_async.run.tracking import WandbSink
from jaxrl_async.run.train import load_config, make_train, train
from jaxrl_async.runners.state import RunState, TrainingDiverged, TrainingInterrupted, TrainResult
from jaxrl_async.search.optuna_search import OptunaResult, optuna_search
from jaxrl_async.search.pbt import pbt, resume_population, successive_halving
from jaxrl_async.search.population import Space
from jaxrl_async.search.population_result import PopulationResult
from jaxrl_async.search.sweep import (
    LogUniform,
    SweepResult,
    Uniform,
    random_search,
    resume_sweep,
    sweep,
    test_on_seeds,
    use_cpu_cores,
)
from jaxrl_async.version import __version__

__all__ = [
    "distributed",
    "PPOConfig",
    "ImpalaConfig",
    "DQNConfig",
    "PQNConfig",
    "SACConfig",
    "RecurrentPPOConfig",
    "SyncConfig",
    "AsyncConfig",
    "EnvSpec",
    "env_spec",
    "make_env",
    "register_env",
    "make_train",
    "train",
    "load_config",
    "evaluate",
    "save_gif",
    "sweep",
    "random_search",
    "resume_sweep",
    "SweepResult",
    "optuna_search",
    "OptunaResult",
    "test_on_seeds",
    "pbt",
    "successive_halving",
    "resume_population",
    "Space",
    "PopulationResult",
    "Uniform",
    "LogUniform",
    "use_cpu_cores",
    "use_compile_cache",
    "CheckpointError",
    "TrainingInterrupted",
    "TrainingDiverged",
    "RunState",
    "TrainResult",
    "WandbSink",
    "__version__",
]
