"""Checkpoints of 2-process runs (127.0.0.1, gloo, 2 CPU devices each; both runners, and the
async runner's host actors) and SIGTERM, the preemption notice of SLURM and Kubernetes.

Per runner, one pair of processes trains three runs of the same config: uninterrupted; stopped
by a SIGTERM after update 2 (sync: to process 1 only; async: to both), which stops both
processes after the same update with one final checkpoint; SIGKILLed once checkpoint 4 is
committed. A second pair resumes both stopped runs (the killed one beside a leftover temporary
directory of an interrupted multi-process write of checkpoint 6, which is ignored and then
removed): both end bit for bit like the uninterrupted run (the async runner: deterministic
mode; the host-env run: on ``test_host_runs.Aligned``, whose episodes a resume's fresh resets
do not change, with every env's normalisation state a global array over the processes).
Resuming on another layout (this one process) is refused before anything changes. And
the command line, in one process, exits with ``EXIT_PREEMPTED`` on SIGTERM after a final
checkpoint, and resumes from it."""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.cli.command import EXIT_PREEMPTED, main
from jaxrl_async.run import checkpoint
from tests.test_distributed import run_two_processes
from tests.test_host_runs import EPISODE, aligned_ppo

ROOT = Path(__file__).resolve().parents[1]
SEED, SIGTERM_AT, KILL_AT, UPDATES = 5, 2, 4, 8
PPO = jra.PPOConfig(env="CartPole-v1", num_envs=8, num_steps=16, num_minibatches=2,
                    update_epochs=2, total_timesteps=8 * 16 * UPDATES, log_every=2,
                    checkpoint_every=2, keep_checkpoints=8, normalize_obs=True,
                    fast_compile=True)
CONFIGS = {"sync": dataclasses.replace(PPO, runner=jra.SyncConfig(num_devices=4)),
           "async": dataclasses.replace(PPO, runner=jra.AsyncConfig(actor_devices=1,
                                                                    learner_devices=1)),
           # each process: 4 envs stepped inline by 1 actor stream, 1 learner device
           "host": dataclasses.replace(
               aligned_ppo(), num_envs=8, total_timesteps=8 * EPISODE * UPDATES,
               keep_checkpoints=8,
               runner=jra.AsyncConfig(actor_devices=1, learner_devices=1,
                                      host_vectorization="inline"))}
SIGTERM_TO = {"sync": (1,), "async": (0, 1), "host": (0, 1)}  # who gets the SIGTERM


def two_processes(out: Path, runner: str, phase: str) -> tuple[list[int], list[str]]:
    return run_two_processes("distributed_checkpoint_worker.py", str(out), runner, phase,
                             timeout=200)


def assert_same(out: Path, name: str) -> None:
    whole = np.load(out / "whole0.npz")
    for i in range(2):
        got = np.load(out / f"{name}{i}.npz")
        for key in whole.files:
            np.testing.assert_array_equal(got[key], whole[key], err_msg=f"{name}{i} {key}")


@pytest.mark.timeout(400)
@pytest.mark.parametrize("runner", ["sync", "async", "host"])
def test_two_processes_stopped_by_sigterm_or_killed_resume_bit_for_bit(tmp_path, runner,
                                                                       devices):
    codes, outputs = two_processes(tmp_path, runner, "first")
    log = "\n\n".join(o[-3000:] for o in outputs)
    assert codes == [-9, -9] and all("KILLED" in o for o in outputs), log
    assert_same(tmp_path, "whole")  # (the two processes agree bitwise)

    # SIGTERM: both processes stopped after the same update, from the same signal
    stopped = [json.loads((tmp_path / f"term{i}.json").read_text()) for i in range(2)]
    assert stopped[0] == stopped[1] and stopped[0]["signal"] == "SIGTERM", stopped
    update = stopped[0]["update"]
    assert SIGTERM_AT < update < UPDATES, update  # the next chunk boundary (async: or one on)
    assert checkpoint.steps(tmp_path / "term")[-1] == update
    assert json.loads((tmp_path / "term" / "summary.json").read_text())["interrupted"]

    killed = tmp_path / "killed"
    assert checkpoint.steps(killed) == [2, KILL_AT] and not checkpoint.incomplete(killed)

    # another layout (this process: 1 process x 4 devices): refused, nothing changed
    before = {p: p.read_bytes() for p in killed.rglob("*") if p.is_file()}
    with pytest.raises(jra.CheckpointError, match=r"written by 2 processes x 2 devices each; "
                                                  r"this run has 1 process x 4 devices"):
        jra.train(resume=killed, progress=False)
    assert {p: p.read_bytes() for p in killed.rglob("*") if p.is_file()} == before

    # a multi-process write of checkpoint 6 that was killed: process 0's part only, no commit
    partial = killed / "checkpoints" / "6.orbax-checkpoint-tmp-1765100000"
    shutil.copytree(killed / "checkpoints" / str(KILL_AT), partial)
    for path in partial.rglob("*"):
        if path.is_file() and ("process_1" in str(path) or path.name.startswith("_")):
            path.unlink()

    codes, outputs = two_processes(tmp_path, runner, "resume")
    log = "\n\n".join(o[-3000:] for o in outputs)
    assert codes == [0, 0], log
    assert "ignoring the incomplete checkpoint" in outputs[0], log
    assert_same(tmp_path, "term")
    assert_same(tmp_path, "killed")
    assert checkpoint.steps(killed)[-1] == UPDATES and not checkpoint.incomplete(killed)
    assert (len((killed / "metrics.jsonl").read_text().splitlines())
            == len((tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()) == UPDATES)


@pytest.mark.timeout(300)
def test_sigterm_on_the_command_line_exits_preempted_and_resumes(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["--algo", "ppo", "--env", "CartPole-v1", "--runner", "async", "--num-envs", "4",
            "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
            "--total-timesteps", str(4 * 16 * 10**6), "--log-every", "4", "--fast-compile",
            "--eval-episodes", "0", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "jaxrl_async.cli", "train", *args,
                             "--run-dir", str(run)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 150
        metrics = run / "metrics.jsonl"
        while not (metrics.exists() and metrics.stat().st_size) and time.time() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, (out, err)
    assert "stopped by SIGTERM (preemption) after update" in err
    stopped = checkpoint.steps(run)
    assert len(stopped) == 1 and stopped[0] > 0, stopped  # the final one, written whole
    assert len(metrics.read_text().splitlines()) == stopped[0]

    total = (stopped[0] + 4) * 4 * 16  # resumed to an end 4 updates on (lr re-planned)
    assert main(["train", "--resume", str(run), "--total-timesteps", str(total), "--extend",
                 "--eval-episodes", "0", "--no-progress"]) == 0
    assert json.loads((run / "summary.json").read_text())["updates_done"] == stopped[0] + 4
    assert checkpoint.steps(run)[-1] == stopped[0] + 4
