"""Faults while a checkpoint is written. A process SIGKILLed at three points of the write of
checkpoint 8 by the checkpoint sink (its temporary directory made; every item written but not
committed; committed), in a run directory holding checkpoint 4 and metrics to update 10 (what a
run has when it writes checkpoint 8 in the background): the run resumes from the newest complete
checkpoint, warns about and removes the incomplete one, and ends bit for bit like the run
uninterrupted. (The child writes the uninterrupted run's checkpoint 8 rather than training to
it: the same write, without a compile per child.) A full disk (a patched write raising
``OSError(ENOSPC)``) stops the run with a ``CheckpointError`` and leaves the earlier checkpoints
intact and resumable."""

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.run import checkpoint
from tests.fault_worker import KILL_AT, KILL_POINTS

ROOT = Path(__file__).resolve().parents[1]
SEED = 7
CFG = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                    update_epochs=2, total_timesteps=4 * 16 * 12, log_every=2,
                    checkpoint_every=4, keep_checkpoints=3, normalize_obs=True)
CRASHED_AT = 10  # metrics rows the killed run had written


def leaves(state):
    return [np.asarray(jax.random.key_data(x)) if jax.dtypes.issubdtype(
        x.dtype, jax.dtypes.prng_key) else np.asarray(x) for x in jax.tree.leaves(state)]


def assert_same_run(whole: Path, result, again: Path, resumed) -> None:
    """Final state, metrics and metric files bit for bit those of the run uninterrupted."""
    for a, b in zip(leaves(result.state), leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(a, b)
    for name in result.metrics:
        np.testing.assert_array_equal(result.metrics[name], resumed.metrics[name], err_msg=name)
    for name in ("metrics.jsonl", "metrics.csv"):
        assert (whole / name).read_text() == (again / name).read_text(), name
    assert checkpoint.steps(again) == [4, 8, 12] and checkpoint.incomplete(again) == []


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    run = tmp_path_factory.mktemp("whole") / "run"
    return run, jra.train(CFG, seed=SEED, run_dir=run, progress=False)


@pytest.fixture(scope="module")
def killed(tmp_path_factory, whole):
    """One child per kill point, all at once: point -> (run dir, return code, output)."""
    root = tmp_path_factory.mktemp("killed")
    source = whole[0]
    for point in KILL_POINTS:
        (root / point / "checkpoints").mkdir(parents=True)
        shutil.copy(source / "config.json", root / point)
        shutil.copytree(source / "checkpoints" / "4", root / point / "checkpoints" / "4")
        for name, header in (("metrics.jsonl", 0), ("metrics.csv", 1)):
            rows = (source / name).read_text().splitlines(keepends=True)[:CRASHED_AT + header]
            (root / point / name).write_text("".join(rows))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = {point: subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fault_worker.py"), "save", str(source),
         str(root / point), point], env=env, cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
        for point in KILL_POINTS}
    try:
        outputs = {point: p.communicate(timeout=150)[0] for point, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
    return {point: (root / point, procs[point].returncode, outputs[point])
            for point in KILL_POINTS}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_while_writing_a_checkpoint_resumes_bit_for_bit(killed, whole, point):
    run, returncode, output = killed[point]
    assert returncode == -9 and "KILLED" in output, output[-3000:]
    partial = checkpoint.incomplete(run)
    if point == "committed":  # checkpoint 8 is whole: the run resumes from it
        assert checkpoint.steps(run) == [4, KILL_AT] and partial == []
        resumed = jra.train(resume=run, progress=False)
    else:  # checkpoint 8 is incomplete: ignored with a warning, resumed from 4, then removed
        assert checkpoint.steps(run) == [4]
        assert [p.name.split(".")[0] for p in partial] == [str(KILL_AT)]
        with pytest.warns(UserWarning, match=rf"ignoring the incomplete checkpoint .*/{KILL_AT}"
                                             r"\.orbax-checkpoint-tmp.*restoring update 4"):
            resumed = jra.train(resume=run, progress=False)
    assert_same_run(whole[0], whole[1], run, resumed)


@pytest.mark.timeout(300)
def test_a_full_disk_is_a_clear_error_and_the_checkpoints_before_stay(whole, tmp_path,
                                                                      monkeypatch):
    from etils import epath

    run = tmp_path / "run"
    local = type(epath.Path(tmp_path))
    write_text, failed = local.write_text, []

    def disk_full(self, *args, **kwargs):  # every write into checkpoint 8's directory
        if f"{os.sep}{KILL_AT}." in str(self) or f"{os.sep}{KILL_AT}{os.sep}" in str(self):
            failed.append(str(self))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(local, "write_text", disk_full)
    with pytest.raises(jra.CheckpointError, match=rf"could not write checkpoint {KILL_AT} in "
                                                  r".*checkpoints: .*No space left on device.*"
                                                  r"already written are intact: \[4\]"):
        jra.train(CFG, seed=SEED, run_dir=run, progress=False)
    assert failed and checkpoint.steps(run) == [4]
    monkeypatch.undo()  # space again: the run resumes from checkpoint 4, as if never stopped
    done = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["update"]
    assert done >= KILL_AT  # it stopped at the failed write, after update 8
    with pytest.warns(UserWarning, match="ignoring the incomplete checkpoint") if \
            checkpoint.incomplete(run) else _nothing():
        resumed = jra.train(resume=run, progress=False)
    assert_same_run(whole[0], whole[1], run, resumed)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
