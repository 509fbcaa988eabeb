# The two commands: `make train` and `make test`. Both build .venv from pyproject.toml first
# (with the test, wandb, optuna, envpool and suites extras: the EnvPool/Atari and env-suite tests run in `make test`).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNNER ?= sync
SUITE ?= classic
ARGS ?=

.PHONY: setup setup-latest train-latest test-latest try-newest train test test-suites fuzz bench bench-atari bench-sweep bench-peers bench-host-envs \
	bench-scaling bench-scaling-full bench-tracking bench-pbt bench-search accelerator-check accelerator-offline-check reproduce docs lint \
	check-install check-floors image test-image clean

setup: $(STAMP)

# Rebuilt only when missing or older than pyproject.toml.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,wandb,optuna,envpool,suites]"
	touch $(STAMP)

# The second test environment: Python 3.12 or 3.13 (found by .ci/find_python: pyenv's
# versions/3.12.*, 3.13.*, or python3.12 on PATH; or PYTHON_LATEST=/path/to/python3.12) with the
# newest versions the pins allow (jax 0.11.x), the same extras as .venv.
VENV_LATEST := .venv-latest
PY_LATEST := $(VENV_LATEST)/bin/python
STAMP_LATEST := $(VENV_LATEST)/.installed

setup-latest: $(STAMP_LATEST)

$(STAMP_LATEST): pyproject.toml
	test -x $(PY_LATEST) || { python=$${PYTHON_LATEST:-$$(.ci/find_python)} && \
		$$python -m venv $(VENV_LATEST); }
	$(PY_LATEST) -m pip install --quiet --upgrade pip
	$(PY_LATEST) -m pip install --quiet --upgrade --upgrade-strategy eager \
		-e ".[test,wandb,optuna,envpool,suites]"
	$(PY_LATEST) -c 'import sys, jax; print("$(VENV_LATEST): Python", sys.version.split()[0], "jax", jax.__version__)'
	touch $(STAMP_LATEST)

train-latest: $(STAMP_LATEST)
	$(VENV_LATEST)/bin/jaxrl-async train --algo ppo --env CartPole-v1 --runner $(RUNNER) $(ARGS)

test-latest: $(STAMP_LATEST)
	$(PY_LATEST) -m pytest -q -n 2 --dist loadfile $(ARGS)

# Can the newest jax (past our pin) install beside gymnax and the rest? pip's resolver in
# --dry-run mode (nothing is installed) says; the script names what blocks it.
try-newest: $(STAMP_LATEST)
	$(PY_LATEST) experiments/checks/try_newest.py $(ARGS)

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
	$(PY) experiments/bench/bench_sync.py --preset cartpole-ref --baseline
	$(PY) experiments/bench/bench_sync.py --preset cartpole-ref --baseline --fast-compile
	$(PY) experiments/bench/bench_sync.py --preset cartpole-large --baseline --repeats 1
	$(PY) experiments/bench/bench_async.py
	$(PY) experiments/bench/bench_algos.py
	$(PY) experiments/bench/bench_conv.py

# Atari (EnvPool Pong, IMPALA, Nature CNN) on host actors: collection against EnvPool's raw rate.
bench-atari: $(STAMP)
	$(PY) experiments/bench/bench_host_envs.py --cases envpool:Pong-v5:64

bench-sweep: $(STAMP)
	$(PY) experiments/bench/bench_sweep.py

# PBT and successive halving against a grid and a random search at equal compute (PPO on
# Pendulum, 16 configs x 3 seeds; PQN on CartPole, 16 x 5 seeds and 5 held-out; one device;
# minutes on a CPU), curves into docs/img.
# Random search, batched TPE and PBT on held-out seeds; batched Optuna against its usual loop.
bench-search: $(STAMP)
	$(PY) experiments/bench/bench_search.py $(ARGS)

bench-pbt: $(STAMP)
	$(PY) experiments/bench/bench_pbt.py --plot docs/img/pbt_pendulum.png
	$(PY) experiments/bench/bench_pbt.py --task pqn-cartpole --population 16 --seeds 5 --heldout-seeds 5 \
		--total-timesteps 50176 --ready-every 5 --plot docs/img/pbt_pqn_cartpole.png

# Ours, rejax's PPO and the PureJaxRL-style baseline side by side in one process: a single
# CartPole run and a 16-config x 2-seed sweep vmapped on one device (needs the bench extra).
bench-peers: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) experiments/bench/bench_peers.py
	$(PY) experiments/bench/profile_peers.py
	$(PY) experiments/bench/compile_sweep.py

# Host envs at their own speed: envs that wait (sleep 1/5/20 ms, 64 and 256 envs), CPU-bound envs
# (spin) and EnvPool Pong against their own limits. Not part of `make test`.
bench-host-envs: $(STAMP)
	$(PY) experiments/bench/bench_host_envs.py

# How cost grows (reduced grids, a few minutes); PNG plots into docs/img.
bench-scaling: $(STAMP)
	$(PY) experiments/bench/bench_scaling.py --plots docs/img

bench-scaling-full: $(STAMP)
	$(PY) experiments/bench/bench_scaling.py --full --plots docs/img

# On a machine with an NVIDIA GPU: fresh venv with CUDA jax, benchmarks, one JSON line.
accelerator-check:
	bash experiments/checks/accelerator_check.sh

# The container image (Containerfile; docs/scaling.md#containers). `make image` builds it with
# podman or docker from the default base (python:3.12-slim, from a registry); a CUDA image:
# make image IMAGE_BASE=nvidia/cuda:12.8.1-base-ubuntu24.04 IMAGE=jaxrl_async:cuda
CONTAINER ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
IMAGE ?= jaxrl_async
IMAGE_BASE ?=
IMAGE_ARGS ?=

image:
	$(CONTAINER) build -f Containerfile -t $(IMAGE) $(if $(IMAGE_BASE),--build-arg BASE=$(IMAGE_BASE)) $(IMAGE_ARGS) .

# Builds it on a local Debian base (no registry; podman, runc, debootstrap, as root) and runs
# jaxrl-async train and the notebooks inside it (experiments/checks/image_check.sh).
test-image:
	bash experiments/checks/image_check.sh $(ARGS)

# The GPU machine's install path here, on the CPU: a Python 3.12 "image" with jax 0.11.2, the
# wheels from experiments/checks/gpu_wheels.sh, pip --no-index (docs/results.md#accelerator-check).
accelerator-offline-check:
	bash experiments/checks/accelerator_offline_check.sh $(ARGS)

# Training with and without the W&B sink (offline): SPS and the sink's host time.
bench-tracking: $(STAMP)
	$(PY) experiments/bench/bench_tracking.py

# The wheel in a fresh venv outside the repository, with its dependencies from the index
# (make test does the same with this venv's dependencies: tests/test_packaging.py).
check-install: $(STAMP)
	$(PY) experiments/checks/install_check.py

# The same with every dependency at its declared floor (pkg>=X installed as X).
check-floors: $(STAMP)
	$(PY) experiments/checks/install_check.py --lowest

# Published results side by side (docs/results.md): SUITE=classic, minatar-breakout, ...
reproduce: $(STAMP)
	$(PY) -m experiments.reproduce --suite $(SUITE) $(ARGS)

# docs/cli.md is generated from the CLI's parsers and the configs (tests/test_docs.py checks it).
docs: $(STAMP)
	$(PY) experiments/checks/gen_cli_docs.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) $(VENV_LATEST) runs .pytest_cache
