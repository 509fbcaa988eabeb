"""Sweeps: one compile for a whole grid x seeds over 4 devices, each run equal to that config
trained alone, static fields rejected by name, the table, plots and random search."""

import csv
import importlib
import json

import jax
import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.cli.command import main
from jaxrl_async.search.sweep import count_compiles, grid_points, sample_points, vmap_runs

TINY = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                     update_epochs=2, total_timesteps=4 * 16 * 5, log_every=2, eval_every=2,
                     eval_episodes=2)  # evaluated inside the one compiled sweep too
sweep_module = importlib.import_module("jaxrl_async.search.sweep")  # jra.sweep is the function
GRID = {"lr": [1e-3, 3e-4, 1e-4], "ent_coef": [0.0, 0.05]}
SEEDS = 3  # 6 configs x 3 seeds = 18 runs: padded to 20 on 4 devices


@pytest.fixture(scope="module")
def swept(devices):
    sweep_module._program.cache_clear()  # so the count below sees this sweep's compile
    # The env's spec is read once per process (gymnax's reset compiles a small cast on the way);
    # a test file run alone must not count that as the sweep's.
    jra.make_env(TINY.env)
    with count_compiles() as compiled:
        result = jra.sweep(TINY, grid=GRID, seeds=SEEDS, progress=True)
    return result, compiled


def test_whole_sweep_is_one_compile_over_all_devices(swept):
    result, compiled = swept
    assert compiled == ["jit(runs)"], compiled  # one XLA program, nothing else compiled
    assert result.timing["runs"] == 18 and result.timing["devices"] == 4
    assert result.timing["padded_runs"] == 2
    assert result.curves["episode_return"].shape == (6, SEEDS, TINY.num_updates)
    assert jax.tree.leaves(result.params)[0].shape[:2] == (6, SEEDS)


