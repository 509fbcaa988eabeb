"""Speed of the sync runner: SPS after compilation, compile time, learning, time to solve.

    python experiments/bench/bench_sync.py --preset cartpole-ref [--baseline] [--repeats 3]

The last line printed is one JSON object. With ``--baseline`` the same settings are also run
by ``baseline_ppo.py`` (PPO written the common single-file way) in the same process, so the
ratio holds on a noisy machine. Times are medians over ``--repeats`` runs with different seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.runners.common import compiler_options  # noqa: E402

PRESETS = {
    # PureJaxRL's reference CartPole-v1 settings.
    "cartpole-ref": dict(num_envs=4, num_steps=128, total_timesteps=500_000),
    "cartpole-large": dict(num_envs=256, num_steps=128, total_timesteps=10_000_000),
}
SOLVED = 475.0


def measure(train, returns_of, key_fn, repeats: int, num_updates: int, steps: int,
            options: dict) -> dict:
    """Compile once, run ``repeats`` times (different seeds); medians and learning figures."""
    start = time.perf_counter()
    compiled = jax.jit(train).lower(key_fn(0)).compile(options)
    compile_s = time.perf_counter() - start
    times, finals, solve_fractions = [], [], []
    for seed in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(key_fn(seed)))
        times.append(time.perf_counter() - start)
        returns = np.asarray(returns_of(out)).reshape(-1, num_updates).mean(0)  # mean over seeds
        finals.append(float(np.nanmean(returns[-10:])))
        solved = np.flatnonzero(returns >= SOLVED)
        solve_fractions.append((solved[0] + 1) / num_updates if solved.size else np.nan)
    train_s = float(np.median(times))
    solve = float(np.nanmedian(solve_fractions)) if np.isfinite(solve_fractions).any() else None
    return {
        "sps": steps / train_s,
        "compile_s": compile_s,
        "train_s": train_s,
        "final_return": float(np.median(finals)),
        "time_to_solve_s": None if solve is None else compile_s + solve * train_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cartpole-ref")
    parser.add_argument("--seeds", type=int, default=1, help="seeds vmapped in one program")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", action="store_true", help="also time baseline_ppo.py")
    parser.add_argument("--fast-compile", action="store_true",
                        help="compile with PPOConfig(fast_compile=True)'s XLA options (both)")
    parser.add_argument("--num-envs", type=int, help="override the preset's num_envs")
    parser.add_argument("--num-steps", type=int, help="override the preset's num_steps")
    parser.add_argument("--total-timesteps", type=float, help="override the preset's budget")
    args = parser.parse_args()

    preset = dict(PRESETS[args.preset])
    for key in ("num_envs", "num_steps", "total_timesteps"):
        if getattr(args, key) is not None:
            preset[key] = int(getattr(args, key))
    cfg = jra.PPOConfig(env="CartPole-v1", fast_compile=args.fast_compile, **preset)
    options = compiler_options(cfg)
    steps = cfg.num_updates * cfg.steps_per_update * args.seeds
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()  # start the backend before timing

    def vmapped(train):
        return train if args.seeds == 1 else jax.vmap(train)

    def keys(seed):
        key = jax.random.key(seed)
        return key if args.seeds == 1 else jax.random.split(key, args.seeds)

    ours = measure(vmapped(jra.make_train(cfg)), lambda o: o.metrics["episode_return"], keys,
                   args.repeats, cfg.num_updates, steps, options)
    result = {"preset": args.preset, "num_envs": cfg.num_envs, "num_steps": cfg.num_steps,
              "total_timesteps": steps, "num_seeds": args.seeds,
              "fast_compile": args.fast_compile,
              "repeats": args.repeats, **ours, "jax": jax.__version__,
              "devices": str(jax.devices()[0].platform)}
    if args.baseline:
        import baseline_ppo

        base = measure(vmapped(baseline_ppo.make_train(**preset)),
                       lambda o: o[1], keys, args.repeats, cfg.num_updates, steps, options)
        result.update({f"baseline_{k}": v for k, v in base.items()})
        result["speedup_vs_baseline"] = base["train_s"] / ours["train_s"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
