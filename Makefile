# The two commands: `make train` and `make test`. Both build .venv from pyproject.toml first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNNER ?= sync
SUITE ?= classic
ARGS ?=

.PHONY: setup train test bench bench-sweep reproduce docs lint clean

setup: $(STAMP)

# Rebuilt only when missing or older than pyproject.toml.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
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

# Published results side by side (docs/results.md): SUITE=classic, minatar-breakout, ...
reproduce: $(STAMP)
	$(PY) -m experiments.reproduce --suite $(SUITE) $(ARGS)

# docs/cli.md is generated from the CLI's parsers and the configs (tests/test_docs.py checks it).
docs: $(STAMP)
	$(PY) experiments/gen_cli_docs.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) runs .pytest_cache
