"""Two processes on 127.0.0.1 (gloo collectives, 2 CPU devices each) train one PPO run whose
learner spans the devices of both; both end with bitwise-identical params equal to a 1-process
run with the same global batch. Under the sync runner the learner spans all 4 devices; under
the async runner each process has 1 actor and 1 learner device."""

import dataclasses
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxrl_async as jra

CONFIG = jra.PPOConfig(env="CartPole-v1", num_envs=8, num_steps=16, num_minibatches=2,
                       update_epochs=2, total_timesteps=8 * 16 * 6, log_every=2,
                       runner=jra.SyncConfig(num_devices=4))
CONFIGS = {
    "sync": CONFIG,
    # per process: 1 actor device (4 envs), 1 learner device; the learner spans both processes
    "async": dataclasses.replace(CONFIG, runner=jra.AsyncConfig(actor_devices=1,
                                                                learner_devices=1)),
}
# The same global batch in one process with 4 devices: 2 actor devices (4 envs each, as the
# 2 processes), 2 learner devices.
SINGLE = {
    "sync": CONFIG,
    "async": dataclasses.replace(CONFIG, runner=jra.AsyncConfig(actor_devices=2,
                                                                learner_devices=2)),
}
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("runner", ["sync", "async"])
def test_two_processes_match_each_other_and_one_process(tmp_path, devices, runner):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "multiprocess_worker.py"),
                               str(i), str(port), str(tmp_path), runner], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]

    first, second = (np.load(tmp_path / f"params{i}.npz") for i in range(2))
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)  # bitwise
    # only the main process wrote a run directory
    assert (tmp_path / "run0" / "metrics.jsonl").exists()
    assert not (tmp_path / "run1").exists()

    single = jra.train(SINGLE[runner], seed=5, progress=False)  # this process: 4 devices
    leaves = [np.asarray(x) for x in jax.tree.leaves(single.params)]
    for i, leaf in enumerate(leaves):
        np.testing.assert_allclose(first[f"arr_{i}"], leaf, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(first["returns"], single.metrics["episode_return"], rtol=1e-5)
