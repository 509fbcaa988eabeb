"""Bad input at the edges: every CLI flag with a bad value is one line naming the flag and what
it allows (exit code 2), unknown names get the nearest match, and bad files in a run directory
(config.json, metrics.jsonl, another algorithm's run, an older checkpoint) are errors naming
the file that change nothing in the directory."""

import dataclasses
import hashlib
import json
import re
import shutil
import sys

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.cli import command as cli
from jaxrl_async.cli.command import main
from jaxrl_async.config.shared import to_dict
from jaxrl_async.run import checkpoint, sinks


def exit_code(argv: list[str]) -> int:
    """``main(argv)``'s exit code, also when argparse exits."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture
def no_training(monkeypatch):
    """Fail instead of training when a bad value is accepted."""
    def refuse(*args, **kwargs):
        raise AssertionError("a bad flag value was accepted and training started")

    monkeypatch.setattr(sys.modules["jaxrl_async.run.train"], "train", refuse)


def bad_values(cls: type) -> list[tuple[str, str]]:
    """(flag, bad value) for every non-boolean field of ``cls``."""
    out = []
    for f in dataclasses.fields(cls):
        default = f.default
        if isinstance(default, bool) or dataclasses.is_dataclass(default) or f.name == "runner":
            continue
        flag = cli._flag(f.name)
        if isinstance(default, (int, float, tuple)):
            out += [(flag, "abc"), (flag, "-1")]
        else:
            out.append((flag, "nonsense"))
    return out


def test_every_flag_with_a_bad_value_is_one_line_naming_it(capsys, no_training):
    cases = [(["--algo", algo], flag, value) for algo, cls in cli.algo_configs().items()
             for flag, value in bad_values(cls)
             if algo == "ppo" or flag.lstrip("-").replace("-", "_")
             not in jra.PPOConfig.__dataclass_fields__]
    cases += [(["--runner", name], flag, value) for name, cls in cli.runner_configs().items()
              for flag, value in bad_values(cls)]
    for extra, flag, value in cases:
        code = exit_code(["train", *extra, flag, value, "--no-progress"])
        line = one_line(capsys)
        assert code == 2, (extra, flag, value, line)
        assert flag in line and re.search(r"must|expected|choose from|known", line), line
    assert len(cases) > 100  # every number, tuple and string flag (116 today)


@pytest.mark.parametrize("argv, suggestion", [
    (["train", "--algo", "ppq"], "did you mean ppo or pqn?"),
    (["train", "--env", "CartPol-v1"], "did you mean CartPole-v1?"),
    (["train", "--lrr", "3"], "did you mean --lr?"),
    (["train", "--runner", "asink"], "did you mean async?"),
    (["trian"], "did you mean train?"),
])
def test_unknown_names_suggest_the_nearest(argv, suggestion, capsys, no_training):
    assert exit_code([*argv, "--no-progress"]) == 2
    assert suggestion in one_line(capsys)


# --------------------------------------------------------------------------- files
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-update PPO run directory as ``jra.train`` leaves it (config.json,
    metrics.jsonl, the checkpoint of update 2, written by ``checkpoint.save``), without
    compiling a training program: the state is zeros of the run state's shapes."""
    run_dir = tmp_path_factory.mktemp("bad_files") / "run"
    cfg = jra.PPOConfig(total_timesteps=2 * 4 * 8, num_envs=4, num_steps=8, update_epochs=1,
                        num_minibatches=1, hidden_sizes=(8,), log_every=1)

    def zeros(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(np.zeros((*x.shape, 2), np.uint32))
        return np.zeros(x.shape, x.dtype)

    state = jax.tree.map(zeros, checkpoint.abstract_state(cfg))
    run_dir.mkdir()
    sinks.write_json(run_dir / "config.json", {"seed": 0, **to_dict(cfg)})
    with open(run_dir / "metrics.jsonl", "w") as out:
        for update in (1, 2):
            out.write(json.dumps({"update": update, "env_steps": 32.0 * update, "loss": 0.5})
                      + "\n")
    manager = checkpoint._manager(run_dir, read_only=False, keep=2)
    checkpoint.save(manager, state, cfg, 2)
    manager.wait_until_finished()
    manager.close()
    return run_dir


@pytest.fixture
def run_dir(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def snapshot(run_dir) -> dict:
    return {str(p.relative_to(run_dir)): (p.stat().st_mtime_ns, hashlib.sha1(
        p.read_bytes()).hexdigest()) if p.is_file() else None for p in run_dir.rglob("*")}


def refused(run_dir, capsys, argv, *needles):
    """``argv`` fails with one line holding ``needles`` and leaves ``run_dir`` as it was."""
    before = snapshot(run_dir)
    assert exit_code(argv) == 2
    line = one_line(capsys)
    assert all(n in line for n in needles), line
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("text, says", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "does not hold a config"),
    ('{"_type": "PPOConfig", "lr": "abc"}', "PPOConfig.lr must be a number"),
    ('{"_type": "PPOConfig", "nope": 1}', "has no field(s) nope"),
])
def test_malformed_config_json(run_dir, capsys, text, says):
    (run_dir / "config.json").write_text(text)
    path = str(run_dir / "config.json")
    refused(run_dir, capsys, ["train", "--resume", str(run_dir), "--no-progress"], path, says)
    refused(run_dir, capsys, ["eval", str(run_dir)], path, says)


def test_truncated_metrics_jsonl(run_dir, capsys):
    path = run_dir / "metrics.jsonl"
    text = path.read_text()
    path.write_text(text[:len(text) - len(text.splitlines()[-1]) // 2 - 1])  # half a last line
    refused(run_dir, capsys, ["train", "--resume", str(run_dir), "--no-progress",
                              "--eval-episodes", "0"], str(path), "line 2", "truncated")


def test_run_directory_of_another_algorithm(run_dir, capsys):
    path = str(run_dir / "config.json")
    refused(run_dir, capsys, ["train", "--algo", "dqn", "--resume", str(run_dir),
                              "--no-progress"], "--algo dqn", path, "ppo run")
    before = snapshot(run_dir)
    with pytest.raises(ValueError, match=re.escape(path) + ".*cannot be resumed as dqn"):
        jra.train(jra.DQNConfig(total_timesteps=2 * 4 * 8, num_envs=4, num_steps=8),
                  resume=run_dir, progress=False)
    with pytest.raises(jra.CheckpointError, match="checkpoints/2 was written by a different"):
        checkpoint.restore(run_dir, jra.DQNConfig())
    assert snapshot(run_dir) == before


def test_checkpoint_of_an_older_version(run_dir, capsys):
    metas = [p for p in (run_dir / "checkpoints").rglob("*")
             if p.is_file() and p.parent.name == "meta" and b"key_impls" in p.read_bytes()]
    assert len(metas) == 1, metas
    meta = json.loads(metas[0].read_text())
    assert meta.pop("format") == checkpoint.FORMAT
    metas[0].write_text(json.dumps(meta))  # as written before checkpoints had a format
    where = str(run_dir / "checkpoints" / "2")
    refused(run_dir, capsys, ["eval", str(run_dir)], where, "older version", "format 0")
    refused(run_dir, capsys, ["train", "--resume", str(run_dir), "--no-progress"], where,
            "older version")
