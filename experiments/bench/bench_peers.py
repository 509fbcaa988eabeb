"""Ours against rejax's PPO and the PureJaxRL-style baseline, side by side in one process.

    python experiments/bench/bench_peers.py [--workloads single sweep] [--repeats 3] [--preset gpu]
    python experiments/bench/bench_peers.py --first-compile 4

``--first-compile N`` measures only the first compile of the ``single`` workload, fairly: in one
process the side compiled first pays jax's first-use costs (lowering rules, caches) for the
others, so each side is traced and compiled in a fresh process of its own, N rounds, the order
of the sides rotated each round; it prints the medians (trace, compile) per side.

Two workloads, PPO on CartPole-v1 at the ``cartpole-ref`` settings (4 envs x 128 steps, 4
epochs of 4 minibatches, tanh 64x64 actor and critic, gamma 0.99, GAE 0.95, clip 0.2):

- ``single``: one run of 976 updates (499,712 steps; lr 2.5e-4, ent_coef 0.01), jitted alone.
- ``sweep``: 16 configs (lr in {1e-4, 3e-4, 1e-3, 3e-3} x ent_coef in {0, 0.003, 0.01, 0.03},
  constant lr) x 2 seeds, 195 updates (99,840 steps) per run, all 32 runs ``vmap``-ed in ONE
  program on ONE CPU device. Ours is ``jra.sweep``; rejax is its PPO pytree with
  ``learning_rate`` and ``ent_coef`` replaced by the vmapped values; the baseline is
  ``baseline_ppo.make_train`` called inside the vmap with traced lr and ent_coef, its orthogonal
  init the library's LAPACK-free one (flax's is a batched LAPACK QR under ``vmap``, which hung
  this benchmark twice on XLA:CPU, docs/design.md; same distribution).

Each side is compiled once (timed), then the sides are run in turn ``--repeats`` times (ours,
rejax, baseline, ours, ...), so a busy neighbour slows all of them alike; train times are
medians. SPS counts every env step of every run. "final_return" is, per run, the mean training
return of the last 10 updates, averaged over the runs: the learning each side did (rejax and
the baseline: the latest finished episode of each env; ours: the episodes that ended in the
update).

What differs in rejax (its PPO as published, not changed here): no lr annealing (so ``single``
runs it at a constant 2.5e-4 while ours and the baseline anneal), gradients clipped per element
(``optax.clip``) rather than by global norm, separate actor and critic optimizers, flax's
default (lecun) init. Its evaluation is off: ``eval_callback`` returns the training returns
tracked by the shim below, every update, as ours and the baseline do.

gymnax 1.x's ``step`` returns six values; rejax 0.1.3 unpacks the legacy five. ``LegacyStep``
adapts it (and keeps each env's latest episode return in its state). One JSON line per
workload.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import baseline_ppo  # noqa: E402

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.networks import orthogonal  # noqa: E402

jra.use_compile_cache("off")  # compile times here are cold ones (docs/results.md)

GRID = {"lr": [1e-4, 3e-4, 1e-3, 3e-3], "ent_coef": [0.0, 0.003, 0.01, 0.03]}
NUM_ENVS, NUM_STEPS = 4, 128
UPDATES = {"single": 976, "sweep": 195}
# (workload, envs per run, updates, seeds per config); "gpu": the sizes of the first GPU
# measurements (docs/results.md, GPU): 1 run of 4 and of 2048 envs, sweeps of 16 configs x 32
# and x 128 seeds (512 and 2048 runs).
PRESETS = {
    "cpu": [("single", NUM_ENVS, 976, 1), ("sweep", NUM_ENVS, 195, 2)],
    "gpu": [("single", NUM_ENVS, 976, 1), ("single", 2048, 40, 1),
            ("sweep", NUM_ENVS, 195, 32), ("sweep", NUM_ENVS, 195, 128)],
}
LAST = 10  # updates averaged for the final return


class LoggedState(NamedTuple):
    env_state: Any
    episode_return: jax.Array  # running return of the current episode
    last_return: jax.Array  # return of the latest finished episode (0 before one ends)


class LegacyStep:
    """A gymnax env with the legacy five-value ``step`` (obs, state, reward, done, info) rejax
    0.1.3 unpacks; the state also keeps the latest finished episode's return (read by the
    benchmark's ``eval_callback``). Everything else is the wrapped env's. rejax deep-copies its
    config, env included: the shim is stateless, so the copy is itself."""

    def __init__(self, env: Any):
        self.env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def __deepcopy__(self, memo: dict) -> LegacyStep:
        return self

    def reset(self, key: jax.Array, params: Any = None):
        obs, state = self.env.reset(key, params)
        return obs, LoggedState(state, jnp.float32(0.0), jnp.float32(0.0))

    def step(self, key: jax.Array, state: LoggedState, action: Any, params: Any = None):
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, action, params)
        done = jnp.logical_or(terminated, truncated)
        ret = state.episode_return + reward
        state = LoggedState(env_state, jnp.where(done, 0.0, ret),
                            jnp.where(done, ret, state.last_return))
        return obs, state, reward, done, info


def rejax_algo(num_updates: int, num_envs: int = NUM_ENVS) -> Any:
    """rejax's PPO at these settings, its evaluation replaced by the training returns."""
    from rejax import PPO

    env, env_params = gymnax.make("CartPole-v1")
    algo = PPO.create(
        env=LegacyStep(env), env_params=env_params, num_envs=num_envs, num_steps=NUM_STEPS,
        num_epochs=4, num_minibatches=4, learning_rate=2.5e-4, max_grad_norm=0.5, gamma=0.99,
        gae_lambda=0.95, clip_eps=0.2, vf_coef=0.5, ent_coef=0.01,
        total_timesteps=num_updates * num_envs * NUM_STEPS, eval_freq=num_envs * NUM_STEPS,
        skip_initial_evaluation=True,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)})
    return algo.replace(eval_callback=lambda algo, ts, rng: ts.env_state.last_return.mean())


