"""Divergence: a NaN or inf in the loss, the gradients or the params stops training at the end
of the log chunk where it appears (``jra.TrainingDiverged``), under both runners, and the run
directory keeps the last finite checkpoint."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.algos.base import LearnerState, PerEnv, make_optimizer
from jaxrl_async.cli.command import main
from jaxrl_async.run import checkpoint
from jaxrl_async.runners import divergence

# A tiny PPO whose learning rate is absurd: its loss overflows at update 2 (update 1 is finite).
ABSURD = dict(total_timesteps=4 * 8 * 40, num_envs=4, num_steps=8, update_epochs=1,
              num_minibatches=1, hidden_sizes=(8,), lr=3e18, anneal_lr=False, log_every=1,
              checkpoint_every=1, keep_checkpoints=50)


def test_first_nonfinite_names_the_part():
    params = {"w": jnp.ones((3,))}
    optimizer = make_optimizer(0.5, 1e-3)
    state = LearnerState(params, optimizer.init(params))
    metrics = {"loss": jnp.float32(1.0), "entropy": jnp.float32(0.5),
               "episode_return": jnp.float32(jnp.nan)}  # NaN when no episode ended: not watched
    names = divergence.watched(state, metrics)
    assert names == ("loss", "entropy", "params", "opt_state")
    assert int(divergence.first_nonfinite(state, metrics)) == -1
    assert names[int(divergence.first_nonfinite(state, {**metrics, "loss": jnp.inf}))] == "loss"
    bad_params = state._replace(params={"w": jnp.array([1.0, jnp.nan, 1.0])})
    assert names[int(divergence.first_nonfinite(bad_params, metrics))] == "params"
    # A non-finite gradient reaches the optimizer state (Adam's moments) in the same update.
    _, opt_state = optimizer.update({"w": jnp.array([jnp.inf, 0.0, 0.0])}, state.opt_state,
                                    params)
    assert names[int(divergence.first_nonfinite(state._replace(opt_state=opt_state),
                                                metrics))] == "opt_state"
    # Per-env parts (replay data) are not watched.
    replay = {"params": params, "replay": PerEnv(jnp.full((2,), jnp.nan))}
    assert int(divergence.first_nonfinite(replay, metrics)) == -1


def _check_run_dir(run_dir, error):
    """The run stopped at the diverged update's chunk (log_every=1: that update), no checkpoint
    of a diverged state was written, and the newest one restores with finite numbers."""
    assert error.update >= 2 and error.what == "loss"
    assert f"after update {error.update} of 40" in str(error)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == list(range(1, error.update + 1))  # none past it
    assert rows[-1]["loss"] is None or not np.isfinite(rows[-1]["loss"])  # NaN/inf written
    assert all(np.isfinite(r["loss"]) for r in rows[:-1])
    saved = checkpoint.steps(run_dir)
    assert saved == list(range(1, error.update)), saved  # every finite chunk, not the last
    assert error.last_checkpoint == saved[-1]
    cfg = jra.load_config(run_dir)
    state = checkpoint.restore(run_dir, cfg)
    assert int(state.update) == error.last_checkpoint
    floats = [x for x in jax.tree.leaves(state.learner) if np.issubdtype(x.dtype, np.floating)]
    assert floats and all(np.isfinite(x).all() for x in floats)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["diverged"] == {"update": error.update, "metric": "loss"}


def test_cli_sync_run_stops_and_says_how_to_resume(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "--total-timesteps", "1280", "--num-envs", "4", "--num-steps", "8",
            "--update-epochs", "1", "--num-minibatches", "1", "--hidden-sizes", "8", "--lr",
            "3e18", "--no-anneal-lr", "--log-every", "1", "--checkpoint-every", "1",
            "--keep-checkpoints", "50", "--run-dir", str(run_dir), "--no-progress"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "training diverged: loss is NaN or inf after update" in err
    assert f"jaxrl-async train --resume {run_dir}" in err
    update = int(err.split("after update ")[1].split()[0])
    error = jra.TrainingDiverged(None, update, "loss", 40)
    error.last_checkpoint = update - 1
    _check_run_dir(run_dir, error)


def test_async_run_stops_at_the_chunk(tmp_path):
    cfg = jra.PPOConfig(**ABSURD, runner=jra.AsyncConfig())
    with pytest.raises(jra.TrainingDiverged) as caught:
        jra.train(cfg, run_dir=tmp_path, progress=False)
    error = caught.value
    assert error.run_dir == tmp_path
    assert len(error.result.metrics["loss"]) == error.update
    _check_run_dir(tmp_path, error)
