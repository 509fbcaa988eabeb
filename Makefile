# The two commands: `make train` and `make test`. Both build .venv from pyproject.toml first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNNER ?= sync
ARGS ?=

.PHONY: setup train test bench bench-sweep bench-tracking docs lint check-install \
	check-floors clean

setup: $(STAMP)

# Rebuilt only when missing or older than pyproject.toml.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,wandb]"
	touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/jaxrl-async train --algo ppo --env CartPole-v1 --runner $(RUNNER) $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile $(ARGS)

bench: $(STAMP)
	$(PY) experiments/bench_sync.py --preset cartpole-ref --baseline
	$(PY) experiments/bench_sync.py --preset cartpole-ref --baseline --fast-compile
	$(PY) experiments/bench_sync.py --preset cartpole-large --baseline --repeats 1
	$(PY) experiments/bench_async.py
	$(PY) experiments/bench_algos.py

bench-sweep: $(STAMP)
	$(PY) experiments/bench_sweep.py

# Training with and without the W&B sink (offline): SPS and the sink's host time.
bench-tracking: $(STAMP)
	$(PY) experiments/bench_tracking.py

# The wheel in a fresh venv outside the repository, with its dependencies from the index
# (make test does the same with this venv's dependencies: tests/test_packaging.py).
check-install: $(STAMP)
	$(PY) experiments/install_check.py

# The same with every dependency at its declared floor (pkg>=X installed as X).
check-floors: $(STAMP)
	$(PY) experiments/install_check.py --lowest

# docs/cli.md is generated from the CLI's parsers and the configs (tests/test_docs.py checks it).
docs: $(STAMP)
	$(PY) experiments/gen_cli_docs.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) runs .pytest_cache
