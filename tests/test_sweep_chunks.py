"""Sweeps in chunks: every chunk a call of one compiled program, equal bit for bit to the
runs trained at once (the same runs per device); each chunk checkpointed, a sweep SIGKILLed
after its first chunk resumed to the same numbers; bad input refused before compiling."""

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.search import sweep_chunks
from jaxrl_async.search.sweep import count_compiles

TINY = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                     update_epochs=2, total_timesteps=4 * 16 * 4, log_every=2,
                     fast_compile=True)
GRID = {"lr": [1e-3, 3e-4, 1e-4, 3e-3, 2e-3, 5e-4, 2e-4]}  # 7 runs: the last chunk padded
ROOT = Path(__file__).resolve().parents[1]
sweep_module = importlib.import_module("jaxrl_async.search.sweep")


def assert_same(a, b):
    for name in a.curves:
        np.testing.assert_array_equal(a.curves[name], b.curves[name], err_msg=name)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def swept():
    """7 runs at once on 4 devices (2 per device, one padded) and in 4 chunks of 2 on one
    device (the last chunk padded): each device runs 2 runs either way."""
    jra.make_env(TINY.env)
    whole = jra.sweep(TINY, GRID, seeds=1, num_devices=4, progress=False)
    sweep_module._program.cache_clear()
    with count_compiles() as compiled:
        chunked = jra.sweep(TINY, GRID, seeds=1, num_devices=1, runs_per_chunk=2,
                            progress=True)
    return whole, chunked, compiled


def test_chunks_are_one_compile_and_equal_the_runs_at_once(swept):
    whole, chunked, compiled = swept
    assert compiled == ["jit(runs)"], compiled  # 4 chunks, one program
    t = chunked.timing
    assert (t["chunks"], t["chunk_runs"], t["padded_runs"], t["local_runs"]) == (4, 2, 1, 8)
    assert whole.timing["chunks"] == 1 and whole.timing["padded_runs"] == 1
    assert_same(chunked, whole)  # bit for bit
    assert chunked.curves["loss"].shape == (7, 1, TINY.num_updates)


@pytest.mark.timeout(120)
def test_a_sweep_killed_after_its_first_chunk_resumes_to_the_same_numbers(swept, tmp_path):
    _, chunked, _ = swept
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "sweep_kill_worker.py"),
                           str(tmp_path)], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=100)
    assert proc.returncode == -9, proc.stderr[-3000:]  # SIGKILLed, after chunk 0 was saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g0_c0.npz", "g0_c1.npz.tmp12345",
                                                          "sweep.json"]
    # a chunk file cut short under its final name (not written by a sweep): trained again
    (tmp_path / "g0_c2.npz").write_bytes((tmp_path / "g0_c0.npz").read_bytes()[:200])
    with count_compiles() as compiled, pytest.warns(UserWarning, match="not a whole chunk"):
        resumed = jra.resume_sweep(tmp_path, num_devices=1)
    assert compiled == []  # the program of the fixture's chunked sweep (progress on too)
    assert resumed.timing["resumed_chunks"] == 1 and resumed.timing["local_runs"] == 6
    assert_same(resumed, chunked)
    assert not list(tmp_path.glob("*.tmp*"))  # the half-written file was never read: removed
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == [f"g0_c{k}.npz" for k in range(4)]
    again = jra.sweep(TINY, GRID, seeds=1, num_devices=1, runs_per_chunk=2,
                      checkpoint_dir=tmp_path)  # all done: nothing trained
    assert again.timing["resumed_chunks"] == 4 and again.timing["local_runs"] == 0
    assert_same(again, chunked)
    # the speed of every chunk as it trained (none trained now): the killed start's chunk 0
    # and the resumed start's three, not 0 SPS
    saved_s = sum(float(np.load(tmp_path / f"g0_c{k}.npz")["train_s"]) for k in range(4))
    assert again.timing["train_s"] == 0 and saved_s > 0
    assert again.timing["sps"] == pytest.approx(7 * TINY.total_timesteps / saved_s)
    assert [row["sps"] for row in again.rows] == [pytest.approx(again.timing["sps"] / 7)] * 7

    with count_compiles() as compiled:
        with pytest.raises(ValueError, match=r"holds another sweep \(the seeds differ\)"):
            jra.sweep(TINY, GRID, seeds=2, runs_per_chunk=2, checkpoint_dir=tmp_path)
        with pytest.raises(ValueError, match=r"\(the points \(grid or samples\) differ\)"):
            jra.sweep(TINY, {"lr": GRID["lr"][:3]}, num_devices=1, runs_per_chunk=2,
                      checkpoint_dir=tmp_path)
        with pytest.raises(ValueError, match=r"\(the base config differ\)"):
            jra.sweep(dataclasses.replace(TINY, gamma=0.9), GRID, num_devices=1,
                      runs_per_chunk=2, checkpoint_dir=tmp_path)
        with pytest.raises(ValueError, match=r"holds another sweep \(runs_per_chunk differ"):
            jra.sweep(TINY, GRID, num_devices=1, runs_per_chunk=3, checkpoint_dir=tmp_path)
        other = tmp_path / "other"  # as if saved in chunks of 4 (on 4 devices)
        meta = json.loads((tmp_path / "sweep.json").read_text())
        other.mkdir()
        (other / "sweep.json").write_text(json.dumps({**meta, "chunk_runs": [4],
                                                      "devices": [4]}))
        with pytest.raises(ValueError, match=r"its chunks hold \[4\] runs .*num_devices=4"):
            jra.resume_sweep(other, num_devices=1)
    assert compiled == []


def test_bad_chunks_are_refused_before_compiling(tmp_path):
    with count_compiles() as compiled:
        for bad in (0, -2, 1.5, True, "4"):
            with pytest.raises(ValueError, match="runs_per_chunk must be an int >= 1"):
                jra.sweep(TINY, GRID, runs_per_chunk=bad)
        with pytest.raises(ValueError, match="runs_per_chunk must be an int >= 1"):
            jra.random_search(TINY, {"lr": jra.LogUniform(1e-4, 1e-2)}, 4, runs_per_chunk=0)
        with pytest.raises(ValueError, match="holds no sweep checkpoint"):
            jra.resume_sweep(tmp_path)
    assert compiled == []
    assert not list(tmp_path.iterdir())


def test_layout_pads_only_the_last_chunk():
    layout = sweep_chunks.Layout(runs=7, devices=2, chunk=4)
    assert (layout.chunks, layout.padded) == (2, 8)
    assert [layout.per_device(k) for k in range(2)] == [[2, 2], [2, 1]]
    assert sweep_chunks.plan(7, 4, 3, TINY) == sweep_chunks.Layout(7, 3, 3)  # rounded up: 3
    assert sweep_chunks.plan(7, 4, 5, TINY) == sweep_chunks.Layout(7, 4, 8)
    assert sweep_chunks.plan(3, None, None, TINY) == sweep_chunks.Layout(3, 3, 3)
