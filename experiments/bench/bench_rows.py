"""The learners' network on rows against on the time and env axes: PPO and IMPALA, A/B.

    python experiments/bench/bench_rows.py [--envs 32] [--steps 64] [--updates 30] [--repeats 5]

PPO takes each minibatch ``[T/M, B, ...]`` as rows ``[T/M * B, ...]`` (``algos.base.rows``),
IMPALA its trajectory's forward pass through ``on_rows``; the "axes" side
puts the old form back (the same module attributes replaced by the identity) and compiles the
same ``make_train`` program again in this process. Three ways a program runs: ``plain`` (one
run jitted, as ``jra.train`` and a sweep's device with one run, ``sweep.vmap_runs``),
``vmap1`` (one run under ``vmap``) and ``vmap8`` (8 seeds vmapped: a sweep). The sides run
interleaved ``--repeats`` times; ms per update are medians. ``max_return_diff``: the largest
difference of the per-update training returns between the sides (0: bit for bit; the same
arithmetic, but sums may round differently). One JSON line per (algorithm, mode).
"""

from __future__ import annotations

import argparse
import importlib
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrl_async as jra

CONFIGS = {"ppo": jra.PPOConfig, "impala": jra.ImpalaConfig}  # PQN: tried, not kept (results.md)
MODES = {"plain": 1, "vmap1": 1, "vmap8": 8}


def axes_form(algo: str) -> tuple[str, object]:
    """The module attribute that puts ``algo``'s network on rows, and its identity."""
    if algo == "impala":
        return "on_rows", lambda apply, x: apply(x)
    return "rows", lambda tree: tree


def program(cfg: object, mode: str) -> tuple[object, jax.Array]:
    """``make_train(cfg)``'s training returns, compiled as ``mode`` runs it, and its keys."""
    keys = jax.random.split(jax.random.key(0), MODES[mode])

    def one(key: jax.Array) -> jax.Array:
        return jra.make_train(cfg)(key).metrics["episode_return"]

    fn = jax.jit(lambda ks: one(ks[0])) if mode == "plain" else jax.jit(jax.vmap(one))
    return fn.lower(keys).compile(), keys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", choices=sorted(CONFIGS), default=sorted(CONFIGS))
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for algo in args.algos:
        module = importlib.import_module(f"jaxrl_async.algos.{algo}")
        name, identity = axes_form(algo)
        rows_form = getattr(module, name)
        cfg = CONFIGS[algo](env="CartPole-v1", num_envs=args.envs, num_steps=args.steps,
                            total_timesteps=args.updates * args.envs * args.steps)
        for mode in args.modes:
            compiled = {}
            for side, form in (("rows", rows_form), ("axes", identity)):
                setattr(module, name, form)
                try:
                    compiled[side] = program(cfg, mode)
                finally:
                    setattr(module, name, rows_form)
            returns = {side: np.asarray(c(keys)) for side, (c, keys) in compiled.items()}
            times: dict[str, list[float]] = {side: [] for side in compiled}
            for _ in range(args.repeats):
                for side, (c, keys) in compiled.items():
                    start = time.perf_counter()
                    jax.block_until_ready(c(keys))
                    times[side].append(time.perf_counter() - start)
            ms = {side: 1e3 * float(np.median(t)) / cfg.num_updates for side, t in times.items()}
            print(json.dumps({
                "algo": algo, "mode": mode, "runs": MODES[mode], "envs": args.envs,
                "steps": args.steps, "ms_per_update_rows": round(ms["rows"], 2),
                "ms_per_update_axes": round(ms["axes"], 2),
                "rows_speedup": round(ms["axes"] / ms["rows"], 3),
                "max_return_diff": float(jnp.nanmax(jnp.abs(returns["rows"] - returns["axes"]))),
                "jax": jax.__version__, "device": jax.devices()[0].device_kind}), flush=True)


if __name__ == "__main__":
    main()
