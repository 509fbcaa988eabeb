# The two commands: `make train` and `make test`. Both build .venv from pyproject.toml first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNNER ?= sync
ARGS ?=

.PHONY: setup train test test-suites bench bench-sweep docs lint clean

setup: $(STAMP)

# Rebuilt only when missing or older than pyproject.toml.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,suites]"
	touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/jaxrl-async train --algo ppo --env CartPole-v1 --runner $(RUNNER) $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile $(ARGS)

# Every env suite's tests, PPO on each under both runners and Craftax included (minutes of
# compiles on a CPU; make test runs the contract tests and PPO on Jumanji).
test-suites: $(STAMP)
	JRA_SUITE_PPO=1 $(PY) -m pytest -q tests/test_env_suites.py $(ARGS)

bench: $(STAMP)
	$(PY) experiments/bench_sync.py --preset cartpole-ref --baseline
	$(PY) experiments/bench_sync.py --preset cartpole-ref --baseline --fast-compile
	$(PY) experiments/bench_sync.py --preset cartpole-large --baseline --repeats 1
	$(PY) experiments/bench_async.py
	$(PY) experiments/bench_algos.py

bench-sweep: $(STAMP)
	$(PY) experiments/bench_sweep.py

# docs/cli.md is generated from the CLI's parsers and the configs (tests/test_docs.py checks it).
docs: $(STAMP)
	$(PY) experiments/gen_cli_docs.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) runs .pytest_cache
