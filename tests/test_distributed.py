"""Two processes on 127.0.0.1 (gloo collectives, 2 CPU devices each) train one PPO run (with
observation normalisation: statistics merged over both processes' envs) and one DQN run (replay
rings sharded with the envs over the processes) whose learner spans the devices of both; both
end with bitwise-identical params equal to a 1-process run with the same global batch. Under
the sync runner the learner spans all 4 devices; under the async runner each process has 1
actor and 1 learner device."""

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

SYNC = jra.SyncConfig(num_devices=4)
PPO = jra.PPOConfig(env="CartPole-v1", num_envs=8, num_steps=16, num_minibatches=2,
                    update_epochs=2, total_timesteps=8 * 16 * 6, log_every=2, normalize_obs=True,
                    fast_compile=True, runner=SYNC)
DQN = jra.DQNConfig(env="CartPole-v1", num_envs=8, num_steps=4, total_timesteps=8 * 4 * 6,
                    buffer_size=8 * 4 * 6, batch_size=32, samples_per_insert=2.0,
                    learning_starts=64, log_every=2, fast_compile=True, runner=SYNC)


def runner_config(name: str, processes: int) -> dict:
    """Per process: 1 actor device, 1 learner device; the learner spans both processes. The
    same global batch in one process: 2 actor devices (as the 2 processes), 2 learner devices."""
    per = 2 // processes
    return {"sync": SYNC, "async": jra.AsyncConfig(actor_devices=per, learner_devices=per)}[name]


CONFIGS = {name: [dataclasses.replace(c, runner=runner_config(name, 2)) for c in (PPO, DQN)]
           for name in ("sync", "async")}
SINGLE = {name: [dataclasses.replace(c, runner=runner_config(name, 1)) for c in (PPO, DQN)]
          for name in ("sync", "async")}
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes(worker: str, *args: str, timeout: float = 240,
                      stderr: int = subprocess.STDOUT) -> tuple[list[int], list]:
    """Run ``tests/<worker>`` as processes 0 and 1 of a ``jax.distributed`` run on 127.0.0.1
    (argv: the process index, the port, ``args``), this checkout first on the path and no
    forced device count (the worker sets its own), and wait for both: their return codes and
    outputs (stdout with stderr in it, or ``(stdout, stderr)`` with ``stderr=PIPE``)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / worker), str(i), str(port),
                               *args], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=stderr, text=True)
             for i in range(2)]
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    if stderr == subprocess.STDOUT:
        outputs = [out for out, _ in outputs]
    return [p.returncode for p in procs], outputs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("runner", ["sync", "async"])
def test_two_processes_match_each_other_and_one_process(tmp_path, devices, runner):
    # Process 1 is handed a directory that already holds a run (as process 0's own would be,
    # on a file system all hosts share): only the main process checks it, and writes.
    stale = [tmp_path / f"run1_{c}" / "metrics.jsonl" for c in range(len(SINGLE[runner]))]
    for path in stale:
        path.parent.mkdir()
        path.write_text("{}\n")
    codes, outputs = run_two_processes("multiprocess_worker.py", str(tmp_path), runner)
    assert codes == [0, 0], "\n\n".join(o[-3000:] for o in outputs)

    for c, cfg in enumerate(SINGLE[runner]):
        first, second = (np.load(tmp_path / f"params{i}_{c}.npz") for i in range(2))
        for name in first.files:
            np.testing.assert_array_equal(first[name], second[name], err_msg=name)  # bitwise
        # only the main process wrote a run directory (and only it refused one holding a run)
        assert (tmp_path / f"run0_{c}" / "metrics.jsonl").exists()
        assert list((tmp_path / f"run1_{c}").iterdir()) == [stale[c]]
        assert stale[c].read_text() == "{}\n"

        single = jra.train(cfg, seed=5, progress=False)  # this process: 4 devices
        leaves = [np.asarray(x) for x in jax.tree.leaves(single.params)]
        for i, leaf in enumerate(leaves):
            np.testing.assert_allclose(first[f"arr_{i}"], leaf, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{cfg.name} leaf {i}")
        np.testing.assert_allclose(first["returns"], single.metrics["episode_return"], rtol=1e-5)
