"""The command line: help generated from the configs, a short run writing a run directory."""

import contextlib
import dataclasses
import io
import json

import pytest

import jaxrl_async as jra
from jaxrl_async.cli.command import config_from_args, main, train_parser
from jaxrl_async.run import checkpoint


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


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["train", "--algo", "ppo", "--env", "CartPole-v1", "--total-timesteps",
                     "2048", "--num-envs", "4", "--num-steps", "64", "--no-progress",
                     "--eval-episodes", "4", "--run-dir", str(run_dir)])
    assert code == 0
    return run_dir, printed.getvalue()


@pytest.fixture
def run_dir(trained):
    return trained[0]


def test_train_prints_summary_and_evaluation(trained):
    out = trained[1]
    assert "final return" in out and "SPS" in out
    assert ("final evaluation (after training: 4 greedy episodes on fresh envs, seed 0): "
            "return") in out


def test_short_run_writes_a_run_directory(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_timesteps"] == 2048 and summary["sps"] > 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["_type"] == "PPOConfig" and config["num_steps"] == 64
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 8
    assert len((run_dir / "metrics.csv").read_text().splitlines()) == 9  # header + 8 rows
    assert (run_dir / "learning_curve.png").stat().st_size > 1000
    assert checkpoint.steps(run_dir) == [8]  # the final state, for eval and resume
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["num_episodes"] == 4 and evaluation["greedy"]
    assert len(evaluation["returns"]) == 4


def test_resume_of_a_missing_run_is_a_clear_error(capsys, tmp_path):
    code = main(["train", "--resume", str(tmp_path / "missing"), "--no-progress"])
    assert code == 2 and "not a run directory" in capsys.readouterr().err


def test_eval_command(run_dir, capsys):
    assert main(["eval", str(run_dir), "--episodes", "3", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint at update 8" in out and "evaluation (greedy, 3 episodes" in out
    assert json.loads(out.strip().splitlines()[-1])["num_episodes"] == 3
    evals = (run_dir / "evals.jsonl").read_text().splitlines()
    assert json.loads(evals[-1])["update"] == 8  # eval.json is training's own
    assert main(["eval", str(run_dir / "nope")]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_resume_of_a_finished_run_and_io_flags(run_dir, capsys):
    assert main(["train", "--resume", str(run_dir), "--no-progress", "--eval-episodes", "0",
                 "--keep-checkpoints", "3"]) == 0
    assert "final return" in capsys.readouterr().out
    assert main(["train", "--resume", str(run_dir), "--lr", "1e-3", "--no-progress"]) == 2
    assert "different config: lr: 0.00025 -> 0.001" in capsys.readouterr().err


def test_sweep_and_eval_help_document_every_field(capsys):
    for command in ("sweep", "eval"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
    text = capsys.readouterr().out
    for f in dataclasses.fields(jra.PPOConfig):
        if f.name != "runner":
            assert "--" + f.name.replace("_", "-") in text, f.name
    assert "--grid FIELD=V1,V2" in text and "[sweepable]" in text and "RUN_DIR" in text
    assert main(["--help"]) == 0 and "sweep" in capsys.readouterr().out
