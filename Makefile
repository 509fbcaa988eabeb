# The two commands: `make train` and `make test`. Both build .venv from pyproject.toml first
# (with the test, envpool and suites extras: the EnvPool/Atari and env-suite tests run in `make test`).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNNER ?= sync
SUITE ?= classic
ARGS ?=

.PHONY: setup train test test-suites fuzz bench bench-atari bench-sweep bench-peers bench-host-envs \
	bench-scaling bench-scaling-full bench-tracking bench-pbt accelerator-check reproduce docs lint \
	check-install check-floors clean

setup: $(STAMP)

# Rebuilt only when missing or older than pyproject.toml.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,wandb,envpool,suites]"
	touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/jaxrl-async train --algo ppo --env CartPole-v1 --runner $(RUNNER) $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile $(ARGS)

# Every env suite's tests, PPO on each under both runners and Craftax included (minutes of
# compiles on a CPU; make test runs the contract tests and PPO on Jumanji).
test-suites: $(STAMP)
	JRA_SUITE_PPO=1 $(PY) -m pytest -q tests/test_env_suites.py $(ARGS)

# Config fuzzing with many more examples than make test (docs/reliability.md): prints the counts.
fuzz: $(STAMP)
	JRA_FUZZ=1 $(PY) -m pytest tests/test_fuzz_configs.py -q -s -p no:cacheprovider $(ARGS)

bench: $(STAMP)
	$(PY) experiments/bench_sync.py --preset cartpole-ref --baseline
	$(PY) experiments/bench_sync.py --preset cartpole-ref --baseline --fast-compile
	$(PY) experiments/bench_sync.py --preset cartpole-large --baseline --repeats 1
	$(PY) experiments/bench_async.py
	$(PY) experiments/bench_algos.py
	$(PY) experiments/bench_conv.py

# Atari (EnvPool) on host actor threads, Nature CNN: SPS with 1, 2 and 4 threads.
bench-atari: $(STAMP)
	$(PY) experiments/bench_host_envs.py --env envpool:Pong-v5 --num-steps 16 --update-epochs 1 \
		--num-minibatches 1 --hidden 64 --updates 4 --rounds 1

bench-sweep: $(STAMP)
	$(PY) experiments/bench_sweep.py

# PBT and successive halving against a grid and a random search at equal compute (PPO on
# Pendulum, 16 configs x 3 seeds each, one device; minutes on a CPU), curves into docs/img.
bench-pbt: $(STAMP)
	$(PY) experiments/bench_pbt.py --plot docs/img/pbt_pendulum.png

# Ours, rejax's PPO and the PureJaxRL-style baseline side by side in one process: a single
# CartPole run and a 16-config x 2-seed sweep vmapped on one device (needs the bench extra).
bench-peers: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) experiments/bench_peers.py
	$(PY) experiments/profile_peers.py
	$(PY) experiments/compile_sweep.py

# Host envs that wait (sleep, GIL released) over 1/5/20 ms and 1/2/4/8 actor threads; then the
# CPU-bound case (spin, GIL held) in subprocesses. Not part of `make test`.
bench-host-envs: $(STAMP)
	$(PY) experiments/bench_host_envs.py
	$(PY) experiments/bench_host_envs.py --latency-ms 1 5 20 --rounds 1
	$(PY) experiments/bench_host_envs.py --latency-ms 1 --mode spin --vectorization async --threads 1 2 4 --rounds 1

# How cost grows (reduced grids, a few minutes); PNG plots into docs/img.
bench-scaling: $(STAMP)
	$(PY) experiments/bench_scaling.py --plots docs/img

bench-scaling-full: $(STAMP)
	$(PY) experiments/bench_scaling.py --full --plots docs/img

# On a machine with an NVIDIA GPU: fresh venv with CUDA jax, benchmarks, one JSON line.
accelerator-check:
	bash experiments/accelerator_check.sh

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
