"""Compile time of one sweep program on 1 and on 2 CPU devices, in one process.

    python experiments/bench/compile_sweep.py [--repeats 2] [--total-timesteps 99840]

The 16-config x 2-seed PPO CartPole grid of ``bench_sweep.py``. Both programs are lowered and
compiled (not run) alternately ``--repeats`` times, each time from scratch (JAX's caches
cleared); also the size of each optimised HLO (instructions, fusions) and, apart, how long the
lowering (tracing to StableHLO) takes. One JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax

import jaxrl_async as jra

jra.use_cpu_cores()

import numpy as np  # noqa: E402

from jaxrl_async.runners.common import compiler_options  # noqa: E402
from jaxrl_async.search.sweep import _program, _stack, grid_points  # noqa: E402

GRID = {"lr": [1e-4, 3e-4, 1e-3, 3e-3], "ent_coef": [0.0, 0.003, 0.01, 0.03]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--total-timesteps", type=int, default=99_840)
    args = parser.parse_args()
    if jax.local_device_count() < 2:
        raise SystemExit("needs 2 CPU devices (a 2-core machine, or XLA_FLAGS="
                         "--xla_force_host_platform_device_count=2)")
    cfg = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=128,
                        total_timesteps=args.total_timesteps, anneal_lr=False)
    configs = [dataclasses.replace(cfg, **p) for p in grid_points(GRID)]
    runs = [c for c in configs for _ in range(2)]
    stacked = _stack(runs)
    seeds = np.tile(np.arange(2, dtype=np.int32), len(configs))
    options = tuple(sorted(compiler_options(cfg).items()))
    figures: dict = {d: {"lower_s": [], "compile_s": []} for d in (1, 2)}
    for _ in range(args.repeats):
        for devices in (1, 2):
            jax.clear_caches()
            _program.cache_clear()
            program = _program(devices, cfg.num_updates, cfg.log_every, False, options)
            start = time.perf_counter()
            lowered = program.lower(stacked, seeds)
            mid = time.perf_counter()
            compiled = lowered.compile()
            end = time.perf_counter()
            figures[devices]["lower_s"].append(round(mid - start, 2))
            figures[devices]["compile_s"].append(round(end - mid, 2))
            text = compiled.as_text()
            figures[devices]["hlo_lines"] = text.count("\n")
            figures[devices]["fusions"] = text.count(" fusion(")
            figures[devices]["while_loops"] = text.count(" while(")
    print(json.dumps({"runs": len(runs), "updates": cfg.num_updates,
                      **{f"{d}_devices": f for d, f in figures.items()}}))


if __name__ == "__main__":
    main()
