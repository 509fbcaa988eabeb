"""Every algorithm on its reference env: speed and wall time to its return threshold.

    python experiments/bench/bench_algos.py [--algos dqn pqn ...] [--seeds 1] [--fast-compile]

One JSON line per algorithm: SPS (env steps per second after compilation), compile time, train
time, the first update whose return (mean over a window of updates) reached the threshold, and
the wall time to get there (compile + that fraction of the train time). The configs are the
ones the learning tests use, so the numbers belong to a tested setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import numpy as np

import jaxrl_async as jra
from jaxrl_async.runners.common import compiler_options

# name -> (config, return threshold, window of updates the return is averaged over)
REFERENCE = {
    "ppo": (jra.PPOConfig(env="CartPole-v1", total_timesteps=500_000), 450.0, 10),
    "dqn": (jra.DQNConfig(env="CartPole-v1", total_timesteps=100_032), 450.0, 20),
    "pqn": (jra.PQNConfig(env="CartPole-v1", total_timesteps=249_856), 450.0, 10),
    "sac": (jra.SACConfig(env="Pendulum-v1", total_timesteps=8_000), -400.0, 10),
    "ppo_pendulum": (jra.PPOConfig(
        env="Pendulum-v1", total_timesteps=100_352, num_envs=16, num_steps=64, lr=1e-3,
        update_epochs=10, num_minibatches=8, ent_coef=0.0, activation="relu",
        clip_value=False, gamma=0.95, normalize_obs=True), -400.0, 10),
    "recurrent_ppo": (jra.RecurrentPPOConfig(
        env="MemoryChain-bsuite", total_timesteps=30_720, num_envs=32, num_steps=32,
        num_minibatches=4, bptt_length=8, memory_size=64, hidden_sizes=(64,)), 0.8, 5),
}


def first_reached(returns: np.ndarray, threshold: float, window: int) -> int | None:
    """The first update (1-based) whose trailing ``window``-update mean return >= threshold."""
    means = np.array([np.nanmean(returns[max(0, i + 1 - window): i + 1])
                      if np.isfinite(returns[max(0, i + 1 - window): i + 1]).any() else np.nan
                      for i in range(len(returns))])
    hits = np.flatnonzero(means >= threshold)
    return int(hits[0]) + 1 if hits.size else None


def bench(name: str, seeds: int, fast_compile: bool) -> dict:
    cfg, threshold, window = REFERENCE[name]
    cfg = dataclasses.replace(cfg, fast_compile=fast_compile)
    train = jra.make_train(cfg)
    train = jax.vmap(train) if seeds > 1 else train
    keys = jax.random.split(jax.random.key(0), seeds) if seeds > 1 else jax.random.key(0)
    start = time.perf_counter()
    compiled = jax.jit(train).lower(keys).compile(compiler_options(cfg))
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    train_s = time.perf_counter() - start
    returns = np.asarray(out.metrics["episode_return"]).reshape(seeds, -1)
    reached = [first_reached(r, threshold, window) for r in returns]
    steps = cfg.num_updates * cfg.steps_per_update
    times = [None if u is None else compile_s + u / cfg.num_updates * train_s for u in reached]
    return {
        "algo": name,
        "env": cfg.env,
        "seeds": seeds,
        "total_timesteps": steps,
        "sps": steps * seeds / train_s,
        "compile_s": round(compile_s, 2),
        "train_s": round(train_s, 2),
        "threshold": threshold,
        "steps_to_threshold": [None if u is None else u * cfg.steps_per_update for u in reached],
        "time_to_threshold_s": [None if t is None else round(t, 2) for t in times],
        "final_return": [round(float(np.nanmean(r[-window:])), 1) for r in returns],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", choices=sorted(REFERENCE), default=list(REFERENCE))
    parser.add_argument("--seeds", type=int, default=1, help="seeds vmapped in one program")
    parser.add_argument("--fast-compile", action="store_true")
    args = parser.parse_args()
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()  # start the backend before timing
    for name in args.algos:
        print(json.dumps(bench(name, args.seeds, args.fast_compile)), flush=True)


if __name__ == "__main__":
    main()
