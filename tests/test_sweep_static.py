"""Any field in a sweep: static fields (``hidden_sizes``, ``num_envs``) group the runs, one
compiled program per group, and the groups come back as one ``SweepResult`` in grid order."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.cli import main
from jaxrl_async.search.sweep import count_compiles

TINY = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                     total_timesteps=4 * 16 * 12, log_every=4,
                     fast_compile=True)


def test_a_grid_over_hidden_sizes_lr_and_seeds_is_one_result_with_a_compile_per_group(tmp_path):
    grid = {"hidden_sizes": [(8,), (16, 16)], "lr": [1e-3, 3e-3]}
    with count_compiles() as names:
        result = jra.sweep(TINY, grid, seeds=2, progress=False)
    assert names.count("jit(runs)") == 2, names  # one per hidden_sizes value
    assert [p["hidden_sizes"] for p in result.points] == [(8,), (8,), (16, 16), (16, 16)]
    assert [c.hidden_sizes for c in result.configs] == [p["hidden_sizes"] for p in result.points]
    assert [c.lr for c in result.configs] == [1e-3, 3e-3, 1e-3, 3e-3]
    assert result.curves["loss"].shape == (4, 2, 12) and result.timing["groups"] == 2
    assert isinstance(result.params, list)  # two shapes of network: one tree per config
    assert result.params[3]["params"]["actor_torso"]["Dense_1"]["kernel"].shape == (2, 16, 16)
    # a group equals that group swept alone (its own compile, the same runs)
    alone = jra.sweep(dataclasses.replace(TINY, hidden_sizes=(16, 16)), {"lr": [1e-3, 3e-3]},
                      seeds=2, progress=False)
    np.testing.assert_allclose(result.curves["loss"][2:], alone.curves["loss"], rtol=1e-4,
                               atol=1e-6)
    best = result.best()
    assert best["cfg"].hidden_sizes == best["hidden_sizes"]
    rows = list(csv.DictReader(result.to_csv(tmp_path / "r.csv").open()))
    assert len(rows) == 8 and rows[-1]["hidden_sizes"] == "(16, 16)"
    result.plot(path=tmp_path / "heatmap.png")  # tuple values as tick labels
    assert (tmp_path / "heatmap.png").stat().st_size > 1000


def test_a_grid_over_num_envs_lines_up_the_runs_final_updates():
    # 4 envs: 12 updates of 64 steps; 8 envs: 6 updates of 128 steps (the same budget)
    result = jra.sweep(TINY, {"num_envs": [4, 8], "lr": [1e-3, 3e-3]}, seeds=2, progress=False)
    steps = result.curves["env_steps"]
    assert steps.shape == (4, 2, 12)
    assert np.isnan(steps[2:, :, :6]).all() and (steps[2:, :, -1] == 768).all()
    assert (steps[:2, :, -1] == 768).all()
    assert (result.curves["episodes"][2:, :, :6] == 0).all()
    assert np.isfinite(result.final_return).all() and np.isfinite(result.auc).all()
    assert [c.num_updates for c in result.configs] == [12, 12, 6, 6]


def test_random_search_draws_static_choices_and_the_cli_grid_takes_them(tmp_path, capsys):
    result = jra.random_search(TINY, {"hidden_sizes": [(8,), (16,)],
                                      "lr": jra.LogUniform(1e-4, 1e-2)}, 4, progress=False)
    assert {c.hidden_sizes for c in result.configs} <= {(8,), (16,)}
    out = tmp_path / "sweep"
    code = main(["sweep", "--grid", "hidden_sizes=8,16x16", "--grid", "lr=1e-3",
                 "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2",
                 "--total-timesteps", "768", "--seeds", "1", "--out", str(out),
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["hidden_sizes"] for r in rows] == ["(8,)", "(16, 16)"]


def test_pbt_still_refuses_a_static_field_by_name():
    with pytest.raises(ValueError, match=r"PPOConfig\.num_envs is static"):
        jra.pbt(TINY, {"num_envs": [4, 8]}, population=2)
