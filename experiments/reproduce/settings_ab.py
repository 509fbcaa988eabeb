"""A published-settings row run with some settings changed, one variant at a time (same seeds).

``PYTHONPATH=$PWD python experiments/reproduce/settings_ab.py ROW [--budget N] [--seeds N]
VARIANT ...`` where ROW names ``experiments/configs/published/ROW.json`` and each VARIANT is a
JSON object of config fields to change (``{}``: the file as it is), e.g.
``gymnax_blines_ppo_breakout --budget 2000000 '{}' '{"minibatch_layout": "sample"}'``. Prints
one JSON line per variant: the final evaluation per seed (the file's protocol), the training
return (episodes that ended in the last 1% of the updates), the evaluation curve, wall time.
Figures in docs/results.md ("Published results, side by side").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from jaxrl_async.sweep import use_cpu_cores

use_cpu_cores()  # before anything runs: one XLA device per core, the seeds spread over them

import numpy as np  # noqa: E402

from experiments.reproduce.__main__ import TRAIN_CURVES, load  # noqa: E402
from jaxrl_async.sinks import window_returns  # noqa: E402
from jaxrl_async.sweep import run_points  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("row")
    parser.add_argument("variants", nargs="+", help="JSON objects of fields to change")
    parser.add_argument("--budget", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args(argv)
    base = load(args.row)
    if args.budget:
        base = dataclasses.replace(base, total_timesteps=args.budget)
    for variant in args.variants:
        change = json.loads(variant)
        cfg = dataclasses.replace(base, **change)
        start = time.perf_counter()
        result = run_points(cfg, [{}], args.seeds, progress=False)
        curves = {k: v[0] for k, v in result.curves.items()}  # [seeds, updates]
        train = window_returns({k: curves[k] for k in TRAIN_CURVES if k in curves},
                               max(10, cfg.num_updates // 100))
        evals = np.asarray(curves["eval_return"])
        due = np.isfinite(evals).all(0)
        evals_at = np.asarray(curves["env_steps"])[0][due]
        print(json.dumps({
            "row": args.row, "change": change, "budget": cfg.num_updates * cfg.steps_per_update,
            "seeds": args.seeds, "eval_episodes": cfg.eval_episodes,
            "eval_greedy": cfg.eval_greedy,
            "final_eval": np.round(np.asarray(result.final_eval_return[0], float), 2).tolist(),
            "final_eval_mean": round(float(np.mean(result.final_eval_return[0])), 2),
            "train": np.round(train, 2).tolist(),
            "eval_curve": {int(s): np.round(evals[:, i].astype(float), 1).tolist()
                           for s, i in zip(evals_at, np.flatnonzero(due))},
            "wall_s": round(time.perf_counter() - start), "sps": round(result.timing["sps"]),
        }), flush=True)


if __name__ == "__main__":
    main()
