"""What a new user trips on, round three (issue 48): a learning curve with no-episode updates is
still drawn; a resume without a checkpoint says why before anything else; continuous control
gets a hint and the presets by name; a free-running run's summary says what it dropped; a
budget of part of an update is one note, recorded in both files; and the small ones (PBT's
float32 values, another library's flag names)."""

import contextlib
import io
import json

import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.cli import options as cli_options
from jaxrl_async.cli.command import main
from jaxrl_async.config.shared import to_dict
from jaxrl_async.run import config_files, sinks
from jaxrl_async.search.population_result import shortest

TINY = ["--env", "CartPole-v1", "--num-envs", "2", "--num-steps", "4", "--num-minibatches",
        "1", "--update-epochs", "1", "--hidden-sizes", "8", "--no-progress", "--fast-compile"]


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse's errors exit
            code = e.code
    return code, out.getvalue(), err.getvalue()


def test_a_curve_with_nan_updates_is_drawn_through_the_finite_ones():
    # Pendulum's 200-step episodes outlast 64-step rollouts: 2 of 3 updates have no return.
    metrics = {"env_steps": np.arange(1, 7) * 256.0,
               "episode_return": np.array([np.nan, -1200, np.nan, np.nan, -900, np.nan])}
    fig = sinks.learning_curve_figure(metrics, "PPO on Pendulum-v1")
    (line,) = fig.axes[0].lines
    np.testing.assert_array_equal(line.get_xdata(), [512, 1280])
    np.testing.assert_array_equal(line.get_ydata(), [-1200, -900])
    one = {"env_steps": np.arange(1, 4.0), "episode_return": np.array([np.nan, 5.0, np.nan])}
    (dot,) = sinks.learning_curve_figure(one, "one episode").axes[0].lines
    assert dot.get_marker() == "o" and len(dot.get_xdata()) == 1  # a single point shows


def test_a_resume_without_a_checkpoint_says_why_first(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cfg = jra.PPOConfig(env="CartPole-v1", num_envs=2, num_steps=4, total_timesteps=64,
                        anneal_lr=True, checkpoint_every=50)
    sinks.write_json(run / "config.json", {"seed": 0, **to_dict(cfg)})
    (run / "metrics.jsonl").write_text('{"env_steps": 8}\n')
    code, _, err = run_cli("train", "--resume", str(run), "--total-timesteps", "1e5")
    assert code == 2 and "--extend" not in err, err  # not the budget: there is no checkpoint
    assert ("no checkpoint in" in err and "stopped (killed, or it is still running) before its "
            "first checkpoint (the first was due after update 50)") in " ".join(err.split())
    code, _, err = run_cli("eval", str(run))
    assert code == 2 and "before its first checkpoint" in " ".join(err.split())


def test_continuous_control_gets_a_hint_and_the_presets_by_name():
    hint = cli_options.defaults_hint(jra.PPOConfig(env="Pendulum-v1"))
    assert "CartPole settings" in hint and "--config pendulum_ppo" in hint
    assert "--config rlzoo_ppo_pendulum" in hint  # the presets of this env first
    assert cli_options.defaults_hint(jra.PPOConfig(env="CartPole-v1")) is None
    assert cli_options.defaults_hint(jra.SACConfig(env="Pendulum-v1")) is None
    cfg = jra.load_config("pendulum_ppo")  # a preset, by name
    assert (cfg.env, cfg.normalize_obs, cfg.num_envs) == ("Pendulum-v1", True, 16)
    hopper = config_files.load_config_file("cleanrl_ppo_hopper")[0]
    assert (hopper.env, hopper.num_steps, hopper.normalize_reward) == (
        "envpool:Hopper-v4", 2048, True)
    with pytest.raises(config_files.ConfigFileError, match=r"pendulum_pp: no such file, and no "
                       r"preset of that name \(did you mean pendulum_ppo"):
        config_files.read_file("pendulum_pp")
    code, out, _ = run_cli("presets")
    assert code == 0 and "cleanrl_ppo_walker2d" in out and "pendulum_ppo" in out
    # the README's `jaxrl-async train --config cartpole_ppo --lr 1e-3`
    assert cli_options.config_algo(["--config", "cartpole_ppo", "--lr", "1e-3"]) == "ppo"
    assert config_files.load_config_file("cartpole_ppo")[0].num_envs == 4


def test_the_cli_prints_the_hint_before_training(tmp_path):
    code, _, err = run_cli("train", *TINY[2:], "--env", "Pendulum-v1", "--total-timesteps", "8",
                           "--eval-episodes", "0", "--run-dir", str(tmp_path / "run"))
    assert code == 0 and err.count("hint: PPO's defaults are PureJaxRL's CartPole") == 1, err


def test_a_budget_of_part_of_an_update_is_one_note_recorded_in_both_files(tmp_path):
    run = tmp_path / "run"
    code, _, err = run_cli("train", "--algo", "ppo", *TINY, "--total-timesteps", "20",
                           "--eval-episodes", "0", "--run-dir", str(run))
    assert code == 0, err
    assert err.count("note: PPOConfig.total_timesteps=20 is not a whole number") == 1
    assert "Warning" not in err and "warnings.warn" not in err, err  # no source line shown
    assert json.loads((run / "config.json").read_text())["total_timesteps"] == 20
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["total_timesteps"], summary["total_timesteps_requested"]) == (16, 20)
    code, _, err = run_cli("train", "--resume", str(run), "--eval-episodes", "0",
                           "--no-progress")
    assert code == 0 and "note:" not in err, err  # said once, not again on resume


@pytest.mark.timeout(300)
def test_a_free_running_summary_says_what_was_dropped_and_why(tmp_path):
    run = tmp_path / "run"
    code, out, err = run_cli("train", "--algo", "ppo", *TINY, "--total-timesteps", "400",
                             "--runner", "async", "--no-deterministic", "--eval-episodes",
                             "0", "--run-dir", str(run))
    assert code == 0, err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps_trained"] == 400
    assert summary["env_steps_collected"] == (summary["env_steps_trained"]
                                              + summary["env_steps_dropped"]
                                              + summary["env_steps_queued"])
    assert "SPS:" in out and "trained on" in out
    if summary["env_steps_collected"] > 400:
        assert "the free-running actors ran ahead of the learner" in out


def test_pbt_values_read_as_written_and_other_libraries_flags_are_named():
    assert shortest(np.float32(0.01)) == 0.01 and repr(shortest(np.float32(3e-4))) == "0.0003"
    code, _, err = run_cli("train", "--learning-rate", "1e-3")
    assert code == 2 and "(did you mean --lr? --learning-rate is another library's name" in err
    code, _, err = run_cli("train", "--clip-coef", "0.1")
    assert code == 2 and "did you mean --clip-eps?" in err
