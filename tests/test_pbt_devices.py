"""PBT and successive halving with the members sharded over devices and processes: on 2 devices
of this process and on 2 processes x 2 devices (gloo on 127.0.0.1) they agree with 1 device
(the same lineage, the curves to float rounding), each device holding only its share of the
members; a member count that does not divide the devices is named; a run killed with SIGKILL
after a checkpoint, or in the middle of writing one, resumes to the uninterrupted run, bit for
bit; a checkpoint resumed on another device count is re-sharded."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from tests.test_distributed import ROOT, run_two_processes

TINY = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=8, num_minibatches=1,
                     update_epochs=1, hidden_sizes=(16,), total_timesteps=4 * 8 * 8,
                     log_every=4, fast_compile=True)  # 8 updates: 4 segments of 2
SPACE = {"lr": jra.LogUniform(1e-4, 1e-2), "ent_coef": [0.0, 0.01, 0.05],
         "gamma": jra.Uniform(0.9, 0.999)}
N, SEEDS = 4, (0, 3)
FIRST = 4  # the first two segments' updates: equal to 1e-5 on any layout


def run(kind: str, devices: int, directory: Path):
    """PBT or halving of the same population, checkpointed every segment (one compiled
    program per device count serves both kinds and every resume below)."""
    common = dict(population=N, seeds=SEEDS, progress=False, num_devices=devices,
                  checkpoint_dir=directory, checkpoint_every=1)
    if kind == "pbt":
        return jra.pbt(TINY, SPACE, ready_every=2, seed=7, **common)
    return jra.successive_halving(TINY, SPACE, eta=2, rungs=3, **common)


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    return {kind: run(kind, 1, tmp_path_factory.mktemp(kind)) for kind in ("pbt", "halving")}


def assert_agree(a: dict, b: dict) -> None:
    """Curves and lineage (as saved by population_worker or a result's) of two layouts: the
    same lineage, the first segments' curves to 1e-5."""
    for k in ("source", "exploited", "update"):
        np.testing.assert_array_equal(a[f"lineage_{k}"], b[f"lineage_{k}"], err_msg=k)
    for k in ("score", *SPACE):
        np.testing.assert_allclose(a[f"lineage_{k}"], b[f"lineage_{k}"], rtol=1e-5, err_msg=k)
    for k in ("loss", "policy_loss", "value_loss", "episode_return", "entropy"):
        np.testing.assert_allclose(a[f"curve_{k}"][..., :FIRST], b[f"curve_{k}"][..., :FIRST],
                                   rtol=1e-5, atol=1e-6, err_msg=k)


def flat(result) -> dict:
    return {**{f"curve_{k}": v for k, v in result.curves.items()},
            **{f"lineage_{k}": v for k, v in result.lineage.items()}}


def assert_same(a, b) -> None:
    """Bit for bit: curves, lineage, params."""
    for k in a.curves:
        np.testing.assert_array_equal(a.curves[k], b.curves[k], err_msg=k)
    for k in a.lineage:
        np.testing.assert_array_equal(a.lineage[k], b.lineage[k], err_msg=k)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("kind", ["pbt", "halving"])
def test_two_devices_train_their_own_members_and_agree_with_one(one_device, kind, tmp_path,
                                                                devices):
    sharded = run(kind, 2, tmp_path)
    # each device holds (and trains) its 4 of the 8 members, not all of them
    assert sharded.timing["devices"] == 2 and sharded.timing["runs_per_device"] == N
    assert one_device[kind].timing["runs_per_device"] == N * len(SEEDS)
    assert sharded.lineage["exploited"].any()
    assert_agree(flat(sharded), flat(one_device[kind]))


def test_members_that_do_not_divide_the_devices_are_named(devices):
    with pytest.raises(ValueError) as e:
        jra.pbt(TINY, SPACE, population=3, ready_every=2, seeds=1, num_devices=2,
                progress=False)
    for words in ("num_devices=2", "population 3 x seeds 1 = 3 members", "2 devices",
                  "allowed here: 1, 3"):
        assert words in str(e.value), str(e.value)
    with pytest.raises(ValueError, match=r"num_devices must be an integer in \[1, 4\]"):
        jra.successive_halving(TINY, SPACE, population=4, num_devices=5, progress=False)


@pytest.mark.timeout(300)
def test_two_processes_agree_with_one_device(one_device, tmp_path, devices):
    """2 processes x 2 devices: PBT stopped after its second checkpoint and resumed there,
    and halving; every process gets the whole result, only process 0 writes."""
    codes, outputs = run_two_processes("population_worker.py", str(tmp_path))
    assert codes == [0, 0], "\n\n".join(o[-3000:] for o in outputs)
    for kind in ("pbt", "halving"):
        first, second = (dict(np.load(tmp_path / f"{kind}{i}.npz")) for i in range(2))
        for name in first:
            np.testing.assert_array_equal(first[name], second[name], err_msg=name)  # bitwise
        assert first["devices"] == 4 and first["runs_per_device"] == N * len(SEEDS) // 4
        assert_agree(first, flat(one_device[kind]))
        assert sorted(p.name for p in (tmp_path / kind).iterdir()) == [
            "checkpoint.npz", "population.json"]


@pytest.mark.timeout(240)
def test_killed_runs_resume_to_the_uninterrupted_run(one_device, tmp_path, devices):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for mode, done in (("after", 2), ("during", 2)):
        directory = tmp_path / mode
        proc = subprocess.run([sys.executable, str(ROOT / "tests" / "population_kill_worker.py"),
                               mode, str(directory)], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=200)
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
        with np.load(directory / "checkpoint.npz") as data:
            assert int(data["done"]) == done
        assert (directory / "checkpoint.tmp.npz").exists() == (mode == "during")
        if mode == "after":
            shutil.copytree(directory, tmp_path / "reshard")
        resumed = jra.resume_population(directory, progress=False)
        assert resumed.timing["devices"] == 1
        assert_same(resumed, one_device["pbt"])
        assert not (directory / "checkpoint.tmp.npz").exists()
    # the checkpoint holds every member: resumed on 2 devices, they are re-sharded
    again = jra.resume_population(tmp_path / "reshard", num_devices=2, progress=False)
    assert again.timing["runs_per_device"] == N
    assert_agree(flat(again), flat(one_device["pbt"]))
