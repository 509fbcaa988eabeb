"""Where the time goes: ours vs rejax's PPO, rollout and update apart, one run and 32 vmapped.

    python experiments/bench/profile_peers.py [--runs 1 32] [--repeats 3]

For each implementation and each batch of ``runs`` (vmapped in one program, one CPU device) it
times ``--updates`` rollouts alone (the learner state fixed), ``--updates`` learner updates
alone (on one fixed trajectory) and ``--updates`` whole updates (rollout then learn, as a run
does them), each as one jitted ``lax.scan``, and counts the ops of the optimised HLO of the
whole updates (fusions, gathers, scatters, sorts, loops, copies). Same
settings as ``bench_peers.py`` (CartPole-v1, 4 envs x 128 steps, 4 epochs x 4 minibatches).
One JSON line per (implementation, runs); medians over ``--repeats``, interleaved.

``--thunks``: instead, each side's batched update (``--runs``) once under ``jax.profiler``,
its XLA:CPU thunk time summed by kind (the thunk's name without its number: ``dot``,
``transpose``, ``gather_fusion``, ...). One JSON line per side: ms per update by kind, the
thunks run per update.

``--programs``: instead, the two programs ``bench_peers.py`` times, ours against the baseline
(``--runs 1``: the single run, ``make_train``; more: the sweep, ``jra.sweep``'s program and the
baseline's ``make_train`` under ``vmap``, 16 configs x ``runs / 16`` seeds), each compiled at
``--updates`` and at 4 updates: per update (the difference over the updates between, so the
init counts for nothing) the XLA:CPU thunks (kernels) run and their traced time, and the wall
time (medians of ``--repeats``, interleaved). One JSON line per side: the kernel count is
device-neutral evidence beside the CPU's times. (XLA's static cost analysis counts a loop's
body once, whatever its trip count, so it gives no bytes or flops per update.)

``--ab``: instead, ours' batched update (``--runs`` runs) against three variants in one
process: V(obs) from the behaviour value, minibatches of single transitions (the flattened
``[T*B]`` shuffled) instead of time steps shared by all envs, and ``lax.map`` over the runs
instead of ``vmap``. One JSON line, ms per update.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, str(Path(__file__).parent))

from bench_peers import (  # noqa: E402
    GRID,
    NUM_ENVS,
    NUM_STEPS,
    baseline_train,
    ours_cfg,
    rejax_algo,
    single_side,
    sweep_args,
)
from xla_thunks import traced_thunks  # noqa: E402

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.networks import orthogonal  # noqa: E402
from jaxrl_async.runners import sync  # noqa: E402
from jaxrl_async.runners.common import collect, learn_update  # noqa: E402

sweep_module = importlib.import_module("jaxrl_async.search.sweep")

OPS = ("fusion", "gather", "scatter", "sort", "while", "copy", "transpose", "dot",
       "dynamic-slice", "dynamic-update-slice", "concatenate", "custom-call")


def hlo_ops(compiled) -> dict:
    """Counts of top-level instructions by opcode in the optimised HLO (all computations)."""
    text = compiled.as_text()
    counts = Counter()
    for line in text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?[\w.\-]+ = [^=]*? ([a-z\-]+)\(", line)
        if m:
            counts[m.group(1)] += 1
    return {op: counts.get(op, 0) for op in OPS}


def ours(runs: int, updates: int):
    cfg = jra.PPOConfig(env="CartPole-v1", num_envs=NUM_ENVS, num_steps=NUM_STEPS,
                        total_timesteps=195 * NUM_ENVS * NUM_STEPS, anneal_lr=False)
    prog = sync.program(cfg)
    env, algo = sync.build(cfg)
    env_id = jnp.arange(cfg.num_envs, dtype=jnp.int32)
    states = jax.vmap(prog.init)(jax.random.split(jax.random.key(0), runs))

    def rollouts(state):
        def body(s, _):
            carry, traj, sums = collect(env, algo, algo.policy_params(s.learner), s.env, s.key,
                                        s.update, cfg.num_steps, env_id, s.update)
            return s._replace(env=carry, update=s.update + 1), traj.reward.sum() + sums.count
        return lax.scan(body, state, None, updates)

    traj = jax.vmap(lambda s: collect(env, algo, algo.policy_params(s.learner), s.env, s.key,
                                      s.update, cfg.num_steps, env_id, s.update))(states)

    def learns(state, traj):
        def body(s, _):
            return learn_update(algo, s, traj[1], traj[2], cfg.steps_per_update)[0], None
        return lax.scan(body, state, None, updates)[0].learner

    def updates_whole(state):  # rollout and learn as the sync runner runs them
        return lax.scan(lambda s, _: (prog.update(s)[0], None), state, None, updates)[0]

    return (rollouts, (states,)), (learns, (states, traj)), (updates_whole, (states,))


def rejax(runs: int, updates: int):
    from rejax.algos.ppo import AdvantageMinibatch

    algo = rejax_algo(195)
    ts = jax.vmap(algo.init_state)(jax.random.split(jax.random.key(0), runs))

    def rollouts(ts):
        def body(ts, _):
            ts, traj = algo.collect_trajectories(ts)
            return ts, traj.reward.sum()
        return lax.scan(body, ts, None, updates)

    traj = jax.vmap(algo.collect_trajectories)(ts)

    def learn_once(ts, trajectories):  # train_iteration after the rollout
        last_val = algo.critic.apply(ts.critic_ts.params, ts.last_obs)
        last_val = jnp.where(ts.last_done, 0, last_val)
        advantages, targets = algo.calculate_gae(trajectories, last_val)

        def update_epoch(ts, _):
            rng, minibatch_rng = jax.random.split(ts.rng)
            ts = ts.replace(rng=rng)
            batch = AdvantageMinibatch(trajectories, advantages, targets)
            minibatches = algo.shuffle_and_split(batch, minibatch_rng)
            return lax.scan(lambda ts, mbs: (algo.update(ts, mbs), None), ts, minibatches)[0], \
                None
        return lax.scan(update_epoch, ts, None, algo.num_epochs)[0]

    def learns(ts, trajectories):
        return lax.scan(lambda t, _: (learn_once(t, trajectories), None), ts, None, updates)[0]

    def updates_whole(ts):
        return lax.scan(lambda t, _: (algo.train_iteration(t), None), ts, None, updates)[0]

    return (rollouts, (ts,)), (learns, (ts, traj[1])), (updates_whole, (ts,))


def ab(runs: int, updates: int, repeats: int) -> dict:
    """ms per batched update of ours and of the variants (module functions swapped in)."""
    import jaxrl_async.algos.base as base
    import jaxrl_async.algos.ppo as ppo
    from jaxrl_async.algos.returns import gae

    original = (ppo.advantages_and_targets, base.shuffled_minibatches)

    def stored_value(network, params, traj, cfg):
        next_value = network.apply(params, traj.next_obs, method="value")
        return gae(traj.reward, traj.extras["value"], next_value, traj.terminated,
                   traj.truncated, cfg.gamma, cfg.gae_lambda)

    def per_sample(key, data, num_minibatches):
        flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), data)
        return original[1](key, flat, num_minibatches)

    variants = {"ours": (original, jax.vmap), "stored_value": ((stored_value, original[1]),
                jax.vmap), "per_sample": ((original[0], per_sample), jax.vmap),
                "lax_map": (original, lambda f: lambda *a: lax.map(lambda x: f(*x), a))}
    compiled = {}
    for name, ((targets, shuffle), batch) in variants.items():
        ppo.advantages_and_targets, base.shuffled_minibatches = targets, shuffle
        (_, _), (learns, fn_args), _ = ours(runs, updates)
        compiled[name] = (jax.jit(batch(learns)).lower(*fn_args).compile(), fn_args)
    ppo.advantages_and_targets, base.shuffled_minibatches = original
    times = {name: [] for name in compiled}
    for _ in range(repeats):
        for name, (c, fn_args) in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(c(*fn_args))
            times[name].append(time.perf_counter() - start)
    return {"runs": runs, "ms_per_update": {
        name: round(1e3 * float(np.median(t)) / updates, 2) for name, t in times.items()}}


def thunk_kinds(fn, fn_args, updates: int) -> dict:
    """ms per update of ``jax.vmap(fn)`` by XLA:CPU thunk kind, from a profiler trace."""
    compiled = jax.jit(jax.vmap(fn)).lower(*fn_args).compile()
    jax.block_until_ready(compiled(*fn_args))
    kinds: Counter = Counter()
    count = 0
    for name, ms in traced_thunks(lambda: compiled(*fn_args))[0]:
        if re.fullmatch(r"[a-z][\w\-]*(\.\d+)?", name):  # an HLO instruction's thunk
            kinds[re.sub(r"\.\d+$", "", name)] += ms / updates
            count += 1
    return {"thunks_per_update": count / updates, "thunk_ms_per_update": sum(kinds.values()),
            "ms_per_update_by_kind": {k: round(v, 3) for k, v in kinds.most_common(15)}}


def peer_programs(runs: int, updates: int) -> dict[str, tuple[Any, tuple]]:
    """``{side: (jitted fn, args)}`` of ``bench_peers``' single run (``runs == 1``, its lr
    annealed) or sweep (16 configs x ``runs / 16`` seeds, constant lr), ``updates`` long."""
    if runs == 1:
        return {side: (jax.jit(fn), fn_args) for side, (fn, fn_args) in
                ((s, single_side(s, num_updates=updates)) for s in ("ours", "baseline"))}
    seeds = runs // len(GRID["lr"]) // len(GRID["ent_coef"])
    points, peer_args = sweep_args(seeds)
    cfg = ours_cfg(updates, anneal=False)
    cfgs = sweep_module._stack([dataclasses.replace(cfg, lr=lr, ent_coef=ent)
                                for lr, ent in points for _ in range(seeds)])
    seed_array = np.asarray([s for _ in points for s in range(seeds)], np.int32)
    ours_program = sweep_module._program(1, updates, cfg.log_every, False, ())
    return {"ours": (ours_program, (cfgs, seed_array)),
            "baseline": (jax.jit(jax.vmap(baseline_train(updates, False, orthogonal))),
                         peer_args)}


def per_update_costs(runs: int, updates: int, repeats: int) -> list[dict]:
    """Thunks, thunk time and wall time per update of each side's program:
    (the ``updates``-long program's less the 4-update one's) / (``updates`` - 4)."""
    figures: dict[str, dict[int, dict]] = {}
    compiled = {}
    for n in (4, updates):
        for side, (fn, fn_args) in peer_programs(runs, n).items():
            c = fn.lower(*fn_args).compile()
            compiled[side, n] = c, fn_args
            jax.block_until_ready(c(*fn_args))
            thunks = [ms for name, ms in traced_thunks(functools.partial(c, *fn_args))[0]
                      if re.fullmatch(r"[a-z][\w\-]*(\.\d+)?", name)]
            figures.setdefault(side, {})[n] = {"thunks": len(thunks), "thunk_ms": sum(thunks)}
    walls: dict[tuple, list] = {k: [] for k in compiled}
    for _ in range(repeats):
        for key, (c, fn_args) in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(c(*fn_args))
            walls[key].append(time.perf_counter() - start)
    out = []
    for side, by_n in figures.items():
        def per(k: str, by_n: dict = by_n) -> float:
            return (by_n[updates][k] - by_n[4][k]) / (updates - 4)

        wall = (np.median(walls[side, updates]) - np.median(walls[side, 4])) / (updates - 4)
        out.append({"side": side, "runs": runs, "updates": updates,
                    "thunks_per_update": round(per("thunks")),
                    "thunk_ms_per_update": round(per("thunk_ms"), 2),
                    "wall_ms_per_update": round(1e3 * float(wall), 2)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ab", action="store_true", help="ours' update against variants")
    parser.add_argument("--programs", action="store_true",
                        help="bench_peers' programs, ours against the baseline, per update")
    parser.add_argument("--thunks", action="store_true", help="thunk time by kind, per side")
    args = parser.parse_args()
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()
    if args.thunks:
        for runs in args.runs:
            for name, build in (("ours", ours), ("rejax", rejax)):
                learns, fn_args = build(runs, args.updates)[1]
                print(json.dumps({"impl": name, "runs": runs, "part": "learn",
                                  **thunk_kinds(learns, fn_args, args.updates)}), flush=True)
        return
    if args.programs:
        for runs in args.runs:
            for line in per_update_costs(runs, args.updates, args.repeats):
                print(json.dumps(line), flush=True)
        return
    if args.ab:
        for runs in args.runs:
            print(json.dumps(ab(runs, args.updates, args.repeats)), flush=True)
        return
    for runs in args.runs:
        compiled = {}
        for name, build in (("ours", ours), ("rejax", rejax)):
            parts = dict(zip(("rollout", "learn", "update"), build(runs, args.updates)))
            for part, (fn, fn_args) in parts.items():
                c = jax.jit(jax.vmap(fn)).lower(*fn_args).compile()
                compiled[name, part] = (c, fn_args)
        times = {k: [] for k in compiled}
        for _ in range(args.repeats):
            for key in times:
                c, fn_args = compiled[key]
                start = time.perf_counter()
                jax.block_until_ready(c(*fn_args))
                times[key].append(time.perf_counter() - start)
        for name in ("ours", "rejax"):
            ms = {part: 1e3 * float(np.median(times[name, part])) / args.updates
                  for part in ("rollout", "learn", "update")}
            print(json.dumps({"impl": name, "runs": runs, "ms_per_update": ms,
                              "ms_per_update_per_run": {k: v / runs for k, v in ms.items()},
                              "hlo_update": hlo_ops(compiled[name, "update"][0])}), flush=True)


if __name__ == "__main__":
    main()
