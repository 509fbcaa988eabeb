"""A host-env run's whole life: checkpoints, resume (the learner and the normalisation
continued, the envs reset), evaluation, the command line's train / eval / resume on gymnasium
and EnvPool envs, Ctrl-C, and the entry points researchers start from (a script without a main
guard, ``python -c``, a notebook cell, the command line)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.envs.host_workers import live_workers
from jaxrl_async.run import checkpoint
from jaxrl_async.runners.host_streams import HostEnvState

REPO = Path(__file__).resolve().parents[1]
ALIGNED = "jaxrl-test/Aligned-v0"
EPISODE = 8


class Aligned(gymnasium.Env):
    """Episodes of exactly ``EPISODE`` steps that all start from the same state, whatever the
    seed: a fresh reset is an autoreset, so a run resumed from a checkpoint taken between
    episodes steps exactly the envs the uninterrupted run steps."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t = np.array([0.5, -1.0, 2.0]), 0
        return self.x.copy(), {}

    def step(self, action):
        self.x = 0.9 * self.x + (int(action) - 0.5) * np.array([1.0, 0.5, -2.0])
        self.t += 1
        return self.x.copy(), float(-abs(self.x[0] - 1.0)), self.t == EPISODE, False, {}


gymnasium.register(ALIGNED, entry_point=Aligned)


def aligned_ppo(**runner) -> jra.PPOConfig:
    return jra.PPOConfig(
        env=f"gymnasium:{ALIGNED}", num_envs=4, num_steps=EPISODE, num_minibatches=2,
        update_epochs=2, total_timesteps=4 * EPISODE * 6, log_every=2, checkpoint_every=2,
        keep_checkpoints=3, normalize_obs=True, normalize_reward=True, anneal_lr=True,
        fast_compile=True,
        runner=jra.AsyncConfig(actors_per_device=2, host_vectorization="inline", **runner))


def resumed_from(run: Path, at: int, tmp: Path) -> Path:
    """A copy of ``run`` holding its checkpoints up to update ``at`` only (as if stopped
    there)."""
    copy = tmp / f"{run.name}_at_{at}"
    shutil.copytree(run, copy)
    for step in checkpoint.steps(copy):
        if step > at:
            shutil.rmtree(checkpoint.checkpoint_dir(copy) / str(step))
    return copy


