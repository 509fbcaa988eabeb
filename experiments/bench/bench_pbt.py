"""PBT and successive halving against the best point of a grid and a random search, at equal
compute, with the cost of the exploit step.

    python experiments/bench/bench_pbt.py [--task pendulum|acrobot|pqn-cartpole|...]
                                          [--population 16] [--seeds 3] [--heldout-seeds 3]
    python experiments/bench/bench_pbt.py --scaling [--population 16]    (pbt_scaling.py)
    python experiments/bench/bench_pbt.py --populations 64,1024          (one device)

Each method trains ``population`` configs x ``seeds`` for the same number of updates, on one
device, in one compiled program per method (``jra.sweep``, ``jra.random_search``, ``jra.pbt``,
``jra.successive_halving``): the grid is a k x k grid over the space's bounds (log-spaced for a
log field), the random search draws ``population`` points, PBT and halving start from that
same draw (``seed`` 0). Scores are final training returns (``final_window``): for the grid and
the random search the config with the best mean over seeds; for PBT and halving each
population's best member (one population per seed), and the population mean beside it (for
the grid and the random search, the mean of all their configs).
Choosing on the scored seeds flatters the grid and the random search; ``--heldout-seeds n``
also trains their best configs again on ``n`` new seeds (one more program) and reports that
final return, and every method's chosen final params (each seed's) play greedy episodes on
fresh envs (``jra.evaluate``, the same episodes for every method).

The exploit step's cost: the jitted exploit of the whole population (rank, copy of learner
state, perturbation) timed alone on the trained population's state, against the time per
update of the PBT run. The last line printed is one JSON object; ``--plot`` writes the
learning curves.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import operator
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxrl_async as jra
from jaxrl_async.run.sinks import final_window, window_returns
from jaxrl_async.runners.common import compiler_options
from jaxrl_async.search.population import Space
from jaxrl_async.search.sweep import _stack, run_points

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pbt_scaling  # noqa: E402 - beside this file

pbt_module = __import__("jaxrl_async.search.pbt", fromlist=["_exploit"])

TASKS = {
    # jaxrl_async/presets/pendulum_ppo.yaml at a smaller budget; lr and gamma matter most
    "pendulum": (jra.PPOConfig(env="Pendulum-v1", num_envs=16, num_steps=64, lr=1e-3,
                               update_epochs=10, num_minibatches=8, ent_coef=0.0,
                               activation="relu", clip_value=False, gamma=0.95,
                               normalize_obs=True, total_timesteps=100_352),
                 {"lr": jra.LogUniform(1e-4, 1e-2), "gamma": jra.Uniform(0.8, 0.999)}),
    "acrobot": (jra.PPOConfig(env="Acrobot-v1", num_envs=16, num_steps=64, update_epochs=4,
                              num_minibatches=4, total_timesteps=100_352),
                {"lr": jra.LogUniform(1e-4, 1e-2), "ent_coef": jra.LogUniform(1e-4, 1e-1)}),
    # PQN without a learning-rate anneal: a schedule of lr and epsilon is the tuner's to find
    # (a large lr learns fast and then unlearns, the return scored is the exploring policy's)
    "pqn-cartpole": (jra.PQNConfig(env="CartPole-v1", num_envs=16, num_steps=64,
                                   hidden_sizes=(64, 64), update_epochs=4, num_minibatches=4,
                                   anneal_lr=False, total_timesteps=100_352),
                     {"lr": jra.LogUniform(3e-5, 3e-2), "eps_end": jra.Uniform(0.0, 0.4)}),
    "pqn-acrobot": (jra.PQNConfig(env="Acrobot-v1", num_envs=16, num_steps=64,
                                  hidden_sizes=(64, 64), update_epochs=4, num_minibatches=4,
                                  anneal_lr=False, total_timesteps=100_352),
                    {"lr": jra.LogUniform(3e-5, 3e-2), "eps_end": jra.Uniform(0.0, 0.4)}),
}


def grid_of(space: dict, size: int) -> dict:
    """A k x k (x ...) grid over the bounds with k**fields <= size."""
    k = max(2, int(round(size ** (1 / len(space)))))
    while k ** len(space) > size:
        k -= 1
    return {name: [float(v) for v in (np.geomspace if isinstance(d, jra.LogUniform)
                                      else np.linspace)(d.low, d.high, k)]
            for name, d in space.items()}


def summary(curves: dict, window: int, best: np.ndarray) -> list:
    """Mean over seeds of the chosen run's return curve (``best``: [seeds] index of the chosen
    config/member in each seed's column), each point the mean return of the episodes that
    ended in the ``window`` updates up to it."""
    def rolling(x: np.ndarray) -> np.ndarray:
        c = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x, -1)], -1)
        return c[..., window:] - c[..., :-window]

    pick = np.arange(len(best))
    total = rolling(np.asarray(curves["episode_return_sum"], np.float64)[best, pick])
    count = rolling(np.asarray(curves["episodes"], np.float64)[best, pick])
    with np.errstate(all="ignore"):
        return np.nanmean(np.where(count > 0, total / np.maximum(count, 1), np.nan), 0).tolist()


def exploit_ms(result, cfg, space: Space, repeats: int = 20) -> float:
    """Wall time of the jitted exploit step on a population shaped like ``result``'s."""
    schedule = result.schedule
    configs = [dataclasses.replace(cfg, **p) for p in result.points]
    cfgs = _stack([c for c in configs for _ in result.seeds])
    seeds = np.asarray([s for _ in configs for s in result.seeds], np.int32)
    states = pbt_module._init(tuple(sorted(compiler_options(cfg).items())))(cfgs, seeds)
    scores = jnp.asarray(np.random.default_rng(0).normal(size=len(seeds)), jnp.float32)
    keep = jnp.int32(schedule.population - schedule.replaced)
    step = jax.jit(lambda c, s, x, k: pbt_module._exploit(
        schedule.static, space, jax.random.key(0), k, keep, False, c, s, x))
    jax.block_until_ready(step(cfgs, states, scores, 0))
    start = time.perf_counter()
    for i in range(repeats):
        out = step(cfgs, states, scores, i)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats * 1e3