def rejax_train(num_updates: int, num_envs: int = NUM_ENVS) -> Any:
    """``(lr, ent_coef, key) -> training return per update`` of rejax's PPO."""
    algo = rejax_algo(num_updates, num_envs)

    def train(lr, ent_coef, key):
        return algo.replace(learning_rate=lr, ent_coef=ent_coef).train(key)[1]

    return train


def baseline_train(num_updates: int, anneal: bool, orthogonal: Any = None,
                   num_envs: int = NUM_ENVS) -> Any:
    """``(lr, ent_coef, key) -> training return per update`` of ``baseline_ppo.py``."""
    def train(lr, ent_coef, key):
        return baseline_ppo.make_train(
            num_envs=num_envs, num_steps=NUM_STEPS,
            total_timesteps=num_updates * num_envs * NUM_STEPS, lr=lr, ent=ent_coef,
            anneal_lr=anneal, orthogonal=orthogonal)(key)[1]

    return train


def ours_cfg(num_updates: int, anneal: bool, num_envs: int = NUM_ENVS) -> jra.PPOConfig:
    return jra.PPOConfig(env="CartPole-v1", num_envs=num_envs, num_steps=NUM_STEPS,
                         total_timesteps=num_updates * num_envs * NUM_STEPS, anneal_lr=anneal)


