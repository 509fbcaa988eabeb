"""Held-out seeds for every search (``test_seeds=``): the best config re-trained from scratch on
seeds it was not tuned on, reported beside its tuning score; seeds shared with the tuning
seeds are refused before anything compiles."""

from __future__ import annotations

import numpy as np
import pytest

import jaxrl_async as jra
from jaxrl_async.search.held_out import check_test_seeds

TINY = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 20,
                     fast_compile=True)


def test_a_sweeps_test_score_is_its_best_config_trained_alone_on_the_test_seeds():
    result = jra.sweep(TINY, {"lr": [3e-4, 3e-3]}, seeds=2, test_seeds=2, progress=False)
    best, test = result.best(), result.test
    assert test["tuning_seeds"] == [0, 1] and test["test_seeds"] == [2, 3]
    assert test["point"] == {"lr": best["lr"]}
    assert test["tuning_score"] == pytest.approx(best["final_return"])
    alone = jra.sweep(TINY, {"lr": [best["lr"]]}, seeds=[2, 3], progress=False)
    np.testing.assert_allclose(test["test_per_seed"], alone.final_return[0], rtol=1e-5)
    assert test["test_std"] == pytest.approx(np.std(alone.final_return[0]), rel=1e-5)
    again = jra.test_on_seeds(result, [7], progress=False)  # afterwards, any seeds
    assert again["test_seeds"] == [7] and again["point"] == test["point"]


@pytest.mark.parametrize("kind", ["random", "pbt", "halving"])
def test_every_search_reports_a_test_score(kind):
    space = {"lr": jra.LogUniform(1e-4, 1e-2)}
    if kind == "random":
        result = jra.random_search(TINY, space, 4, seeds=1, test_seeds=[5], progress=False)
    elif kind == "pbt":
        result = jra.pbt(TINY, space, population=4, ready_every=5, test_seeds=[5],
                         progress=False)
    else:
        result = jra.successive_halving(TINY, space, population=4, eta=2, rungs=2,
                                        test_seeds=[5], progress=False)
    best, test = result.best(), result.test
    assert test["test_seeds"] == [5] and test["tuning_seeds"] == [0]
    assert test["point"]["lr"] == pytest.approx(best["lr"])
    assert test["tuning_score"] == pytest.approx(best["final_return"])
    assert np.isfinite(test["test_score"])


def test_shared_or_bad_test_seeds_are_refused_before_anything_compiles():
    with pytest.raises(ValueError, match=r"tuning seeds \[0, 1\]; both have \[1\]"):
        jra.sweep(TINY, {"lr": [1e-3]}, seeds=2, test_seeds=[1, 9])
    with pytest.raises(ValueError, match="disjoint from the tuning seeds"):
        jra.pbt(TINY, {"lr": jra.LogUniform(1e-4, 1e-2)}, population=4, test_seeds=[0])
    with pytest.raises(ValueError, match="test_seeds must be a positive count"):
        jra.random_search(TINY, {"lr": jra.LogUniform(1e-4, 1e-2)}, 2, test_seeds=0)
    assert check_test_seeds(3, (0, 4)) == (5, 6, 7)
