"""Sweeps over the devices of two processes (127.0.0.1, gloo, 2 CPU devices each): each
process trains only the runs on its own devices (half of them), both end with the whole
result, equal bit for bit to one process with 4 devices (the same runs per device) and to one
device to 1e-5 (16 runs vmapped on one device round differently: docs/sweeps.md); only
process 0 writes the command line's sweep directory, and a resume of it trains nothing."""

import csv
import subprocess
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.cli.command import main
from jaxrl_async.search.sweep import count_compiles
from tests.test_distributed import run_two_processes

TINY = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                     update_epochs=2, total_timesteps=4 * 16 * 4, log_every=2,
                     fast_compile=True)
GRID = {"lr": [1e-3, 3e-4, 1e-4, 3e-3], "ent_coef": [0.0, 0.05]}  # 8 configs
SEEDS = 2  # x 2 seeds: 16 runs, 4 per device on 4 devices
SPACE = {"lr": jra.LogUniform(1e-4, 1e-2), "vf_coef": jra.Uniform(0.25, 1.0)}
CLI = ["--total-timesteps", "256", "--num-envs", "4", "--num-steps", "16", "--num-minibatches",
       "2", "--update-epochs", "2", "--log-every", "2", "--fast-compile", "--grid",
       "lr=1e-3,3e-4,1e-4,3e-3", "--grid", "ent_coef=0,0.05", "--seeds", "4",
       "--runs-per-chunk", "16"]  # 2 chunks of 16 runs, 4 per device (the program of GRID)
ROOT = Path(__file__).resolve().parents[1]


def load(path: Path) -> tuple[list, dict, dict]:
    with np.load(path) as data:
        leaves = [data[f"arr_{i}"] for i in range(sum(f.startswith("arr_") for f in data.files))]
        curves = {f[6:]: data[f] for f in data.files if f.startswith("curve_")}
        timing = {k: int(data[k]) for k in ("local_runs", "devices", "processes")}
    return leaves, curves, timing


def assert_equal(got: tuple, result, **tolerance) -> None:
    leaves, curves, _ = got
    check = (np.testing.assert_allclose if tolerance else np.testing.assert_array_equal)
    for name, values in result.curves.items():
        check(curves[name], values, err_msg=name, **tolerance)
    for a, b in zip(leaves, jax.tree.leaves(result.params), strict=True):
        check(a, b, **tolerance)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    out = tmp_path_factory.mktemp("two_processes")
    codes, outputs = run_two_processes("distributed_sweep_worker.py", str(out), *CLI,
                                       stderr=subprocess.PIPE)
    assert codes == [0, 0], "\n\n".join(
        o[0][-2000:] + o[1][-3000:] for o in outputs)
    return out, outputs


@pytest.mark.timeout(300)
def test_two_processes_share_the_runs_and_both_hold_the_whole_sweep(two_processes, devices):
    out, outputs = two_processes
    first, second = (load(out / f"sweep{i}.npz") for i in range(2))
    for i, (_, _, timing) in enumerate((first, second)):  # each trained its own 8 of 16 runs
        assert timing == {"local_runs": 8, "devices": 4, "processes": 2}, (i, timing)
    # only process 0 shows a progress bar (its own devices' runs)
    assert "process 0's 2 of 4 devices" in outputs[0][1] and "SPS=" in outputs[0][1]
    assert "SPS=" not in outputs[1][1]

    alone = jra.sweep(TINY, GRID, seeds=SEEDS, progress=False)  # 1 process x 4 devices
    assert alone.timing["local_runs"] == 16 and alone.timing["processes"] == 1
    assert_equal(first, alone)  # bit for bit: each device ran the same 4 runs
    assert_equal(second, alone)
    one_device = jra.sweep(TINY, GRID, seeds=SEEDS, num_devices=1, progress=False)
    assert_equal(first, one_device, rtol=1e-5, atol=1e-5)

    random = [load(out / f"random{i}.npz") for i in range(2)]
    with count_compiles() as compiled:  # the same program as the grid's
        searched = jra.random_search(TINY, SPACE, num_samples=8, seeds=SEEDS, seed=3,
                                     progress=False)
    assert compiled == []
    for got in random:
        assert got[2]["local_runs"] == 8
        assert_equal(got, searched)


@pytest.mark.timeout(300)
def test_only_process_0_writes_the_command_lines_sweep_and_a_resume_trains_nothing(
        two_processes, devices, capsys):
    out, outputs = two_processes
    assert not (out / "cli1").exists()  # process 1 wrote nothing
    written = out / "cli0"
    assert {"config.json", "sweep.json", "g0_c0.npz", "g0_c1.npz", "results.csv",
            "best.json", "sweep.png"} <= {p.name for p in written.iterdir()}
    assert "32 runs on 4 device(s)" in outputs[0][0] and "runs on" not in outputs[1][0]
    with written.joinpath("results.csv").open() as f:
        rows = list(csv.DictReader(f))
    alone = jra.sweep(TINY, GRID, seeds=4, runs_per_chunk=16, progress=False)  # 1 process
    for name in ("final_return", "auc"):
        assert [float(r[name]) for r in rows] == pytest.approx(
            [r[name] for r in alone.rows], rel=1e-12, nan_ok=True), name
    before = written.joinpath("results.csv").read_text()
    with count_compiles() as compiled:  # both chunks saved: loaded, nothing trained
        assert main(["sweep", "--resume", str(written), "--no-progress"]) == 0
    assert compiled == []
    assert "32 runs on 4 device(s)" in capsys.readouterr().out
    again = written.joinpath("results.csv").read_text()
    assert [r.rsplit(",", 1)[0] for r in again.splitlines()] == \
        [r.rsplit(",", 1)[0] for r in before.splitlines()]  # all but sps (0: none trained)
