"""A/B: gymnax's auto-resets drawn once per rollout (``rollout.draw_resets``) or one small draw
per step inside the scan, in one process, interleaved.

    python experiments/bench_resets_ahead.py [--repeats 3]

PPO on CartPole-v1 at ``bench_peers``'s settings: the ``single`` run (4 envs x 128 steps, 976
updates, ``jax.jit(jra.make_train(cfg))``) and the ``sweep`` (16 configs x 2 seeds, 195 updates,
``jra.sweep`` on one device). "off" sets ``rollout.RESETS_AHEAD_BYTES = 0`` (every rollout
then draws its resets step by step, as before). Medians of train seconds; the count of
top-level HLO instructions (thunks of XLA:CPU) of each compiled program. One JSON line.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import re
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_peers import GRID, ours_cfg  # noqa: E402

import jaxrl_async as jra  # noqa: E402
from jaxrl_async import rollout  # noqa: E402

sweep = importlib.import_module("jaxrl_async.sweep")  # the module, not jra.sweep

jra.use_compile_cache("off")  # compile times here are cold ones (docs/results.md)


def instructions(text: str) -> int:
    return sum(1 for line in text.splitlines()
               if re.match(r"\s*(?:ROOT )?%?[\w.\-]+ = [^=]*? [a-z\-]+\(", line))


PROGRAMS = {mode: functools.cache(sweep._program.__wrapped__) for mode in ("off", "on")}


def use(mode: str) -> None:
    """Rollouts traced from here on draw resets ahead ("on") or not; the sweep programs of
    ``mode`` (each mode's own cache of compiled sweeps)."""
    rollout.RESETS_AHEAD_BYTES = 64 * 2**20 if mode == "on" else 0
    sweep._program = PROGRAMS[mode]


def build(mode: str) -> dict:
    use(mode)
    out = {}
    cfg = ours_cfg(976, anneal=True)
    key = jax.random.key(0)
    start = time.perf_counter()
    compiled = jax.jit(jra.make_train(cfg)).lower(key).compile()
    out["single"] = {"compiled": compiled, "compile_s": time.perf_counter() - start,
                     "hlo_instructions": instructions(compiled.as_text()), "times": []}
    sweep_cfg = ours_cfg(195, anneal=False)
    result = jra.sweep(sweep_cfg, grid=GRID, seeds=2, num_devices=1, progress=False)
    out["sweep"] = {"cfg": sweep_cfg, "compile_s": result.timing["compile_s"], "times": []}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    modes = {mode: build(mode) for mode in ("off", "on")}
    returns = {}
    for _ in range(args.repeats):
        for mode, parts in modes.items():
            use(mode)
            start = time.perf_counter()
            out = jax.block_until_ready(parts["single"]["compiled"](jax.random.key(0)))
            parts["single"]["times"].append(time.perf_counter() - start)
            returns[mode, "single"] = float(np.nanmean(out.metrics["episode_return"][-10:]))
            result = jra.sweep(parts["sweep"]["cfg"], grid=GRID, seeds=2, num_devices=1,
                               progress=False)
            parts["sweep"]["times"].append(result.timing["train_s"])
            returns[mode, "sweep"] = result.best()["final_return"]
    figures = {mode: {part: {"train_s": round(float(np.median(p["times"])), 3),
                             "train_s_all": [round(t, 3) for t in p["times"]],
                             "compile_s": round(p["compile_s"], 2),
                             **({"hlo_instructions": p["hlo_instructions"]}
                                if "hlo_instructions" in p else {})}
                      for part, p in parts.items()} for mode, parts in modes.items()}
    speedup = {part: round(figures["off"][part]["train_s"] / figures["on"][part]["train_s"], 3)
               for part in ("single", "sweep")}
    print(json.dumps({"figures": figures, "speedup_on_over_off": speedup,
                      "final_returns": {f"{m}/{p}": r for (m, p), r in returns.items()},
                      "load": os.getloadavg()[0], "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main()
