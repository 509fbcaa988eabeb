"""Hyperparameter search over whole runs: ``sweep`` (grids and random search, many configs in
one compiled program) with ``sweep_result``; ``pbt`` (population based training and successive
halving) on ``population`` (search spaces), ``exploit`` (which member copies which),
``population_result`` and ``population_checkpoint``."""
