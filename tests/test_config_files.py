"""Settings files: ``train --config`` and ``sweep --config`` (YAML and JSON), ``jra.load_config``
of a file, a run directory's ``config.json`` as a ``--config``, flags overriding the file, and
errors naming the file, the key and what is allowed before anything compiles. Nothing here
trains: ``train``/``sweep`` are replaced by recorders where the command line would start them."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest

import jaxrl_async as jra
from jaxrl_async.cli.command import main
from jaxrl_async.config.shared import to_dict

REPO = Path(__file__).resolve().parents[1]
# the modules (the package's attributes of these names are the functions)
train_module = sys.modules["jaxrl_async.run.train"]
sweep_module = sys.modules["jaxrl_async.search.sweep"]
RUN_YAML = """
algo: ppo
env: CartPole-v1
total_timesteps: 5e5      # YAML 1.1 reads this as a string; the loader reads a number
num_envs: 8
lr: 1.0e-3
hidden_sizes: [32, 32]
anneal_lr: false
runner: {name: async, learner_devices: 2}
seed: 5
"""
EXPECTED = jra.PPOConfig(env="CartPole-v1", total_timesteps=500_000, num_envs=8, lr=1e-3,
                         hidden_sizes=(32, 32), anneal_lr=False,
                         runner=jra.AsyncConfig(learner_devices=2))


class Started(Exception):
    """Raised by the recorder instead of training."""


@pytest.fixture
def recorded(monkeypatch):
    """What ``jaxrl-async train``/``sweep`` would have started: (config, seed or spaces)."""
    seen = {}

    def fake_train(cfg, seed=0, **kw):
        seen.update(cfg=cfg, seed=seed, callbacks=kw.get("callbacks"))
        raise Started

    def fake_sweep(cfg, spec, *args, **kw):
        seen.update(cfg=cfg, spec=spec, args=args, kw=kw)
        raise Started

    monkeypatch.setattr(train_module, "train", fake_train)
    monkeypatch.setattr(sweep_module, "sweep", fake_sweep)
    monkeypatch.setattr(sweep_module, "random_search", fake_sweep)
    return seen


def run_cli(argv: list[str]) -> tuple[int | None, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except Started:
            code = None
    return code, err.getvalue()


# --------------------------------------------------------------------------- run files
def test_yaml_and_json_run_files_give_the_config_they_name(tmp_path):
    (tmp_path / "run.yaml").write_text(RUN_YAML)
    assert jra.load_config(tmp_path / "run.yaml") == EXPECTED
    data = {"algo": "ppo", "env": "CartPole-v1", "total_timesteps": 500000, "num_envs": 8,
            "lr": 0.001, "hidden_sizes": [32, 32], "anneal_lr": False,
            "runner": {"name": "async", "learner_devices": 2}}
    (tmp_path / "run.json").write_text(json.dumps(data))
    assert jra.load_config(tmp_path / "run.json") == EXPECTED


def test_a_run_directorys_config_json_is_a_valid_config(tmp_path, recorded):
    cfg = jra.DQNConfig(env="CartPole-v1", lr=3e-4, buffer_size=64, batch_size=16,
                        learning_starts=32, runner=jra.AsyncConfig(deterministic=False))
    (tmp_path / "config.json").write_text(json.dumps({"seed": 9, **to_dict(cfg)}))
    assert jra.load_config(tmp_path / "config.json") == cfg  # the file
    assert jra.load_config(tmp_path) == cfg  # the run directory, as before
    assert run_cli(["train", "--config", str(tmp_path / "config.json"), "--no-progress"])[0] \
        is None
    assert recorded["cfg"] == cfg and recorded["seed"] == 9


def test_flags_override_the_file(tmp_path, recorded):
    (tmp_path / "run.yaml").write_text(RUN_YAML)
    code, err = run_cli(["train", "--config", str(tmp_path / "run.yaml"), "--lr", "3e-3",
                         "--learner-devices", "1", "--seed", "2", "--no-progress"])
    assert code is None, err
    assert recorded["cfg"] == dataclasses.replace(EXPECTED, lr=3e-3, runner=jra.AsyncConfig())
    assert recorded["seed"] == 2 and recorded["callbacks"] == []  # no --track: no tracker
    code, _ = run_cli(["train", "--config", str(tmp_path / "run.yaml"), "--no-progress"])
    assert recorded["seed"] == 5  # the file's


@pytest.mark.parametrize("text, needles", [
    ("algo: ppo\nlearning_rate: 0.1\n", ["learning_rate", "allowed:", "lr"]),
    ("algo: ppo\nlr: fast\n", ["lr must be a number", "'fast'"]),
    ("algo: ppo\nlr: -1.0\n", ["PPOConfig.lr must be > 0", "-1.0"]),
    ("algo: ppo\nnum_envs: 2.5\n", ["num_envs must be an integer", "2.5"]),
    ("algo: ppo\nanneal_lr: 1\n", ["anneal_lr must be true or false"]),
    ("algo: ppo\nhidden_sizes: 64\n", ["hidden_sizes must be a list of integers"]),
    ("algo: ppo\nactivation: swish\n", ["PPOConfig.activation must be one of", "'tanh'"]),
    ("algo: ppg\n", ["algo must be one of", "'ppo'", "'ppg'"]),
    ("env: CartPole-v1\n", ["needs the key 'algo'"]),
    ("algo: ppo\nrunner: fused\n", ["runner name must be one of ['async', 'sync']"]),
    ("algo: ppo\nrunner: {name: async, lags: 1}\n", ["runner", "'lags'", "actor_devices"]),
    ("algo: ppo\nrunner: {name: async, lag: 3}\n", ["AsyncConfig.lag must be one of"]),
    ("algo: ppo\nseed: one\n", ["seed must be an integer"]),
    ("algo: ppo\nlr: [1\n", ["not valid YAML"]),
    ("- algo\n", ["must hold a mapping"]),
])
def test_bad_run_files_name_the_file_key_and_allowed_values(tmp_path, recorded, text, needles):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as error:
        jra.load_config(path)
    message = str(error.value)
    assert message.startswith(str(path)), message
    for needle in needles:
        assert needle in message, (needle, message)
    code, err = run_cli(["train", "--config", str(path), "--no-progress"])
    assert code == 2 and str(path) in err and not recorded  # refused before training


def test_config_and_resume_together_are_refused(tmp_path, recorded):
    (tmp_path / "run.yaml").write_text(RUN_YAML)
    code, err = run_cli(["train", "--config", str(tmp_path / "run.yaml"), "--resume",
                         str(tmp_path)])
    assert code == 2 and "--config or --resume" in err and not recorded


# --------------------------------------------------------------------------- sweep files
def test_sweep_file_grid_seeds_and_base_path(tmp_path, recorded):
    (tmp_path / "run.yaml").write_text(RUN_YAML.replace("runner: {name: async, "
                                                        "learner_devices: 2}\n", ""))
    (tmp_path / "sweep.yaml").write_text(
        "base: run.yaml\ngrid: {lr: [1e-4, 3.0e-4], ent_coef: [0, 0.01]}\nseeds: 3\n")
    code, err = run_cli(["sweep", "--config", str(tmp_path / "sweep.yaml"), "--num-envs", "4",
                         "--no-progress", "--out", str(tmp_path / "out")])
    assert code is None, err
    assert recorded["spec"] == {"lr": [1e-4, 3e-4], "ent_coef": [0.0, 0.01]}
    assert recorded["args"] == (3,)
    base = dataclasses.replace(EXPECTED, num_envs=4, runner=jra.SyncConfig())
    assert recorded["cfg"] == base  # the file's base, the flag's num_envs


def test_sweep_file_random_search(tmp_path, recorded):
    (tmp_path / "sweep.json").write_text(json.dumps({
        "base": {"algo": "ppo", "num_envs": 4}, "random": {"lr": "log:1e-4:1e-2"},
        "num_samples": 5, "seeds": 2, "sample_seed": 7}))
    code, err = run_cli(["sweep", "--config", str(tmp_path / "sweep.json"), "--no-progress",
                         "--out", str(tmp_path / "out")])
    assert code is None, err
    assert recorded["spec"] == {"lr": jra.LogUniform(1e-4, 1e-2)}
    assert recorded["args"] == (5, 2) and recorded["kw"]["seed"] == 7


@pytest.mark.parametrize("text, needles", [
    ("base: {algo: ppo}\ngrid: {num_envs: [4, 8]}\n", ["'num_envs' cannot be swept", "lr"]),
    ("base: {algo: ppo}\ngrid: {lr: [0.1, -1.0]}\n", ["grid.lr", "PPOConfig.lr must be > 0"]),
    ("base: {algo: ppo}\ngrid: {lr: fast}\n", ["grid.lr must be a non-empty list"]),
    ("base: {algo: ppo}\nrandom: {lr: 'log:1e-4'}\n", ["random.lr must be 'log:LO:HI'"]),
    ("base: {algo: ppo}\n", ["give either grid or random"]),
    ("base: {algo: ppo, lr: 0}\ngrid: {lr: [0.1]}\n", ["base", "PPOConfig.lr must be > 0"]),
    ("base: {algo: ppo}\ngrid: {lr: [0.1]}\nseeds: 0\n", ["seeds must be an integer >= 1"]),
    ("base: {algo: ppo}\ngrid: {lr: [0.1]}\nseed: 1\n", ["unknown key(s) 'seed'", "seeds"]),
])
def test_bad_sweep_files_name_the_file_and_key(tmp_path, recorded, text, needles):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    code, err = run_cli(["sweep", "--config", str(path), "--no-progress"])
    assert code == 2 and not recorded, err
    assert str(path) in err
    for needle in needles:
        assert needle in err, (needle, err)


# --------------------------------------------------------------------------- the reference files
def test_the_reference_config_files_load():
    files = sorted((REPO / "jaxrl_async" / "presets").glob("*.yaml"))
    names = {p.name for p in files}
    assert {"cartpole_ppo.yaml", "pendulum_ppo.yaml", "breakout_minatar_impala.yaml"} <= names
    for path in files:
        cfg = jra.load_config(path)
        assert cfg.env in path.read_text()


@pytest.mark.parametrize("origin", ["from_sweep", "from_population", "from_tune"])
def test_a_searchs_best_json_is_a_run_file_whatever_search_wrote_it(tmp_path, origin):
    # pbt/halving's best.json (from_population) and tune's (from_tune) failed as unknown fields
    cfg = jra.PPOConfig(env="CartPole-v1", lr=1e-3, num_envs=4)
    path = tmp_path / "best.json"
    path.write_text(json.dumps({**to_dict(cfg), origin: {"dir": "runs/x", "value": 1.0}}))
    assert jra.load_config(path) == cfg