def test_each_run_equals_that_config_trained_alone(swept):
    result, _ = swept
    config, seed = 5, 2  # the last run: on the last device, next to the padding
    cfg = result.configs[config]
    assert (cfg.lr, cfg.ent_coef) == (result.points[config]["lr"],
                                      result.points[config]["ent_coef"])
    alone = jax.jit(jra.make_train(cfg))(jax.random.key(result.seeds[seed]))
    for name, values in alone.metrics.items():
        np.testing.assert_allclose(result.curves[name][config, seed], values, rtol=1e-4,
                                   atol=1e-5, err_msg=name)
    swept_params = jax.tree.map(lambda x: x[config, seed], result.params)
    for a, b in zip(jax.tree.leaves(alone.params), jax.tree.leaves(swept_params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # and the configs really differ: another config's curve is not this one
    other = (config + 1) % len(result.configs)
    assert not np.allclose(result.curves["loss"][other, seed], alone.metrics["loss"])


def test_bad_fields_and_values_are_named_before_compiling():
    with count_compiles() as compiled:
        with pytest.raises(ValueError, match="no field") as err:
            jra.sweep(TINY, grid={"learning_rate": [1e-3]})
        with pytest.raises(ValueError, match=r"PPOConfig\.lr must be > 0"):
            jra.sweep(TINY, grid={"lr": [1e-3, -1.0]})  # every point validated up front
        with pytest.raises(ValueError, match=r"PPOConfig\.num_envs must be"):
            jra.sweep(TINY, grid={"num_envs": [4, 0]})  # a static value too
    assert "fields: gamma, obs_clip, reward_clip, lr" in str(err.value)
    assert compiled == []


def test_grid_order_and_table(swept, tmp_path):
    result, _ = swept
    assert result.points == grid_points(GRID)
    assert [p["lr"] for p in result.points[:2]] == [1e-3, 1e-3]  # first key varies slowest
    rows = result.rows
    assert len(rows) == 18
    assert set(rows[0]) == {"config", "lr", "ent_coef", "seed", "final_return", "auc", "sps",
                            "final_eval_return"}
    evals = result.curves["eval_return"]  # after updates 2, 4 and 5 (the last) of every run
    assert np.isnan(evals[..., [0, 2]]).all() and np.isfinite(evals[..., [1, 3, 4]]).all()
    assert rows[4]["final_eval_return"] == evals[1, 1, -1]
    assert [r["seed"] for r in rows[:3]] == [0, 1, 2]
    path = result.to_csv(tmp_path / "sweep.csv")
    with path.open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 18 and float(table[4]["final_return"]) == pytest.approx(
        rows[4]["final_return"])
    best = result.best()
    finals = result.final_return.mean(1)
    assert best["config"] == int(np.nanargmax(finals))
    assert best["cfg"] == result.configs[best["config"]]
    assert result.best(maximize=False)["config"] == int(np.nanargmin(finals))
    assert result.rows[0]["sps"] > 0 and result.timing["compile_s"] > 0


def test_plots(swept, tmp_path):
    result, _ = swept
    heat = result.plot(path=tmp_path / "heat.png")
    assert heat.axes[0].get_xlabel() == "ent_coef" and heat.axes[0].get_ylabel() == "lr"
    assert (tmp_path / "heat.png").stat().st_size > 1000
    one_d = jra.SweepResult(**{**result.__dict__, "grid": {"lr": GRID["lr"]},
                               "points": [{"lr": v} for v in GRID["lr"]],
                               "configs": result.configs[::2], "fields": ("lr",),
                               "curves": {k: v[::2] for k, v in result.curves.items()}})
    fig = one_d.plot(path=tmp_path / "curves.png")
    assert len(fig.axes[0].get_lines()) == 3  # one curve (with a seed band) per value
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_sample_points_ranges_and_determinism():
    space = {"lr": jra.LogUniform(1e-5, 1e-1), "clip_eps": jra.Uniform(0.1, 0.3),
             "gae_lambda": [0.9, 0.95]}
    points = sample_points(space, 2000, seed=1)
    assert points == sample_points(space, 2000, seed=1)
    assert points != sample_points(space, 2000, seed=2)
    lr = np.array([p["lr"] for p in points])
    clip = np.array([p["clip_eps"] for p in points])
    assert lr.min() >= 1e-5 and lr.max() <= 1e-1 and clip.min() >= 0.1 and clip.max() <= 0.3
    assert np.median(lr) == pytest.approx(1e-3, rel=0.3)  # log-uniform: geometric middle
    assert np.median(clip) == pytest.approx(0.2, abs=0.02)
    assert {p["gae_lambda"] for p in points} == {0.9, 0.95}
    with pytest.raises(ValueError, match="low"):
        sample_points({"lr": jra.LogUniform(0.0, 1.0)}, 2)


def test_random_search_reuses_the_compiled_sweep(swept):
    # 6 samples x 3 seeds: the same program shape as the grid, so nothing is compiled again.
    with count_compiles() as compiled:
        result = jra.random_search(TINY, {"lr": jra.LogUniform(1e-4, 1e-2),
                                          "vf_coef": jra.Uniform(0.25, 1.0)},
                                   num_samples=6, seeds=SEEDS, seed=3)
    assert compiled == []
    assert result.grid is None and result.fields == ("lr", "vf_coef")
    assert [c.lr for c in result.configs] == [p["lr"] for p in sample_points(
        {"lr": jra.LogUniform(1e-4, 1e-2), "vf_coef": jra.Uniform(0.25, 1.0)}, 6, 3)]
    assert len({round(float(r), 6) for r in result.curves["loss"][:, 0, -1]}) == 6


def test_sweep_rejects_a_multi_device_run():
    cfg = jra.PPOConfig(**{**TINY.__dict__, "runner": jra.SyncConfig(num_devices=2)})
    with pytest.raises(ValueError, match="one device per run"):
        jra.sweep(cfg, grid={"lr": [1e-3]})


def test_sweep_command_line(swept, tmp_path, capsys):
    # The same sweep as the fixture's, from the command line: the sweep program is cached by
    # shape and static config, so it is not compiled again.
    out = tmp_path / "sweep"
    with count_compiles() as compiled:
        code = main(["sweep", "--total-timesteps", "320", "--num-envs", "4", "--num-steps",
                     "16", "--num-minibatches", "2", "--update-epochs", "2", "--log-every", "2",
                     "--eval-every", "2", "--eval-episodes", "2",
                     "--grid", "lr=1e-3,3e-4,1e-4", "--grid", "ent_coef=0,0.05", "--seeds",
                     "3", "--out", str(out)])
    assert code == 0 and compiled == []
    captured = capsys.readouterr()
    text = captured.out
    assert "6 configs x 3 seeds = 18 runs on 4 device(s), one compile" in text
    assert "best:" in text and "SPS=" in captured.err  # the progress bar
    assert "final eval" in text
    rows = (out / "results.csv").read_text().splitlines()
    assert rows[0] == ("config,lr,ent_coef,seed,final_return,auc,final_eval_return,"
                       "sps") and len(rows) == 19
    best = json.loads((out / "best.json").read_text())
    assert best["_type"] == "PPOConfig" and best["lr"] in (1e-3, 3e-4, 1e-4)  # a run file
    assert best["from_sweep"]["rank_by"] == "final_return"
    assert (out / "sweep.png").stat().st_size > 1000
    assert main(["sweep", "--random", "num_envs=uniform:4:8", "--no-progress"]) == 2
    assert "PPOConfig.num_envs is static" in capsys.readouterr().err  # a grid of it may


def test_sweep_from_a_file_with_tracking_logs_one_run_with_the_results_table(
        swept, tmp_path, monkeypatch):
    """``sweep --config FILE --track``: the fixture's sweep (cached: not compiled again) from a
    sweep file, logged offline as one tracker run whose table is results.csv."""
    pytest.importorskip("wandb")
    from tests.wandb_offline import tracker_runs

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "sweep.yaml").write_text(
        "base: {algo: ppo, total_timesteps: 320, num_envs: 4, num_steps: 16, "
        "num_minibatches: 2, update_epochs: 2, log_every: 2, eval_every: 2, eval_episodes: 2}\n"
        "grid: {lr: [1.0e-3, 3.0e-4, 1.0e-4], ent_coef: [0, 0.05]}\nseeds: 3\n")
    out = tmp_path / "sweep"
    with count_compiles() as compiled:
        code = main(["sweep", "--config", str(tmp_path / "sweep.yaml"), "--track",
                     "--wandb-project", "tests", "--out", str(out)])
    assert code == 0 and compiled == []
    [session] = tracker_runs(out)
    [row] = session["history"]
    table = json.loads(next(out.glob(f"wandb/offline-run-*/files/{row['results/path']}"))
                       .read_text())
    with (out / "results.csv").open() as f:
        written = list(csv.reader(f))
    assert table["columns"] == written[0] and len(written) == 19
    assert [[str(v) for v in r] for r in table["data"]] == written[1:]
    assert session["config"]["sweep"]["grid"] == {"lr": [1e-3, 3e-4, 1e-4],
                                                   "ent_coef": [0.0, 0.05]}
    assert {"best/lr", "best/ent_coef", "best/final_return", "sweep_plot"} <= \
        session["summary"]


@pytest.mark.parametrize("runs", [1, 3])
def test_vmap_runs_gives_what_vmap_gives(runs):
    """One run per device runs unbatched (``jra.train``'s program), more are ``vmap``-ed: the
    same values and shapes either way, PRNG keys included."""

    def fn(scale, key):
        return {"x": scale * jax.random.normal(key, (4, 3)) @ np.ones((3, 2), np.float32),
                "key": jax.random.fold_in(key, 7)}

    scales = np.arange(1, runs + 1, dtype=np.float32)
    keys = jax.random.split(jax.random.key(0), runs)
    got, want = vmap_runs(fn)(scales, keys), jax.vmap(fn)(scales, keys)
    assert got["x"].shape == want["x"].shape == (runs, 4, 2)
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-6)
    np.testing.assert_array_equal(jax.random.key_data(got["key"]),
                                  jax.random.key_data(want["key"]))