def final_return(curves: np.ndarray) -> np.ndarray:
    """[runs, updates] training returns -> [runs] mean of the last ``LAST`` updates."""
    return np.nanmean(np.asarray(curves, np.float64).reshape(-1, curves.shape[-1])[:, -LAST:], 1)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Side:
    """One implementation's compiled program for a workload, and its timings."""

    def __init__(self, name: str, fn: Any, args: tuple):
        self.name, self.args, self.times, self.curves = name, args, [], None
        start = time.perf_counter()
        self.compiled = jax.jit(fn).lower(*args).compile()
        self.compile_s = time.perf_counter() - start
        log(f"{name}: compiled in {self.compile_s:.1f} s")

    def run(self) -> None:
        start = time.perf_counter()
        out = jax.block_until_ready(self.compiled(*self.args))
        self.times.append(time.perf_counter() - start)
        self.curves = np.asarray(out)
        log(f"{self.name}: trained in {self.times[-1]:.1f} s")

    def figures(self, steps: int) -> dict:
        train_s = float(np.median(self.times))
        finals = final_return(self.curves)
        return {"sps": round(steps / train_s), "compile_s": round(self.compile_s, 2),
                "train_s": round(train_s, 3), "train_s_all": [round(t, 3) for t in self.times],
                "final_return": round(float(np.mean(finals)), 1),
                "runs_solved": int(np.sum(finals >= 475.0))}


class OurSweep:
    """``jra.sweep`` on one device: each repeat is a call (its compile is cached or timed
    apart: ``timing`` splits compile from training)."""

    def __init__(self, cfg: jra.PPOConfig, seeds: int):
        self.name, self.cfg, self.seeds, self.times = "ours", cfg, seeds, []
        self.compile_s = None
        self.run()
        self.times.clear()

    def run(self) -> None:
        result = jra.sweep(self.cfg, grid=GRID, seeds=self.seeds, num_devices=1, progress=False)
        if self.compile_s is None:
            self.compile_s = result.timing["compile_s"]
        self.times.append(result.timing["train_s"])
        log(f"ours: compiled in {result.timing['compile_s']:.1f} s, trained in "
            f"{self.times[-1]:.1f} s")
        self.curves = result.curves["episode_return"]
        self.best = result.best()

    figures = Side.figures


def single_side(name: str, num_envs: int = NUM_ENVS, num_updates: int = 976) -> tuple:
    """The ``single`` workload's function and arguments for one side."""
    key = jax.random.key(0)
    one = (jnp.float32(2.5e-4), jnp.float32(0.01), key)
    if name == "ours":
        train = jra.make_train(ours_cfg(num_updates, anneal=True, num_envs=num_envs))
        return (lambda k: train(k).metrics["episode_return"]), (key,)
    if name == "rejax":
        return rejax_train(num_updates, num_envs), one
    return baseline_train(num_updates, True, None, num_envs), one


def sweep_args(seeds: int) -> tuple[list[tuple[float, float]], tuple]:
    """The sweep's grid points (lr, ent_coef) and the arguments of rejax's and the baseline's
    vmapped ``train``: lr, ent_coef and key per run ``[points * seeds]``, seeds innermost."""
    points = [(lr, ent) for lr in GRID["lr"] for ent in GRID["ent_coef"]]
    lrs = jnp.asarray([p[0] for p in points for _ in range(seeds)], jnp.float32)
    ents = jnp.asarray([p[1] for p in points for _ in range(seeds)], jnp.float32)
    keys = jax.vmap(jax.random.key)(jnp.tile(jnp.arange(seeds), len(points)))
    return points, (lrs, ents, keys)


