"""Held-out seeds: the best config of a search re-trained on test seeds it was not tuned on.

A search that picks its best config on some seeds and reports that config's score on the same
seeds overstates it: the pick is partly the luck of those seeds (Eimer, Lindauer and Raileanu,
"Hyperparameters in Reinforcement Learning and How To Tune Them", ICML 2023, who recommend
separate tuning and test seeds). ``retrain`` re-trains the best config from scratch on
``test_seeds`` (disjoint from the tuning seeds; one compiled program, vmapped over them, by the
sweep's ``run_points`` it is handed) and reports both scores. Every search takes
``test_seeds=`` and puts this in its result's ``test`` (``jra.test_on_seeds`` afterwards).

For PBT the best member's *final* hyperparameters are re-trained from the start (a schedule
that PBT found is not replayed); for successive halving, the survivor's config.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxrl_async.config.fields import check_seed


def check_test_seeds(test_seeds: int | Sequence[int] | None,
                     tuning: Sequence[int]) -> tuple[int, ...] | None:
    """``test_seeds`` as a tuple (a count ``n``: the ``n`` seeds after the tuning seeds'
    largest, so they never overlap); ``ValueError`` when a given list shares a seed with the
    tuning seeds."""
    if test_seeds is None:
        return None
    if isinstance(test_seeds, (int, np.integer)) and not isinstance(test_seeds, bool):
        if not 1 <= test_seeds <= 2**16:
            raise ValueError(f"test_seeds must be a positive count (the seeds after the tuning "
                             f"seeds) or a list of seeds, got {test_seeds}")
        return tuple(max(tuning) + 1 + i for i in range(int(test_seeds)))
    if isinstance(test_seeds, (bool, str)) or not isinstance(test_seeds, Sequence) or \
            not test_seeds:
        raise ValueError(f"test_seeds must be a positive count or a non-empty list of seeds, "
                         f"got {test_seeds!r}")
    seeds = tuple(check_seed(s, "each of test_seeds") for s in test_seeds)
    shared = sorted(set(seeds) & set(tuning))
    if shared:
        raise ValueError(f"test_seeds must be disjoint from the tuning seeds {list(tuning)}; "
                         f"both have {shared}")
    return seeds


def retrain(result: Any, test_seeds: Sequence[int], run_points: Callable, *,
            progress: bool = True) -> dict:
    """The best config of ``result`` (``best()``: by the final training return, averaged over
    the tuning seeds) re-trained on ``test_seeds`` by ``run_points``: the tuning score beside
    the test score, its spread and per-seed values, and the final evaluation where the config
    evaluates."""
    best = result.best()
    cfg = best["cfg"]
    retrained = run_points(cfg, [{}], list(test_seeds), progress=progress)
    final = retrained.final_return[0]
    out = {
        "point": {k: v for k, v in best.items()
                  if k not in ("cfg", "config", "member", "seed", "trial", "final_return",
                               "final_return_std")},
        "tuning_seeds": list(result.seeds), "tuning_score": float(best["final_return"]),
        "test_seeds": list(test_seeds),
        "test_score": float(np.nanmean(final)), "test_std": float(np.nanstd(final)),
        "test_per_seed": [float(x) for x in final],
    }
    if "eval_return" in retrained.curves:
        evals = retrained.final_eval_return[0]
        out.update(test_eval=float(np.nanmean(evals)), test_eval_std=float(np.nanstd(evals)))
    return out


def describe(test: dict) -> str:
    """One line: the tuning score beside the test score."""
    return (f"best config {test['point']}: tuning seeds {test['tuning_seeds']} "
            f"{test['tuning_score']:.4g}; test seeds {test['test_seeds']} "
            f"{test['test_score']:.4g} ± {test['test_std']:.3g}")
