"""A published-settings row run with some settings changed, one variant at a time (same seeds).

``PYTHONPATH=$PWD python experiments/reproduce/settings_ab.py ROW [--budget N] [--seeds N]
[--first-seed K] VARIANT ...`` where ROW names ``jaxrl_async/presets/published/ROW.json`` and
each VARIANT is a JSON object of config fields to change (``{}``: the file as it is;
``"runner"`` an object of the runner's fields), e.g.
``gymnax_blines_ppo_breakout --budget 2000000 '{}'
'{"minibatch_layout": "sample"}'`` or ``cleanrl_ppo_hopper_8envs '{}' '{"runner": {"lag": 0}}'``
(a host-env row: one run per seed, then the final greedy evaluation on fresh envs). Prints
one JSON line per variant: the final evaluation per seed (the file's protocol), the training
return (episodes that ended in the last 1% of the updates), the evaluation curve, wall time.
Figures in docs/results.md ("Published results, side by side").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from jaxrl_async.search.sweep import use_cpu_cores

use_cpu_cores()  # before anything runs: one XLA device per core, the seeds spread over them

import numpy as np  # noqa: E402

from experiments.reproduce.__main__ import TRAIN_CURVES, load, run_host_seeds  # noqa: E402
from jaxrl_async.envs import is_host_env  # noqa: E402
from jaxrl_async.run.sinks import window_returns  # noqa: E402
from jaxrl_async.search.sweep import run_points  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("row")
    parser.add_argument("variants", nargs="+", help="JSON objects of fields to change")
    parser.add_argument("--budget", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="host-env rows: seeds first-seed .. first-seed + seeds - 1")
    args = parser.parse_args(argv)
    base = load(args.row)
    if args.budget:
        base = dataclasses.replace(base, total_timesteps=args.budget)
    for variant in args.variants:
        change = json.loads(variant)
        fields = {**change, **({"runner": dataclasses.replace(base.runner, **change["runner"])}
                               if "runner" in change else {})}
        cfg = dataclasses.replace(base, **fields)
        start = time.perf_counter()
        if is_host_env(cfg.env):
            curves, final_evals, timing = run_host_seeds(cfg, args.seeds, args.first_seed)
        else:
            result = run_points(cfg, [{}], args.seeds, progress=False)
            curves = {k: v[0] for k, v in result.curves.items()}  # [seeds, updates]
            final_evals, timing = result.final_eval_return[0], result.timing
        train = window_returns({k: curves[k] for k in TRAIN_CURVES if k in curves},
                               max(10, cfg.num_updates // 100))
        evals = np.asarray(curves["eval_return"])
        due = np.isfinite(evals).all(0)
        evals_at = np.asarray(curves["env_steps"])[0][due]
        print(json.dumps({
            "row": args.row, "change": change, "budget": cfg.num_updates * cfg.steps_per_update,
            "seeds": args.seeds, "first_seed": args.first_seed,
            "eval_episodes": cfg.eval_episodes, "eval_greedy": cfg.eval_greedy,
            "final_eval": np.round(np.asarray(final_evals, float), 2).tolist(),
            "final_eval_mean": round(float(np.mean(final_evals)), 2),
            "train": np.round(train, 2).tolist(),
            "eval_curve": {int(s): np.round(evals[:, i].astype(float), 1).tolist()
                           for s, i in zip(evals_at, np.flatnonzero(due))},
            "wall_s": round(time.perf_counter() - start), "sps": round(timing["sps"]),
        }), flush=True)


if __name__ == "__main__":
    main()
