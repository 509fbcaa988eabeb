"""Where PPO's compiled program spends its time on XLA:CPU, per part of the network.

    python experiments/profile_ppo.py [--torso cnn --num-envs 64 --num-steps 64 --updates 2]

Compiles the sync runner's training program (Breakout-MinAtar by default), runs it once warm,
then once under ``jax.profiler`` (a trace with one event per XLA:CPU thunk: a fusion, a library
matmul, a copy). Each thunk is attributed through the optimised HLO's ``op_name`` metadata (an
``--xla_dump_to`` dump into a temporary folder) to a phase (the rollout's network, the value
pass over the whole rollout, the update's forward, its backward, the rest: env steps, GAE, the
optimizer, keys) and a part (conv, dense, heads). Thunks may run concurrently, so the shares
are of summed thunk time, not of wall time. Prints one JSON line: the shares, the milliseconds,
the ten costliest thunks and the wall time of the profiled run.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import shutil
import sys
import tempfile
import time

DUMP = tempfile.mkdtemp(prefix="profile_ppo_")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={DUMP}/hlo"
                           " --xla_dump_hlo_as_text").strip()

import jax  # noqa: E402

import jaxrl_async as jra  # noqa: E402

OP_NAME = re.compile(r"\s*(?:ROOT )?%([\w.\-]+) = .*?op_name=\"([^\"]*)\"")


def attribute(op: str) -> tuple[str, str]:
    """(phase, part) of an HLO instruction from its ``op_name``."""
    phase = ("update backward" if "transpose(jvp" in op else "update forward" if "jvp(" in op
             else "rollout network" if "vmap(ActorCritic)" in op
             else "value pass over the rollout" if "ActorCritic" in op
             else "rest (env, GAE, optimizer, keys)")
    part = ("conv" if "Conv_" in op else "dense" if "Dense_" in op
            else "heads" if "ActorCritic" in op else "")
    return phase, part


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--torso", default="cnn", choices=["cnn", "mlp"])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--updates", type=int, default=2)
    args = parser.parse_args()
    cfg = jra.PPOConfig(env=args.env, torso=args.torso, activation="relu",
                        hidden_sizes=(128,) if args.torso == "cnn" else (64, 64),
                        num_envs=args.num_envs, num_steps=args.num_steps, update_epochs=4,
                        num_minibatches=4,
                        total_timesteps=args.num_envs * args.num_steps * args.updates)
    run = jax.jit(jra.make_train(cfg)).lower(jax.random.key(0)).compile()
    jax.block_until_ready(run(jax.random.key(0)))
    with jax.profiler.trace(f"{DUMP}/trace", create_perfetto_trace=True):
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.key(1)))
        wall = time.perf_counter() - start

    names = {}
    for path in glob.glob(f"{DUMP}/hlo/*.cpu_after_optimizations.txt"):
        with open(path) as f:
            names.update(m.groups() for m in map(OP_NAME.match, f) if m)
    trace_path = sorted(glob.glob(f"{DUMP}/trace/plugins/profile/*/perfetto_trace.json.gz"))[-1]
    with gzip.open(trace_path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    by_part: collections.Counter = collections.Counter()
    by_thunk: collections.Counter = collections.Counter()
    for event in events:
        name = event.get("name", "")
        if event.get("ph") != "X" or name not in names or name.startswith("while"):
            continue  # (a while thunk contains the thunks of its body)
        ms = event.get("dur", 0) / 1e3
        by_part[" / ".join(filter(None, attribute(names[name])))] += ms
        by_thunk[f"{name}: {names[name][-90:]}"] += ms
    total = sum(by_part.values())
    print(json.dumps({
        "config": {"env": args.env, "torso": args.torso, "num_envs": args.num_envs,
                   "num_steps": args.num_steps, "updates": args.updates},
        "wall_s": wall, "thunk_ms": total,
        "share": {k: round(v / total, 4) for k, v in sorted(by_part.items())},
        "ms": {k: round(v, 1) for k, v in sorted(by_part.items())},
        "top_thunks_ms": {k: round(v, 1) for k, v in by_thunk.most_common(10)},
        "load_avg": os.getloadavg()[0], "jax": jax.__version__, "python": sys.version.split()[0],
    }))


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(DUMP, ignore_errors=True)
