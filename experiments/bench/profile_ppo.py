"""Where PPO's compiled program spends its time on XLA:CPU, per part of the network.

    python experiments/bench/profile_ppo.py [--torso cnn --num-envs 64 --num-steps 64 --updates 2]
    python experiments/bench/profile_ppo.py --env CartPole-v1 --torso mlp --activation tanh \
        --num-envs 4 --num-steps 128 --updates 16           # cartpole-ref

Compiles the sync runner's training program (Breakout-MinAtar by default), runs it once warm,
then once under ``jax.profiler`` (a trace with one event per XLA:CPU thunk: a fusion, a library
matmul, a copy). Each thunk is attributed through the optimised HLO's ``op_name`` metadata (an
``--xla_dump_to`` dump into a temporary folder) to a phase (the rollout's network, the value
pass over the whole rollout, the update's forward, its backward, the rest: env steps, GAE, the
optimizer, keys) and a part (conv, dense, heads). Thunks may run concurrently, so the shares
are of summed thunk time, not of wall time. The profiler keeps about 290k events: keep
``--updates`` small enough that the whole run fits (``per_update.thunks`` stays the same when
``--updates`` doubles), or the trace holds only the first updates. Prints one JSON line: the
shares, the milliseconds, the ten costliest thunks, thunks and milliseconds per update, and the
time of the same updates through ``jra.train``'s host loop against the fused program.
"""

from __future__ import annotations

import argparse
import collections
import glob
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

jra.use_compile_cache("off")  # compile times here are cold ones (docs/results.md)

sys.path.insert(0, os.path.dirname(__file__))
from xla_thunks import traced_thunks  # noqa: E402

RANDOM = re.compile(r"threefry|_uniform|_gumbel|random_bits|random_split|_split|categorical")
OPTIMIZER = re.compile(r"adam|scale_by|clip|optax|flatten|update_moment|apply_updates")
OP_NAME = re.compile(r"\s*(?:ROOT )?%([\w.\-]+) = .*?op_name=\"([^\"]*)\"")


def attribute(op: str) -> tuple[str, str]:
    """(phase, part) of an HLO instruction from its ``op_name``."""
    phase = ("update backward" if "transpose(jvp" in op else "update forward" if "jvp(" in op
             else "rollout network" if "vmap(ActorCritic)" in op
             else "value pass over the rollout" if "ActorCritic" in op
             else "rest: random draws" if RANDOM.search(op)
             else "rest: env step" if "jit(step)" in op
             else "rest: optimizer" if OPTIMIZER.search(op)
             else "rest: other (GAE, losses, minibatch gathers, episode sums)")
    part = ("conv" if "Conv_" in op else "dense" if "Dense_" in op
            else "heads" if "ActorCritic" in op else "")
    return phase, part


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--torso", default="cnn", choices=["cnn", "mlp"])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--activation", default="relu", choices=["relu", "tanh"])
    args = parser.parse_args()
    cfg = jra.PPOConfig(env=args.env, torso=args.torso, activation=args.activation,
                        hidden_sizes=(128,) if args.torso == "cnn" else (64, 64),
                        num_envs=args.num_envs, num_steps=args.num_steps, update_epochs=4,
                        num_minibatches=4,
                        total_timesteps=args.num_envs * args.num_steps * args.updates)
    run = jax.jit(jra.make_train(cfg)).lower(jax.random.key(0)).compile()
    jax.block_until_ready(run(jax.random.key(0)))
    untraced = min(timed(lambda: jax.block_until_ready(run(jax.random.key(0))))
                   for _ in range(3))
    # The same updates through the host loop (chunks of log_every, metrics fetched while the
    # next chunk runs): what it costs beyond the one fused program, all of it counted per chunk.
    host = min(jra.train(cfg, seed=0, progress=False).timing["train_s"] for _ in range(3))
    chunks = -(-cfg.num_updates // cfg.log_every)
    thunks, wall = traced_thunks(lambda: run(jax.random.key(1)))

    names = {}
    for path in glob.glob(f"{DUMP}/hlo/*.cpu_after_optimizations.txt"):
        with open(path) as f:
            names.update(m.groups() for m in map(OP_NAME.match, f) if m)
    by_part: collections.Counter = collections.Counter()
    by_thunk: collections.Counter = collections.Counter()
    count = 0
    for name, ms in thunks:
        if name not in names:
            continue
        count += 1
        by_part[" / ".join(filter(None, attribute(names[name])))] += ms
        by_thunk[f"{name}: {names[name][-90:]}"] += ms
    total = sum(by_part.values())
    print(json.dumps({
        "config": {"env": args.env, "torso": args.torso, "num_envs": args.num_envs,
                   "num_steps": args.num_steps, "updates": args.updates},
        "wall_s": wall, "thunk_ms": total, "untraced_wall_s": untraced,
        # per update: thunks run, their summed time, the traced wall time around them (the
        # profiler's cost per thunk inflates both) and the untraced wall time (best of 3)
        "per_update": {"thunks": count / args.updates, "thunk_ms": total / args.updates,
                       "wall_ms": 1e3 * wall / args.updates,
                       "untraced_wall_ms": 1e3 * untraced / args.updates},
        "host_loop": {"train_s": host, "chunks": chunks, "log_every": cfg.log_every,
                      "overhead_ms_per_chunk": 1e3 * (host - untraced) / chunks},
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
