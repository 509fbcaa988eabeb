"""Which critic PPO's GAE should use under lag, on Pendulum-v1 (the continuous PPO test's
settings, value clipping off, where the return scale makes a critic mismatch costly).

    python experiments/bench/lag_critic.py [--critic learner behaviour mixed] [--seeds 0 1 2]

One JSON line per (runner, critic, seed): the final return (mean of the last 10 updates).
``--critic``, async lag 1 only:
- ``learner``: both values from the learner's params (what ``ppo.advantages_and_targets`` does);
- ``behaviour``: both from the params that acted (the learner keeps the params it held before
  its previous update: with lag 1 and sync_every 1 those are the acting ones);
- ``mixed``: V(s_t) stored by the actor, V(s_t+1) from the learner's params (the old code).
The sync runner (lag 0) is run once per seed for comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax
import numpy as np

import jaxrl_async as jra
from jaxrl_async.algos import ppo
from jaxrl_async.algos.base import Algorithm
from jaxrl_async.algos.returns import gae
from jaxrl_async.run.sinks import final_return
from jaxrl_async.runners import common

PENDULUM = jra.PPOConfig(env="Pendulum-v1", total_timesteps=100_352, num_envs=16, num_steps=64,
                         lr=1e-3, update_epochs=10, num_minibatches=8, ent_coef=0.0,
                         activation="relu", clip_value=False, gamma=0.95, normalize_obs=True)

_traced = {}  # trace-time hand-over from the wrapped learn to the patched estimate


def estimate(critic: str):
    """A replacement for ``ppo.advantages_and_targets`` taking its values from ``critic``."""

    def advantages_and_targets(network, params, traj, cfg):
        if critic == "learner":
            value_params = next_params = params
        elif critic == "behaviour":
            value_params = next_params = _traced["behaviour"]
        else:
            value_params, next_params = None, params
        stored = traj.extras["value"]
        value = (stored if value_params is None
                 else network.apply(value_params, traj.obs, method="value"))
        if critic == "behaviour":  # the emulated behaviour critic is the one that acted
            _traced["check"] = jax.numpy.abs(value - stored).max()
        next_value = network.apply(next_params, traj.next_obs, method="value")
        return gae(traj.reward, value, next_value, traj.terminated, traj.truncated, cfg.gamma,
                   cfg.gae_lambda)

    return advantages_and_targets


def keeping_behaviour_params(algo: Algorithm) -> Algorithm:
    """``algo`` whose state also holds the params before the previous update (lag 1)."""

    def init(key):
        state = algo.init(key)
        return state, state.params

    def learn(state, traj, key, axis_name=None):
        inner, behaviour = state
        _traced["behaviour"] = behaviour
        new, metrics = algo.learn(inner, traj, key, axis_name)
        return (new, inner.params), {**metrics, "behaviour_value_err": _traced["check"]}

    return algo._replace(init=init, learn=learn, policy_params=lambda state: state[0].params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--critic", nargs="+", default=["learner", "behaviour", "mixed"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--no-sync", action="store_true")
    args = parser.parse_args()
    if not args.no_sync:
        for seed in args.seeds:
            out = jra.train(PENDULUM, seed=seed, progress=False)
            print(json.dumps({"runner": "sync", "critic": "learner", "seed": seed,
                              "final_return": round(final_return(out.metrics), 1)}), flush=True)
    make_algorithm = common.make_algorithm
    for critic in args.critic:
        ppo.advantages_and_targets = estimate(critic)
        common.make_algorithm = ((lambda c, s: keeping_behaviour_params(make_algorithm(c, s)))
                                 if critic == "behaviour" else make_algorithm)
        cfg = dataclasses.replace(PENDULUM, runner=jra.AsyncConfig(lag=1))
        for seed in args.seeds:
            out = jra.train(cfg, seed=seed, progress=False)
            row = {"runner": "async lag 1", "critic": critic, "seed": seed,
                   "final_return": round(final_return(out.metrics), 1)}
            if critic == "behaviour":
                row["behaviour_value_err"] = float(np.max(out.metrics["behaviour_value_err"]))
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
