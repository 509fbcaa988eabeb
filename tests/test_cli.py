"""The command line: help generated from the configs, a short run writing a run directory."""

import dataclasses
import json

import pytest

import jaxrl_async as jra
from jaxrl_async.cli import config_from_args, main, train_parser


def test_help_documents_every_field(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--algo", "ppo", "--help"])
    text = capsys.readouterr().out
    for f in dataclasses.fields(jra.PPOConfig):
        if f.name != "runner":
            assert "--" + f.name.replace("_", "-") in text, f.name
    assert "Adam learning rate" in text  # help comes from the field docstrings
    assert "--num-devices" in text


def test_flags_build_the_config():
    args = train_parser("ppo").parse_args(
        ["--env", "Pendulum-v1", "--total-timesteps", "1e6", "--lr", "3e-4",
         "--hidden-sizes", "32", "32", "--no-anneal-lr", "--num-devices", "2", "--num-envs", "8"])
    cfg = config_from_args(args)
    assert cfg == jra.PPOConfig(env="Pendulum-v1", total_timesteps=1_000_000, lr=3e-4,
                                hidden_sizes=(32, 32), anneal_lr=False, num_envs=8,
                                runner=jra.SyncConfig(num_devices=2))


def test_bad_flag_value_is_a_clear_error(capsys):
    assert main(["train", "--lr", "-1", "--no-progress"]) == 2
    assert "PPOConfig.lr must be > 0" in capsys.readouterr().err


def test_short_run_writes_a_run_directory(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["train", "--algo", "ppo", "--env", "CartPole-v1", "--total-timesteps", "2048",
                 "--num-envs", "4", "--num-steps", "64", "--no-progress",
                 "--run-dir", str(run_dir)])
    assert code == 0
    out = capsys.readouterr().out
    assert "final return" in out and "SPS" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_timesteps"] == 2048 and summary["sps"] > 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["_type"] == "PPOConfig" and config["num_steps"] == 64
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 8
    assert (run_dir / "learning_curve.png").stat().st_size > 1000
