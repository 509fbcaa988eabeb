"""A 16-config x 2-seed sweep in one compile against the same 32 runs one by one.

    python experiments/bench/bench_sweep.py [--total-timesteps 100000] [--fast-compile]

Grid: lr in {1e-4, 3e-4, 1e-3, 3e-3} x ent_coef in {0, 0.003, 0.01, 0.03}, PPO on CartPole-v1
(4 envs x 128 steps). "Sweep" is ``jra.sweep`` (one program, the runs spread over one XLA
device per CPU core); "one by one" is ``jax.jit(jra.make_train(cfg))(jax.random.key(seed))`` for
each of the 32 runs, as a loop in a notebook would do. Compiles are counted with
``jax.monitoring`` (every XLA compile in each phase). Both phases run in this process, so the
ratio holds on a noisy machine. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import jax

import jaxrl_async as jra

jra.use_compile_cache("off")  # compile times here are cold ones (docs/results.md)

jra.use_cpu_cores()  # before anything runs: one XLA:CPU device per core

import numpy as np  # noqa: E402

from jaxrl_async.run.sinks import final_return  # noqa: E402
from jaxrl_async.runners.common import compiler_options  # noqa: E402
from jaxrl_async.search.sweep import count_compiles  # noqa: E402

GRID = {"lr": [1e-4, 3e-4, 1e-3, 3e-3], "ent_coef": [0.0, 0.003, 0.01, 0.03]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=float, default=100_000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--fast-compile", action="store_true")
    parser.add_argument("--sweep-only", action="store_true",
                        help="skip the one-by-one phase (the sweep's own figures only)")
    args = parser.parse_args()
    cfg = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=128,
                        total_timesteps=int(args.total_timesteps),
                        fast_compile=args.fast_compile)
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()  # start the backend before timing

    start = time.perf_counter()
    with count_compiles() as sweep_compiles:
        result = jra.sweep(cfg, grid=GRID, seeds=args.seeds, progress=False)
    sweep_wall = time.perf_counter() - start

    if args.sweep_only:
        print(json.dumps({
            "configs": len(result.configs), "seeds": len(result.seeds),
            "runs": result.timing["runs"], "devices": result.timing["devices"],
            "total_timesteps_per_run": cfg.num_updates * cfg.steps_per_update,
            "sweep": {"compiles": len(sweep_compiles), "wall_s": round(sweep_wall, 2),
                      "compile_s": round(result.timing["compile_s"], 2),
                      "train_s": round(result.timing["train_s"], 2),
                      "sps": round(result.timing["sps"])},
            "best": {k: v for k, v in result.best().items()
                     if k in GRID or k == "final_return"}}))
        return
    finals, compile_s, train_s = [], 0.0, 0.0
    start = time.perf_counter()
    with count_compiles() as alone_compiles:
        for run_cfg in result.configs:
            for seed in result.seeds:
                t0 = time.perf_counter()
                train = jax.jit(jra.make_train(run_cfg)).lower(jax.random.key(seed)).compile(
                    compiler_options(run_cfg))
                t1 = time.perf_counter()
                out = jax.block_until_ready(train(jax.random.key(seed)))
                compile_s, train_s = compile_s + t1 - t0, train_s + time.perf_counter() - t1
                finals.append(final_return({k: np.asarray(v) for k, v in out.metrics.items()}))
    alone_wall = time.perf_counter() - start

    swept_finals = result.final_return.ravel()
    diff = np.abs(np.asarray(finals) - swept_finals)
    figures = {
        "configs": len(result.configs), "seeds": len(result.seeds),
        "runs": result.timing["runs"], "devices": result.timing["devices"],
        "total_timesteps_per_run": cfg.num_updates * cfg.steps_per_update,
        "fast_compile": args.fast_compile,
        "sweep": {"compiles": len(sweep_compiles), "wall_s": round(sweep_wall, 2),
                  "compile_s": round(result.timing["compile_s"], 2),
                  "train_s": round(result.timing["train_s"], 2),
                  "sps": round(result.timing["sps"])},
        "one_by_one": {"compiles": len(alone_compiles), "wall_s": round(alone_wall, 2),
                       "compile_s": round(compile_s, 2), "train_s": round(train_s, 2),
                       "sps": round(result.timing["runs"] * cfg.num_updates
                                    * cfg.steps_per_update / train_s)},
        "ratio_wall": round(alone_wall / sweep_wall, 2),
        "ratio_train": round(train_s / result.timing["train_s"], 2),
        "final_return_same_in_both": int(np.sum(diff <= 1e-3 * np.maximum(1, np.abs(finals)))),
        "best": {k: v for k, v in result.best().items() if k in GRID or k == "final_return"},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