def greedy_return(cfg, params, chosen: np.ndarray, episodes: int) -> list[float]:
    """Mean greedy return on fresh envs (evaluation seed ``10_000 + i``, the same for every
    method) of the chosen run's final params in each seed's column ``i``."""
    pick = jax.tree.map(lambda x: np.asarray(x)[chosen, np.arange(len(chosen))], params)
    return [jra.evaluate(jax.tree.map(operator.itemgetter(i), pick), cfg, episodes,
                         seed=10_000 + i)["mean_return"] for i in range(len(chosen))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="pendulum")
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=None)
    parser.add_argument("--ready-every", type=int, default=10)
    parser.add_argument("--eta", type=int, default=2)
    parser.add_argument("--rungs", type=int, default=3)
    parser.add_argument("--heldout-seeds", type=int, default=0,
                        help="retrain the grid's and random search's best on this many new "
                             "seeds, and score every method's chosen params greedily")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--plot", type=Path, default=None)
    pbt_scaling.add_arguments(parser)
    args = parser.parse_args()
    if pbt_scaling.run(args):
        return
    cfg, space = TASKS[args.task]
    if args.total_timesteps:
        cfg = dataclasses.replace(cfg, total_timesteps=args.total_timesteps)
    seeds = list(range(args.seeds))
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()
    window = final_window(cfg)
    rows, curves, heldout = {}, {}, {}
    greedy = args.heldout_seeds > 0 and not cfg.normalize_obs  # no statistics kept to act with

    def record(name, result, final, best, wall, mean=None):
        rows[name] = {"best_final": float(np.mean(final)), "best_final_std": float(np.std(final)),
                      **({"population_mean": float(np.mean(mean))} if mean is not None else {}),
                      "wall_s": round(wall, 1), "compile_s": round(result.timing["compile_s"], 1),
                      "train_s": round(result.timing["train_s"], 1)}
        curves[name] = summary(result.curves, window, np.asarray(best))
        if greedy:
            scores = greedy_return(cfg, result.params, np.asarray(best), args.eval_episodes)
            rows[name]["greedy"] = float(np.mean(scores))
            rows[name]["greedy_std"] = float(np.std(scores))

    for name, run in (
        ("grid", lambda: jra.sweep(cfg, grid_of(space, args.population), seeds=seeds,
                                   num_devices=1, progress=False)),
        ("random", lambda: jra.random_search(cfg, space, args.population, seeds=seeds,
                                             num_devices=1, progress=False))):
        start = time.perf_counter()
        result = run()
        scores = window_returns(result.curves, window)  # [configs, seeds]
        with np.errstate(all="ignore"):
            c = int(np.nanargmax(np.nanmean(scores, 1)))
        record(name, result, scores[c], [c] * len(seeds), time.perf_counter() - start,
               np.nanmean(scores, 0))  # every config's final return, as a population's mean
        rows[name]["configs"] = len(result.configs)
        rows[name]["best"] = {k: float(v) for k, v in result.points[c].items()}

    if args.heldout_seeds:  # the grid's and the random search's choices on seeds never scored
        new = list(range(args.seeds, args.seeds + args.heldout_seeds))
        start = time.perf_counter()
        again = run_points(cfg, [rows["grid"]["best"], rows["random"]["best"]], new,
                           num_devices=1, progress=False)
        final = window_returns(again.curves, window)  # [2, heldout seeds]
        for i, name in enumerate(("grid", "random")):
            rows[name]["heldout_final"] = float(np.mean(final[i]))
            rows[name]["heldout_final_std"] = float(np.std(final[i]))
        heldout = {"heldout": {"seeds": new, "wall_s": round(time.perf_counter() - start, 1)}}

    for name, run in (
        ("pbt", lambda: jra.pbt(cfg, space, args.population, args.ready_every, seeds,
                                progress=False)),
        ("halving", lambda: jra.successive_halving(cfg, space, args.population, args.eta,
                                                   args.rungs, seeds, progress=False))):
        start = time.perf_counter()
        result = run()
        final = result.final_return  # [members, seeds]
        best = np.nanargmax(np.where(np.isnan(final), -np.inf, final), 0)
        record(name, result, result.population_best, best, time.perf_counter() - start,
               result.population_mean)
        rows[name]["exploits"] = result.timing["exploits"]
        rows[name]["best"] = {k: v for k, v in result.best().items()
                              if k in result.space.names}
        if name == "pbt":
            per_update_ms = result.timing["train_s"] / cfg.num_updates * 1e3
            rows[name]["exploit_ms"] = round(exploit_ms(result, cfg, result.space), 2)
            rows[name]["update_ms"] = round(per_update_ms, 2)

    steps = np.arange(window, cfg.num_updates + 1) * cfg.steps_per_update
    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4))
        for name, curve in curves.items():
            ax.plot(steps, curve, label=f"{name} ({rows[name]['best_final']:.0f})")
        ax.set_xlabel("environment steps per run")
        ax.set_ylabel("mean episodic return (mean of seeds)")
        ax.set_title(f"{cfg.name.upper()} on {cfg.env}: {args.population} configs x "
                     f"{args.seeds} seeds each")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot)

    print(json.dumps({
        "task": args.task, "algo": cfg.name, "env": cfg.env, "population": args.population,
        "seeds": args.seeds, "heldout_seeds": args.heldout_seeds,
        "eval_episodes": args.eval_episodes if greedy else 0,
        "updates": cfg.num_updates, "steps_per_run": cfg.num_updates * cfg.steps_per_update,
        "ready_every": args.ready_every, "eta": args.eta, "rungs": args.rungs,
        "final_window": window, "device": str(jax.devices()[0].platform),
        "methods": rows, **heldout, "curves_every": max(1, cfg.num_updates // 25),
        "curves": {k: [round(v, 1) if math.isfinite(v) else None
                       for v in c[::max(1, cfg.num_updates // 25)]]
                   for k, c in curves.items()}}))


if __name__ == "__main__":
    main()