def workload(name: str, repeats: int, seeds: int, num_envs: int = NUM_ENVS,
             num_updates: int | None = None) -> dict:
    num_updates = num_updates or UPDATES[name]
    if name == "single":
        sides = [Side(side, *single_side(side, num_envs, num_updates))
                 for side in ("ours", "rejax", "baseline")]
        runs = 1
    else:
        points, (lrs, ents, keys) = sweep_args(seeds)
        sides = [OurSweep(ours_cfg(num_updates, anneal=False), seeds),
                 Side("rejax", jax.vmap(rejax_train(num_updates)), (lrs, ents, keys)),
                 Side("baseline", jax.vmap(baseline_train(num_updates, False, orthogonal)),
                      (lrs, ents, keys))]
        runs = len(points) * seeds
    for _ in range(repeats):  # interleaved
        for side in sides:
            side.run()
    steps = runs * num_updates * num_envs * NUM_STEPS
    figures = {side.name: side.figures(steps) for side in sides}
    ours = figures["ours"]["train_s"]
    result = {"workload": name, "runs": runs, "envs": num_envs, "updates": num_updates,
              "steps_per_run": steps // runs,
              "devices": 1, "repeats": repeats, **figures,
              "speedup_vs_rejax": round(figures["rejax"]["train_s"] / ours, 2),
              "speedup_vs_baseline": round(figures["baseline"]["train_s"] / ours, 2),
              "jax": jax.__version__, "device": jax.devices()[0].device_kind}
    if name == "sweep":
        result["ours_best"] = {k: sides[0].best[k] for k in (*GRID, "final_return")}
    return result


def compile_one(name: str) -> dict:
    """Trace and compile one side's ``single`` program (in this fresh process), timed apart."""
    fn, args = single_side(name)
    start = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    traced = time.perf_counter()
    lowered.compile()
    return {"side": name, "trace_s": traced - start, "compile_s": time.perf_counter() - traced}


def first_compile(rounds: int) -> dict:
    """Each side's first compile in a fresh process, ``rounds`` times, the order rotated."""
    import os
    import subprocess

    names = ["ours", "rejax", "baseline"]
    times: dict[str, list[dict]] = {n: [] for n in names}
    load = [os.getloadavg()[0]]
    for r in range(rounds):
        for name in names[r % 3:] + names[:r % 3]:
            out = subprocess.run([sys.executable, __file__, "--compile-side", name],
                                 capture_output=True, text=True, check=True)
            times[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            log(f"{name}: {times[name][-1]}")
    load.append(os.getloadavg()[0])
    med = {n: {k: round(float(np.median([t[k] for t in ts])), 2)
               for k in ("trace_s", "compile_s")} for n, ts in times.items()}
    for n in names:
        med[n]["total_s"] = round(med[n]["trace_s"] + med[n]["compile_s"], 2)
        med[n]["total_s_all"] = [round(t["trace_s"] + t["compile_s"], 2) for t in times[n]]
    return {"workload": "first_compile", "program": "single", "rounds": rounds, **med,
            "ours_vs_baseline": round(med["ours"]["total_s"] / med["baseline"]["total_s"], 2),
            "ours_vs_rejax": round(med["ours"]["total_s"] / med["rejax"]["total_s"], 2),
            "load_avg": load, "jax": jax.__version__, "device": jax.devices()[0].device_kind}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=sorted(UPDATES),
                        default=["single", "sweep"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds per config (sweep; default: the preset's, 2 on the CPU)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu",
                        help="workload sizes: 'cpu' (default) or 'gpu' (1 run of 4 x 128 "
                             "and of 2048 x 128 envs x steps, sweeps of 16 configs x 32 and "
                             "x 128 seeds: the first GPU measurements, docs/results.md)")
    parser.add_argument("--first-compile", type=int, default=0, metavar="ROUNDS",
                        help="only the single workload's first compile, each side in a fresh "
                             "process, ROUNDS rounds in rotated order")
    parser.add_argument("--compile-side", choices=["ours", "rejax", "baseline"],
                        help=argparse.SUPPRESS)  # one fresh process of --first-compile
    args = parser.parse_args()
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()  # start the backend before timing
    if args.compile_side:
        print(json.dumps(compile_one(args.compile_side)), flush=True)
        return
    if args.first_compile:
        print(json.dumps(first_compile(args.first_compile)), flush=True)
        return
    for name, envs, updates, seeds in PRESETS[args.preset]:
        if name in args.workloads:
            print(json.dumps(workload(name, args.repeats, args.seeds or seeds, envs, updates)),
                  flush=True)


if __name__ == "__main__":
    main()