@pytest.mark.timeout(300)
def test_a_resumed_host_run_continues_the_learner_and_normalisation_exactly(tmp_path):
    # Deterministic schedule, lag 1, 2 streams: the run stopped after update 4 and resumed
    # (envs reset with fresh seeds, which Aligned ignores) ends where the uninterrupted run
    # ends, bit for bit: params, optimiser state (its count drives the annealed lr), the
    # acting params of the lag, every env's normalisation moments and discounted return.
    cfg = aligned_ppo()
    whole = jra.train(cfg, seed=5, run_dir=tmp_path / "whole", progress=False)
    assert checkpoint.steps(tmp_path / "whole") == [2, 4, 6]
    saved = checkpoint.restore(tmp_path / "whole", cfg, step=4)
    assert isinstance(saved.env, HostEnvState) and int(saved.update) == 4
    # every observation counted: the first, each step's, the next episodes' first ones
    np.testing.assert_allclose(saved.env.normalizer.obs.count, 1e-4 + 1 + 4 * EPISODE + 4)
    assert saved.env.normalizer.obs.mean.dtype == np.float64  # the env's own float64
    assert saved.behaviour_params.shape[0] > 0  # the lag's acting params

    run = resumed_from(tmp_path / "whole", 4, tmp_path)
    resumed = jra.train(resume=run, progress=False)
    assert not np.array_equal(whole.state.env.seeds, resumed.state.env.seeds)  # fresh resets
    states = [r.state._replace(env=r.state.env.normalizer) for r in (whole, resumed)]
    for x, y in zip(*map(jax.tree.leaves, states), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for name in ("episode_return", "loss", "env_steps", "staleness"):
        np.testing.assert_array_equal(whole.metrics[name], resumed.metrics[name], err_msg=name)
    assert (run / "metrics.jsonl").read_text().count("\n") == 6
    assert live_workers() == []


@pytest.mark.timeout(300)
def test_a_free_running_host_run_resumes_from_its_checkpoint(tmp_path):
    cfg = aligned_ppo(deterministic=False)
    jra.train(cfg, seed=1, run_dir=tmp_path / "run", progress=False)
    run = resumed_from(tmp_path / "run", 4, tmp_path)
    saved = checkpoint.restore(run, cfg)
    resumed = jra.train(resume=run, progress=False)
    assert int(resumed.state.update) == 6 and len(resumed.metrics["loss"]) == 6
    counts = resumed.state.env.normalizer.obs.count
    assert np.all(counts >= saved.env.normalizer.obs.count + 2 * EPISODE)  # continued
    assert np.isfinite(jra.evaluate(resumed, cfg, 2)["mean_return"])


def run_cli(*argv: str, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxrl_async.cli", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, **kw)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("env, extra", [
    ("gymnasium:Pendulum-v1", ("--num-envs", "4", "--num-steps", "64", "--normalize-obs",
                               "--normalize-reward", "--host-workers", "1")),
    ("envpool:HalfCheetah-v4", ("--runner", "async", "--num-envs", "2", "--num-steps", "128",
                                "--normalize-obs")),
], ids=["gymnasium-no-runner", "envpool"])
def test_train_eval_resume_from_the_command_line(env, extra, tmp_path):
    pytest.importorskip(env.partition(":")[0])
    run = tmp_path / "run"
    budget = 2 * 4 * 64 if env.startswith("gym") else 4 * 2 * 128
    out = run_cli("train", "--env", env, *extra, "--total-timesteps", str(budget),
                  "--log-every", "1", "--eval-episodes", "2", "--run-dir", str(run),
                  "--fast-compile", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "(async runner)" in out.stdout and "final evaluation" in out.stdout, out.stdout
    done = json.loads((run / "summary.json").read_text())["updates_done"]
    assert checkpoint.steps(run) == [done]
    assert json.loads((run / "eval.json").read_text())["num_episodes"] == 2

    evaluated = run_cli("eval", str(run), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    assert f"checkpoint at update {done}" in evaluated.stdout
    assert len((run / "evals.jsonl").read_text().splitlines()) == 1

    resumed = run_cli("train", "--resume", str(run), "--total-timesteps", str(2 * budget),
                      "--extend", "--eval-episodes", "0", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert checkpoint.steps(run)[-1] == 2 * done
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["env_steps"] for line in lines][done - 1:done + 1] == [
        budget, budget + budget // done]  # continued from the checkpoint's step
    assert live_workers() == []


@pytest.mark.timeout(300)
def test_a_gif_needs_a_renderer_and_envpool_names_its_gymnasium_twin(tmp_path):
    cfg = jra.PPOConfig(env="envpool:HalfCheetah-v4", num_envs=2, num_steps=16,
                        total_timesteps=32, fast_compile=True)
    with pytest.raises(ValueError, match=r"EnvPool envs do not render; a GIF of the same task "
                                         r"needs its gymnasium id, gymnasium:HalfCheetah-v4"):
        jra.save_gif(None, cfg, tmp_path / "x.gif")
    pytest.importorskip("pygame")
    cfg = jra.PPOConfig(env="gymnasium:CartPole-v1", num_envs=2, num_steps=16,
                        total_timesteps=32, fast_compile=True)
    result = jra.train(cfg, progress=False)
    from PIL import Image

    path = jra.save_gif(result, cfg, tmp_path / "cartpole.gif")
    with Image.open(path) as gif:
        assert gif.n_frames >= 9 and gif.size == (600, 400)


CTRL_C_SCRIPT = """
import sys
import jaxrl_async as jra
cfg = jra.PPOConfig(env="gymnasium:CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                    update_epochs=1, total_timesteps=10**9, log_every=4, fast_compile=True,
                    runner=jra.AsyncConfig(host_workers=2))
try:
    jra.train(cfg, seed=3, run_dir=sys.argv[1], progress=False)
except jra.TrainingInterrupted as e:
    print("stopped at", int(e.result.state.update), flush=True)
    sys.exit(130)
"""


@pytest.mark.timeout(240)
def test_ctrl_c_in_a_terminal_stops_a_host_run_with_a_final_checkpoint(tmp_path):
    # A terminal sends SIGINT to the whole process group, env workers included: they ignore
    # it, the run finishes the chunk in flight, saves it and closes them.
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, str(run)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 200
        metrics = run / "metrics.jsonl"
        while not (metrics.exists() and metrics.stat().st_size) and time.time() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    stopped = int(out.split("stopped at")[1])
    assert stopped > 0 and checkpoint.steps(run) == [stopped]
    assert int(checkpoint.restore(run, jra.load_config(run)).update) == stopped


# --------------------------------------------------------------------------- entry points
# An env defined in the user's own script, no main guard: the workers make it from its
# cloudpickled spec, and never run the script again.
UNGUARDED = """
import gymnasium
import numpy as np
import jaxrl_async as jra


class Coin(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t / 10, action], np.float32)
        return obs, float(action), self.t == 10, False, {}


gymnasium.register("user/Coin-v0", entry_point=Coin)
print("main module ran", flush=True)
cfg = jra.PPOConfig(env="gymnasium:user/Coin-v0", num_envs=4, num_steps=16, num_minibatches=2,
                    update_epochs=1, total_timesteps=4 * 16 * 4, fast_compile=True,
                    runner=jra.AsyncConfig(host_workers=2))
result = jra.train(cfg, progress=False)
print("trained", int(result.state.update), round(float(result.metrics["episode_return"][-1]), 1))
"""


def check_trained(out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("main module ran") == 1, out.stdout  # not re-run by a worker
    assert "trained 4 " in out.stdout, out.stdout


@pytest.mark.timeout(300)
def test_a_script_without_a_main_guard_and_python_c_train_on_worker_envs(tmp_path):
    script = tmp_path / "train_coin.py"
    script.write_text(UNGUARDED)
    check_trained(subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=240))
    check_trained(subprocess.run([sys.executable, "-c", UNGUARDED], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=240))


@pytest.mark.timeout(300)
def test_a_notebook_cell_trains_on_worker_envs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(UNGUARDED)])
    nbclient.NotebookClient(notebook, timeout=240, kernel_name="python3").execute()
    text = "".join(o.get("text", "") for o in notebook.cells[0].outputs)
    assert text.count("main module ran") == 1 and "trained 4 " in text, text
