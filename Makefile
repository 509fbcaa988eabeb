# The two commands: `make train` and `make test`. Both build .venv from pyproject.toml first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNNER ?= sync
ARGS ?=

.PHONY: setup train test fuzz bench bench-sweep docs lint clean

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

# Config fuzzing with many more examples than make test (docs/reliability.md): prints the counts.
fuzz: $(STAMP)
	JRA_FUZZ=1 $(PY) -m pytest tests/test_fuzz_configs.py -q -s -p no:cacheprovider $(ARGS)

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
