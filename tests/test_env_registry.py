"""Any JAX env by registry: a tiny chain registered here trains under both runners, checkpoints,
resumes bit for bit and evaluates; the command line finds it through an entry point; a run
resumed where it was never registered stops with an error naming register_env and the id."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.envs import AutoReset, discrete_spec, make_env
from jaxrl_async.run import checkpoint
from tests.test_checkpoint import Crash, leaves

REPO = Path(__file__).resolve().parents[1]
LENGTH, LIMIT = 5, 6


class Chain:
    """States 0..LENGTH-1, start uniform in 0..LENGTH-2; action 1 moves right, 0 left; reaching
    the right end pays 1 and terminates; LIMIT steps truncate. Its state carries a typed PRNG
    key, as Navix's and Jumanji's do (the async runner must gather such states)."""

    def reset(self, key):
        pos = jax.random.randint(key, (), 0, LENGTH - 1)
        return jax.nn.one_hot(pos, LENGTH), (pos, jnp.int32(0), key)

    def step(self, key, state, action):
        pos, t, own_key = state
        pos = jnp.clip(pos + 2 * action - 1, 0, LENGTH - 1)
        terminated = pos == LENGTH - 1
        return (jax.nn.one_hot(pos, LENGTH), (pos, t + 1, jax.random.split(own_key)[0]),
                terminated.astype(jnp.float32), terminated, t + 1 >= LIMIT)


def make_chain(env_id="chain-v0"):
    return AutoReset(Chain(), discrete_spec(env_id, Chain(), 2, LIMIT))


def tiny(env, runner=None, **kw):
    base = dict(env=env, num_envs=4, num_steps=8, num_minibatches=2, update_epochs=2,
                total_timesteps=4 * 8 * 8, log_every=2, checkpoint_every=4, lr=1e-2,
                fast_compile=True)
    return jra.PPOConfig(**{**base, **kw}, runner=runner or jra.SyncConfig())


def test_register_env_refuses_bad_names_and_unknown_ids_name_register_env():
    with pytest.raises(ValueError, match="gymnax id"):
        jra.register_env("CartPole-v1", make_chain)
    with pytest.raises(ValueError, match="craftax/"):
        jra.register_env("craftax/mine", make_chain)
    with pytest.raises(ValueError, match=r"PPOConfig.env: unknown env id 'nowhere-v0'.*"
                                         r"register_env\('nowhere-v0'"):
        jra.PPOConfig(env="nowhere-v0")


def test_the_chain_keeps_the_contract():
    jra.register_env("chain-v0", make_chain)
    env = make_env("chain-v0", episode_stats=False)
    assert env.spec.obs_shape == (LENGTH,) and env.spec.num_actions == 2
    obs, state = env.reset(jax.random.split(jax.random.key(0), 4))
    ended = 0
    for t in range(8):  # always right from a start < LENGTH-1: terminates within LENGTH-1 steps
        keys = jax.random.split(jax.random.key(t + 1), 4)
        prev = state
        obs, state, reward, terminated, truncated, info = env.step(keys, state, jnp.ones(4, int))
        final = np.asarray(info["final_observation"]).argmax(-1)
        expected = np.minimum(np.asarray(prev[0]) + 1, LENGTH - 1)
        np.testing.assert_array_equal(final, expected)
        np.testing.assert_array_equal(np.asarray(terminated), expected == LENGTH - 1)
        assert not np.any(np.asarray(truncated))
        fresh = np.asarray(state[0])[np.asarray(terminated)]
        assert np.all(fresh < LENGTH - 1) and np.all(np.asarray(state[1])[np.asarray(terminated)]
                                                     == 0)
        ended += int(np.asarray(terminated).sum())
    assert ended >= 4


@pytest.mark.timeout(600)
def test_registered_env_trains_resumes_bit_for_bit_evaluates_and_runs_async(tmp_path):
    jra.register_env("chain-v0", make_chain)
    cfg = tiny("chain-v0")
    whole = jra.train(cfg, seed=3, run_dir=tmp_path / "whole", progress=False)
    with pytest.raises(RuntimeError, match="simulated crash"):
        jra.train(cfg, seed=3, run_dir=tmp_path / "cut", progress=False, callbacks=[Crash(6)])
    assert checkpoint.steps(tmp_path / "cut")
    again = jra.train(resume=tmp_path / "cut", progress=False)
    for a, b in zip(leaves(whole.state), leaves(again.state), strict=True):
        np.testing.assert_array_equal(a, b)
    ev = jra.evaluate(again, cfg, num_episodes=8)
    assert ev["returns"].shape == (8,) and np.all(ev["lengths"] <= LIMIT)
    # trained on the chain, the greedy policy walks right: every episode reaches the end
    assert ev["mean_return"] == 1.0, ev

    runner = jra.AsyncConfig()
    out = jra.train(tiny("chain-v0", runner, total_timesteps=4 * 8 * 2, checkpoint_every=0),
                    seed=0, progress=False)
    assert np.all(np.isfinite(np.asarray(out.metrics["loss"])))

    # a process that never registered the env cannot resume the run, and says why
    code = f"import jaxrl_async as jra; jra.train(resume={str(tmp_path / 'cut')!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert proc.returncode != 0
    assert "register_env('chain-v0'" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.timeout(600)
def test_entry_point_makes_the_env_known_to_the_command_line(tmp_path):
    site = tmp_path / "site"
    dist = site / "chain_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: chain-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[jaxrl_async.envs]\nchain-ep-v0 = tests.test_env_registry:make_chain\n")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{site}"}
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "jaxrl_async.cli", "train", "--env", "chain-ep-v0",
           "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "64", "--num-minibatches",
           "2", "--run-dir", str(run), "--no-progress", "--eval-episodes", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run / "config.json").exists() and checkpoint.steps(run)
    # without the entry point, the run directory names what is missing
    bare = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "jaxrl_async.cli", "eval", str(run)],
                          capture_output=True, text=True, cwd=REPO, env=bare, timeout=300)
    assert proc.returncode != 0
    assert "register_env('chain-ep-v0'" in proc.stderr, proc.stderr[-2000:]


def docs_example() -> str:
    """The ``register_env`` example of docs/envs.md, as written there."""
    text = (REPO / "docs" / "envs.md").read_text()
    section = text[text.index("## Your own JAX env"):]
    start = section.index("```python\n") + 10
    return section[start:section.index("\n```", start)]


def test_the_docs_register_env_example_runs_as_written(tmp_path):
    code = docs_example().replace('total_timesteps=20_480', 'total_timesteps=2048, '
                                  'fast_compile=True')
    code = code.replace('run_dir="runs/chain"', f'run_dir={str(tmp_path / "chain")!r}')
    scope: dict = {}
    exec(compile(code, "docs/envs.md", "exec"), scope)  # noqa: S102 - the docs' own code
    assert int(scope["result"].state.update) == 2048 // (4 * 128)
    assert checkpoint.steps(tmp_path / "chain") == [4]


class Point:
    """A point in 2-D pushed by a bounded force; reward: minus its distance to the origin."""

    def reset(self, key):
        x = jax.random.uniform(key, (2,), minval=-1.0, maxval=1.0)
        return x, (x, jnp.int32(0))

    def step(self, key, state, action):
        x, t = state
        x = x + 0.1 * action
        return x, (x, t + 1), -jnp.linalg.norm(x), jnp.linalg.norm(x) > 3.0, t + 1 >= 20


def test_a_continuous_env_registers_with_continuous_spec():
    from jaxrl_async.envs import continuous_spec

    spec = continuous_spec("point-v0", Point(), [-1.0, -0.5], [1.0, 0.5], 20)
    assert (spec.discrete, spec.action_shape, spec.action_low, spec.action_high,
            spec.obs_shape) == (False, (2,), (-1.0, -0.5), (1.0, 0.5), (2,))
    with pytest.raises(ValueError, match="low < high"):
        continuous_spec("point-v0", Point(), [1.0], [-1.0])
    jra.register_env("point-v0", lambda: AutoReset(Point(), spec))
    out = jax.jit(jra.make_train(tiny("point-v0", checkpoint_every=0)))(jax.random.key(0))
    assert np.isfinite(out.metrics["loss"]).all()
    assert jra.SACConfig(env="point-v0", num_envs=4, num_steps=8).is_discrete is False
