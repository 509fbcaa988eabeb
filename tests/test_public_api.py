"""The public face: ``import jaxrl_async as jra`` exposes the names it did before the modules
moved into their packages (issue 47), and the submodules the docs reach through ``jra.``."""

import jaxrl_async as jra

PUBLIC = [
    "AsyncConfig", "CheckpointError", "DQNConfig", "EnvSpec", "ImpalaConfig", "LogUniform",
    "PPOConfig", "PQNConfig", "PopulationResult", "RecurrentPPOConfig", "RunState", "SACConfig",
    "Space", "SweepResult", "SyncConfig", "TrainResult", "TrainingDiverged",
    "TrainingInterrupted", "Uniform", "WandbSink", "__version__", "distributed", "env_spec",
    "evaluate", "load_config", "make_env", "make_train", "pbt", "random_search",
    "register_env", "resume_population", "save_gif", "successive_halving", "sweep", "train",
    "use_compile_cache", "use_cpu_cores",
    # issue 46: Optuna, batched, and held-out seeds
    "optuna_search", "OptunaResult", "test_on_seeds",
    # issue 45: sweeps in chunks, checkpointed, over every process's devices
    "resume_sweep",
]

# Reached as ``jra.<package>.<name>`` in the docs and notebooks.
SUBPACKAGES = ["algos", "distributed", "envs", "networks"]


def test_all_lists_exactly_the_public_names():
    assert sorted(jra.__all__) == sorted(PUBLIC)


def test_every_public_name_is_there():
    missing = [name for name in PUBLIC + SUBPACKAGES if not hasattr(jra, name)]
    assert not missing, missing


def test_the_functions_are_functions_not_modules():
    for name in ("evaluate", "pbt", "sweep", "train"):
        assert callable(getattr(jra, name)), name
