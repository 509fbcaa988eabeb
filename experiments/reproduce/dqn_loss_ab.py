"""CleanRL's dqn_jax.py settings on CartPole with each TD loss: 3 seeds vmapped, 5e5 steps.

``PYTHONPATH=$PWD python experiments/reproduce/dqn_loss_ab.py huber mse`` prints one JSON line
per loss: the training return over 500 updates (5000 env steps) and the mean Q of the taken
actions over the same updates, ending at 10%, 20%, 40%, 60% and 100% of the run, and the final
greedy evaluation. Figures in docs/results.md ("DQN at CleanRL's settings").
"""

from __future__ import annotations

import dataclasses
import json
import sys

from jaxrl_async.search.sweep import use_cpu_cores

use_cpu_cores()  # before anything runs: one XLA device per core

import numpy as np  # noqa: E402

from experiments.reproduce.__main__ import TRAIN_CURVES, load  # noqa: E402
from jaxrl_async.run.sinks import window_returns  # noqa: E402
from jaxrl_async.search.sweep import run_points  # noqa: E402


def main(losses: list[str]) -> None:
    base = load("cleanrl_dqn_cartpole")
    for loss in losses:
        cfg = dataclasses.replace(base, td_loss=loss)
        result = run_points(cfg, [{}], 3, progress=False)
        curves = {k: v[0] for k, v in result.curves.items()}  # [seeds, updates]
        steps = curves["env_steps"][0]
        out: dict = {"td_loss": loss}
        for frac in (0.1, 0.2, 0.4, 0.6, 1.0):
            end = int(frac * cfg.num_updates)
            upto = {k: curves[k][:, :end] for k in TRAIN_CURVES if k in curves}
            at = int(steps[end - 1])
            out[f"train@{at}"] = np.round(window_returns(upto, 500), 1).tolist()
            out[f"q_mean@{at}"] = np.round(curves["q_mean"][:, end - 500:end].mean(1), 1).tolist()
        out["final_eval"] = result.final_eval_return[0].tolist()
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["huber", "mse"])
