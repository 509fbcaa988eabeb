"""Checkpoints and resume: a run stopped and resumed ends bit for bit like the run
uninterrupted; Ctrl-C writes a final checkpoint; bad checkpoints fail clearly and touch
nothing."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.run import checkpoint
from jaxrl_async.runners import pipeline
from jaxrl_async.runners.state import Callbacks

REPO = Path(__file__).resolve().parents[1]
# The async runner's wall-clock measurements: not part of a run's outcome.
WALL_CLOCK = {"learner_busy", "actor_busy", "queue_depth"}


def tiny(runner=None, **kw):
    # normalize_obs: the observation statistics live in the env state and must be restored
    base = dict(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2,
                total_timesteps=4 * 16 * 12, log_every=2, checkpoint_every=4,
                normalize_obs=True, fast_compile=True)  # every run here compiles alike
    if runner is not None:
        base["runner"] = runner
    return jra.PPOConfig(**{**base, **kw})


RUNNERS = [pytest.param("sync", id="sync"),
           pytest.param("async", id="async-deterministic")]
# Resumed at update 8, rollout 8 acts with the params of update 6 (lag 1, sync_every 3): only
# the checkpoint's behaviour_params can give them back.
RESUMED = [*RUNNERS, pytest.param("async-sync-every-3", id="async-sync-every-3")]


def runner_config(name):
    if name == "async-sync-every-3":
        return jra.AsyncConfig(sync_every=3, max_staleness=3)
    return jra.SyncConfig() if name == "sync" else jra.AsyncConfig()


class Crash(Callbacks):
    """Kills the run (like a crash: no final checkpoint) once update ``after`` is reported."""

    def __init__(self, after):
        self.after = after

    def on_metrics(self, first_update, rows):
        if first_update + len(rows["env_steps"]) >= self.after:
            raise RuntimeError("simulated crash")


class LateActor:
    """While active, the actor asks for the params of its second rollout acting with version
    ``version`` only once the learner has published version ``until`` (an order a loaded
    machine produces now and then). Resumed at update 8 with sync_every 3, rollouts 8 and 9
    act with version 6 and the learner publishes version 9 after update 8."""

    def __init__(self, version=6, until=9):
        self.version, self.until = version, until

    def __enter__(self):
        original, calls = pipeline.Pipeline.params, []
        version, until = self.version, self.until

        def params(self, device_index, want):
            if want == version:
                calls.append(want)
                if len(calls) == 2:
                    with self._cond:
                        self._cond.wait_for(lambda: until in self._params[device_index]
                                            or self._stopped, timeout=120)
            return original(self, device_index, want)

        self.patch = pytest.MonkeyPatch()
        self.patch.setattr(pipeline.Pipeline, "params", params)
        return self

    def __exit__(self, *exc):
        self.patch.undo()
        return False


def leaves(state):
    return [np.asarray(jax.random.key_data(x)) if jax.dtypes.issubdtype(
        x.dtype, jax.dtypes.prng_key) else np.asarray(x) for x in jax.tree.leaves(state)]


def files(root):
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(Path(root).rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module", params=RESUMED)
def resumed(request, tmp_path_factory):
    cfg = tiny(runner_config(request.param), tensorboard=True)
    root = tmp_path_factory.mktemp(request.param)
    whole = jra.train(cfg, seed=7, run_dir=root / "whole", progress=False)
    with pytest.raises(RuntimeError, match="simulated crash"):
        jra.train(cfg, seed=7, run_dir=root / "cut", progress=False, callbacks=[Crash(10)])
    saved = checkpoint.steps(root / "cut")
    lines_before = len((root / "cut" / "metrics.jsonl").read_text().splitlines())
    with LateActor() if request.param == "async-sync-every-3" else contextlib.nullcontext():
        again = jra.train(resume=root / "cut", progress=False)
    return cfg, root, whole, again, saved, lines_before


def test_resumed_run_equals_uninterrupted_bit_for_bit(resumed):
    cfg, root, whole, again, saved, lines_before = resumed
    assert saved == [4, 8] and lines_before == 10  # it crashed with rows past its checkpoint
    for a, b in zip(leaves(whole.state), leaves(again.state)):  # params, opt, env, key, ...
        np.testing.assert_array_equal(a, b)
    assert set(whole.metrics) == set(again.metrics)
    for name in set(whole.metrics) - WALL_CLOCK:
        np.testing.assert_array_equal(whole.metrics[name], again.metrics[name], err_msg=name)
    rows = [[{k: v for k, v in json.loads(line).items() if k not in WALL_CLOCK}
             for line in (root / run / "metrics.jsonl").read_text().splitlines()]
            for run in ("whole", "cut")]
    assert rows[0] == rows[1]
    if cfg.runner.name == "sync":  # the same files, byte for byte
        for name in ("metrics.jsonl", "metrics.csv"):
            assert (root / "whole" / name).read_text() == (root / "cut" / name).read_text()
    assert len((root / "cut" / "metrics.csv").read_text().splitlines()) == cfg.num_updates + 1
    assert checkpoint.steps(root / "cut") == [8, 12]  # keep_checkpoints=2
    summary = json.loads((root / "cut" / "summary.json").read_text())
    assert summary["updates_done"] == cfg.num_updates and not summary["interrupted"]


def test_checkpoint_holds_the_full_state(resumed):
    cfg, root, whole, *_ = resumed
    restored = checkpoint.restore(root / "whole", cfg)
    assert int(restored.update) == cfg.num_updates
    for a, b in zip(leaves(whole.state), leaves(restored)):
        np.testing.assert_array_equal(a, b)
    moments = restored.env.env_state.moments  # observation normalisation statistics
    assert float(moments.count[0]) > cfg.num_updates * cfg.steps_per_update / cfg.num_envs
    assert list((root / "whole" / "tensorboard").glob("events.out.tfevents.*"))


def test_corrupt_checkpoint_is_a_clear_error_and_touches_nothing(resumed, tmp_path):
    cfg, root, *_ = resumed
    run = tmp_path / "run"
    shutil.copytree(root / "whole", run)
    data = [p for p in (run / "checkpoints" / "12" / "state").rglob("*") if p.is_file()
            and p.stat().st_size > 100]
    for p in data:
        p.write_bytes(b"\0garbage" * 4)
    before = files(run)
    with pytest.raises(jra.CheckpointError, match=r"checkpoints/12 is corrupt or unreadable"):
        jra.train(resume=run, progress=False)
    with pytest.raises(jra.CheckpointError, match="corrupt"):
        checkpoint.restore(run, cfg)
    assert files(run) == before


def test_incompatible_checkpoint_names_what_differs(resumed, tmp_path, monkeypatch):
    cfg, root, *_ = resumed
    run = tmp_path / "run"
    shutil.copytree(root / "whole", run)
    before = files(run)
    wider = tiny(cfg.runner, hidden_sizes=(32, 32), tensorboard=True)
    with pytest.raises(ValueError, match=r"different config: hidden_sizes: \[64, 64\] -> "
                                         r"\[32, 32\]"):
        jra.train(wider, resume=run, progress=False)
    with pytest.raises(jra.CheckpointError, match="hidden_sizes"):
        checkpoint.restore(run, wider)
    # a state that does not fit (say, written by another version) is caught array by array
    monkeypatch.setattr(checkpoint, "config_differences", lambda saved, cfg, **kw: [])
    with pytest.raises(jra.CheckpointError, match=r"does not fit PPOConfig: .*saved "
                                                  r"float32\[4, 64\], this config needs "
                                                  r"float32\[4, 32\]"):
        checkpoint.restore(run, wider)
    # io fields may change on resume
    assert not checkpoint.config_differences(json.loads((run / "config.json").read_text()),
                                             tiny(cfg.runner, checkpoint_every=0))
    assert files(run) == before


def test_missing_checkpoint_and_occupied_run_dir(tmp_path, resumed):
    cfg, root, *_ = resumed
    with pytest.raises(ValueError, match="not a run directory"):
        jra.train(resume=tmp_path, progress=False)
    (tmp_path / "config.json").write_text((root / "whole" / "config.json").read_text())
    with pytest.raises(jra.CheckpointError, match="no checkpoint"):
        jra.train(resume=tmp_path, progress=False)
    with pytest.raises(ValueError, match="already holds a run"):
        jra.train(cfg, run_dir=root / "whole", progress=False)


CTRL_C_SCRIPT = """
import sys
import jaxrl_async as jra
runner = jra.SyncConfig() if sys.argv[2] == "sync" else jra.AsyncConfig()
cfg = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                    update_epochs=1, total_timesteps=10**9, log_every=4, fast_compile=True,
                    runner=runner)
try:
    jra.train(cfg, seed=3, run_dir=sys.argv[1], progress=False)
except jra.TrainingInterrupted as e:
    print("stopped at", int(e.result.state.update), flush=True)
    sys.exit(130)
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("runner", RUNNERS)
def test_ctrl_c_writes_a_final_checkpoint(tmp_path, runner):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, str(run), runner], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 150
        metrics = run / "metrics.jsonl"
        while not (metrics.exists() and metrics.stat().st_size) and time.time() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    stopped = int(out.split("stopped at")[1])
    assert stopped > 0 and checkpoint.steps(run) == [stopped]  # the final one, written whole
    cfg = jra.load_config(run)
    assert int(checkpoint.restore(run, cfg).update) == stopped
    assert len((run / "metrics.jsonl").read_text().splitlines()) == stopped
    assert json.loads((run / "summary.json").read_text())["interrupted"]
