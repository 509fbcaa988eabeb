"""PPO on one env-suite task (default: XLand-MiniGrid's MiniGrid-Empty-6x6) on the CPU, against
a random policy: the untrained network (near-uniform logits), sampled, on the same fresh envs.

Prints one JSON line: the budget, wall time, and the mean return of 256 evaluation episodes
for the random policy and the trained one (sampled and greedy).

    PYTHONPATH=$PWD python experiments/bench/learn_suite.py [--env ID] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import time

import jax

import jaxrl_async as jra
from jaxrl_async.algos import make_algorithm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="xminigrid/MiniGrid-Empty-6x6")
    parser.add_argument("--steps", type=float, default=1e6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = jra.PPOConfig(env=args.env, torso="mlp", num_envs=32, num_steps=64,
                        total_timesteps=int(args.steps), lr=1e-3, ent_coef=0.01,
                        num_minibatches=4, update_epochs=4, log_every=20)
    untrained = make_algorithm(cfg, jra.env_spec(cfg.env, flatten_obs=True)).init(
        jax.random.key(args.seed)).params
    random = jra.evaluate(untrained, cfg, num_episodes=256, greedy=False, seed=1)
    start = time.time()
    result = jra.train(cfg, seed=args.seed, progress=False)
    seconds = time.time() - start
    sampled = jra.evaluate(result, cfg, num_episodes=256, greedy=False, seed=1)
    greedy = jra.evaluate(result, cfg, num_episodes=256, greedy=True, seed=1)
    print(json.dumps({
        "env": cfg.env, "total_timesteps": cfg.total_timesteps, "num_envs": cfg.num_envs,
        "num_steps": cfg.num_steps, "train_seconds": round(seconds, 1),
        "random_mean_return": round(float(random["mean_return"]), 3),
        "random_mean_length": round(float(random["mean_length"]), 1),
        "trained_mean_return_sampled": round(float(sampled["mean_return"]), 3),
        "trained_mean_return_greedy": round(float(greedy["mean_return"]), 3),
        "trained_mean_length_greedy": round(float(greedy["mean_length"]), 1),
    }))


if __name__ == "__main__":
    main()
