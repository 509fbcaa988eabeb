"""What a search buys, and what batching Optuna buys: grid, random search, batched TPE, PBT and
successive halving at the same budget of trained runs, scored on held-out test seeds; and
batched Optuna against Optuna's usual one-trial-at-a-time loop over the same trials.

    python experiments/bench/bench_search.py [--tasks cartpole acrobot] [--runs 32]
        [--search-seeds 3] [--test-seeds 3] [--batches 16 64] [--loop-trials 64]
        [--only quality|speed]

Quality rows (one JSON line per task and search kind): each search trains ``--runs`` configs
once (one tuning seed each; PBT: a population of ``--runs``), ``--search-seeds`` times with
different sampler seeds; its best config is re-trained on ``--test-seeds`` seeds it was not
tuned on (``test_seeds=``, ``jra.test_on_seeds``). The grid (about ``--runs`` points over
``lr`` × ``gae_lambda``) is the same for every search seed, which then seeds its one run a
point. Printed: the test score, mean and spread
over the search seeds, beside the tuning score (which flatters: Eimer et al., ICML 2023).

Speed rows (CartPole): the same ``--loop-trials`` trials (Optuna's RandomSampler with one seed:
the same values asked in the same order) trained by ``jra.optuna_search`` in batches of B, and
by ``study.optimize`` calling ``jra.train`` once per trial (compiled once: the searched fields
are traced arguments), in the same process, compiles done before the clock starts on both
sides. ``jra.train`` runs one program on one device; a batch spreads over all local devices
(on a CPU one per core, ``jra.use_cpu_cores``), as ``jra.sweep`` does. The wall time of each,
the speedup, and the largest difference between the two sides' scores of the same trial (the
same runs: batched kernels round differently, and training amplifies it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

import jaxrl_async as jra
from jaxrl_async.run.sinks import final_window, window_return

jra.use_cpu_cores()  # on a CPU one device per core: a batch spreads over them, as a sweep does

TASKS = {  # budgets at which the return still depends strongly on the hyperparameters
    "cartpole": jra.PPOConfig(env="CartPole-v1", num_envs=8, num_steps=32,
                              total_timesteps=8 * 32 * 30),
    "acrobot": jra.PPOConfig(env="Acrobot-v1", num_envs=8, num_steps=32,
                             total_timesteps=8 * 32 * 60),
}
SPACE = {"lr": jra.LogUniform(1e-5, 1e-1), "gae_lambda": jra.Uniform(0.5, 1.0),
         "ent_coef": jra.Uniform(0.0, 0.05)}


def grid_of(runs: int) -> dict:
    """A grid of about ``runs`` points over the space's first two fields (log-spaced ``lr`` ×
    ``gae_lambda``), ``ent_coef`` at the middle of its range."""
    lrs = max(2, runs // 4)
    return {"lr": list(np.geomspace(SPACE["lr"].low, SPACE["lr"].high, lrs)),
            "gae_lambda": list(np.linspace(SPACE["gae_lambda"].low, SPACE["gae_lambda"].high,
                                           max(1, runs // lrs))),
            "ent_coef": [(SPACE["ent_coef"].low + SPACE["ent_coef"].high) / 2]}


def search(kind: str, cfg, runs: int, seed: int, test_seeds: int):
    if kind == "grid":  # the same grid for every search seed: only its test seeds differ
        return jra.sweep(cfg, grid_of(runs), seeds=[seed], test_seeds=test_seeds,
                         num_devices=1, progress=False)
    if kind == "random":
        return jra.random_search(cfg, SPACE, runs, seed=seed, test_seeds=test_seeds,
                                 num_devices=1, progress=False)
    if kind == "tpe":
        return jra.optuna_search(cfg, SPACE, trials=runs, batch=max(1, runs // 4),
                                 sampler="tpe", seed=seed, test_seeds=test_seeds,
                                 progress=False)
    if kind == "pbt":
        return jra.pbt(cfg, SPACE, population=runs, ready_every=max(1, cfg.num_updates // 6),
                       seed=seed, test_seeds=test_seeds, progress=False)
    if kind == "halving":
        return jra.successive_halving(cfg, SPACE, population=runs, eta=2, rungs=3, seed=seed,
                                      test_seeds=test_seeds, progress=False)
    raise ValueError(kind)


def quality(task: str, kind: str, runs: int, search_seeds: int, test_seeds: int) -> dict:
    cfg = TASKS[task]
    tests, tunes, walls = [], [], []
    for seed in range(search_seeds):
        start = time.perf_counter()
        result = search(kind, cfg, runs, seed, test_seeds)
        walls.append(time.perf_counter() - start)
        tests.append(result.test["test_score"])
        tunes.append(result.test["tuning_score"])
    return {"bench": "search_quality", "task": task, "env": cfg.env, "search": kind,
            "runs_per_search": runs, "steps_per_run": cfg.num_updates * cfg.steps_per_update,
            "search_seeds": search_seeds, "test_seeds": test_seeds,
            "test_score": round(float(np.mean(tests)), 2),
            "test_spread": round(float(np.std(tests)), 2),
            "test_per_search": [round(x, 2) for x in tests],
            "tuning_score": round(float(np.mean(tunes)), 2),
            "wall_s_per_search": round(float(np.mean(walls)), 1)}


def speed(trials: int, batches: list[int]) -> list[dict]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial otherwise
    cfg = TASKS["cartpole"]
    space = {"lr": jra.LogUniform(1e-4, 1e-2), "gae_lambda": jra.Uniform(0.8, 1.0)}
    window = final_window(cfg)
    rows = []

    def objective(trial):  # Optuna the usual way: one jra.train per trial
        point = {"lr": trial.suggest_float("lr", 1e-4, 1e-2, log=True),
                 "gae_lambda": trial.suggest_float("gae_lambda", 0.8, 1.0)}
        result = jra.train(dataclasses.replace(cfg, **point), seed=0, progress=False)
        return window_return(result.metrics, window)

    jra.train(cfg, seed=0, progress=False)  # its compile, not timed
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    start = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    loop_s = time.perf_counter() - start
    loop_params = [t.params for t in study.trials]
    for batch in batches:  # its compile first, not timed either (one per batch shape)
        jra.optuna_search(cfg, space, trials=batch, batch=batch, sampler="random", seed=1,
                          progress=False)
        start = time.perf_counter()
        result = jra.optuna_search(cfg, space, trials=trials, batch=batch, sampler="random",
                                   seed=0, progress=False)
        batched_s = time.perf_counter() - start
        same = all(np.isclose(a["lr"], b["lr"]) and np.isclose(a["gae_lambda"], b["gae_lambda"])
                   for a, b in zip(result.points, loop_params))
        scores = np.asarray([t.value for t in study.trials])
        ours = np.nanmean(result.final_return, 1)
        rows.append({"bench": "search_speed", "env": cfg.env, "trials": trials,
                     "batch": batch, "same_trials": bool(same),
                     "steps_per_trial": cfg.num_updates * cfg.steps_per_update,
                     "loop_s": round(loop_s, 2), "batched_s": round(batched_s, 2),
                     "speedup": round(loop_s / batched_s, 2),
                     "batched_sps": round(result.timing["sps"]),
                     "max_abs_score_diff": round(float(np.nanmax(np.abs(scores - ours))), 3)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["cartpole", "acrobot"],
                        choices=sorted(TASKS))
    parser.add_argument("--kinds", nargs="+",
                        default=["grid", "random", "tpe", "pbt", "halving"])
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--search-seeds", type=int, default=3)
    parser.add_argument("--test-seeds", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--loop-trials", type=int, default=64)
    parser.add_argument("--only", choices=("quality", "speed"), default=None)
    args = parser.parse_args()
    if args.only != "quality":
        for row in speed(args.loop_trials, args.batches):
            print(json.dumps(row), flush=True)
    if args.only != "speed":
        for task in args.tasks:
            for kind in args.kinds:
                print(json.dumps(quality(task, kind, args.runs, args.search_seeds,
                                         args.test_seeds)), flush=True)


if __name__ == "__main__":
    main()
