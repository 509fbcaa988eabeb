"""Every entry point works for every algorithm: ``jaxrl-async train`` (``jra.train`` then a
greedy ``jra.evaluate``) and ``jaxrl-async eval`` under both runners; the notebook flow (jit,
vmap over seeds, sweep, train in one process) on every gymnax env."""

import contextlib
import io
import json

import gymnax
import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async import envs
from jaxrl_async.cli.command import main

TINY = ["--num-envs", "2", "--num-steps", "8", "--total-timesteps", "32", "--hidden-sizes",
        "16", "--fast-compile", "--no-progress", "--eval-episodes", "2"]
REPLAY = ["--buffer-size", "32", "--batch-size", "16", "--samples-per-insert", "1",
          "--learning-starts", "16"]
EPOCHS = ["--num-minibatches", "1", "--update-epochs", "1"]
ALGOS = {
    "ppo": ["--env", "CartPole-v1", *EPOCHS],
    "impala": ["--env", "CartPole-v1"],
    "dqn": ["--env", "CartPole-v1", *REPLAY],
    "pqn": ["--env", "CartPole-v1", *EPOCHS],
    "sac": ["--env", "Pendulum-v1", *REPLAY],
    "recurrent_ppo": ["--env", "MemoryChain-bsuite", "--bptt-length", "4", "--memory-size",
                      "8", *EPOCHS],
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("runner", ["sync", "async"])
@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_train_then_eval_from_the_command_line(algo, runner, tmp_path):
    run_dir = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        trained = main(["train", "--algo", algo, "--runner", runner, *TINY, *ALGOS[algo],
                        "--run-dir", str(run_dir)])
        assert trained == 0
        after_train = json.loads((run_dir / "eval.json").read_text())
        assert main(["eval", str(run_dir), "--episodes", "2"]) == 0
    assert json.loads((run_dir / "eval.json").read_text()) == after_train  # eval appends:
    after_eval = json.loads((run_dir / "evals.jsonl").read_text().splitlines()[-1])
    assert after_train["greedy"] and after_eval["greedy"]
    assert after_eval["update"] == 2 and len(after_eval["returns"]) == 2
    assert np.isfinite(after_eval["mean_return"])


# --------------------------------------------------------------------------- gymnax envs
UNAVAILABLE = {
    "MNISTBandit-bsuite": "downloads MNIST on construction",
    "FrozenLake-misc": "gymnax's own reset fails (IndexError)",
}
GYMNAX_IDS = [i for i in gymnax.registered_envs if i not in UNAVAILABLE]


def tiny(env_id: str) -> jra.PPOConfig:
    return jra.PPOConfig(env=env_id, num_envs=2, num_steps=4, total_timesteps=16,
                         hidden_sizes=(8,), torso="mlp", num_minibatches=1, update_epochs=1,
                         fast_compile=True)


def _tracers(tree) -> list:
    return [x for x in jax.tree.leaves(tree) if isinstance(x, jax.core.Tracer)]


@pytest.mark.timeout(300)
def test_an_env_first_built_inside_a_trace_holds_no_tracer():
    """``make_env`` caches the gymnax env; one first built inside ``jit`` must not keep that
    trace's arrays (a later trace would reuse them: UnexpectedTracerError)."""
    for env_id in GYMNAX_IDS:
        envs._gymnax.cache_clear()
        keys = jax.random.split(jax.random.key(0), 2)
        jax.jit(lambda k, i=env_id: envs.make_env(i).reset(k)[0]).trace(keys)
        env, params, _ = envs._gymnax(env_id, ())
        assert not _tracers(vars(env)) and not _tracers(params), env_id


@pytest.mark.timeout(300)
def test_notebook_flow_jit_vmap_sweep_train_in_one_process(env_id="DeepSea-bsuite"):
    envs._gymnax.cache_clear()  # built first inside the jit trace, as in a fresh notebook
    cfg = tiny(env_id)
    one = jax.jit(jra.make_train(cfg))(jax.random.key(0))
    seeds = jax.jit(jax.vmap(jra.make_train(cfg)))(jax.random.split(jax.random.key(0), 2))
    assert seeds.metrics["env_steps"].shape == (2, cfg.num_updates)
    swept = jra.sweep(cfg, grid={"lr": [1e-3, 3e-4]}, progress=False)
    assert swept.curves["env_steps"].shape == (2, 1, cfg.num_updates)
    out = jra.train(cfg, progress=False)
    assert int(out.state.update) == int(one.state.update) == cfg.num_updates
