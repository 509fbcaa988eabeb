"""Soak run: the async runner free-running with 2 actor streams for many updates, watching for
leaks and for the pipeline's bounds (not part of ``make test``).

    python experiments/bench/bench_soak.py [--updates 20000 --log-every 100 --queue-size 4]

A tiny PPO on CartPole (4 envs x 8 steps per update, one epoch, one minibatch: the updates are
short, so the host pipeline, not the compute, is what runs most of the time) under
``AsyncConfig(deterministic=False, actors_per_device=2)`` on 2 CPU devices (1 actor device
running 2 streams, 1 learner device). At the end of every log chunk a sink records the host's
resident memory (``VmRSS``), the live device buffers (``jax.live_arrays()``: count and bytes)
and the chunk's queue depth, staleness and dropped batches. Printed, as one JSON line:

- ``rss_mb`` and ``live_buffers`` at the start (median of the chunks in the first 10% of the
  run, after warm-up allocations), at the end (median of the last 10%) and their maxima;
- ``rss_growth_mb`` (end - start) and ``rss_mb_per_1k_updates`` (least-squares slope over the
  second half of the run);
- ``queue_depth_max``, ``staleness_max`` (the largest param age a batch was trained with),
  ``dropped_batches``, and ``within_bounds``: RSS growth below ``--rss-bound-mb`` (default 32),
  live buffers at the end no more than at the start plus ``--buffer-slack`` (default 16, the
  in-flight batches and params of 2 streams), queue depth <= queue_size and staleness <=
  max_staleness.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.runners.state import Callbacks  # noqa: E402


def rss_mb() -> float:
    """This process's resident memory (Linux ``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Watch(Callbacks):
    """Per log chunk: update, RSS, live buffers, and the chunk's pipeline figures."""

    def __init__(self):
        self.rows: list[dict] = []

    def on_metrics(self, first_update: int, rows: dict) -> None:
        live = jax.live_arrays()
        self.rows.append({
            "update": first_update + len(rows["queue_depth"]), "rss_mb": rss_mb(),
            "live_buffers": len(live), "live_mb": sum(a.nbytes for a in live) / 2**20,
            "queue_depth": int(np.max(rows["queue_depth"])),
            "staleness": float(np.max(rows["staleness_max"])),
            "dropped": int(np.max(rows["dropped_batches"])),  # a running count
        })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=20000)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--queue-size", type=int, default=4)
    parser.add_argument("--max-staleness", type=int, default=2)
    parser.add_argument("--rss-bound-mb", type=float, default=32.0)
    parser.add_argument("--buffer-slack", type=int, default=16)
    args = parser.parse_args()

    runner = jra.AsyncConfig(actor_devices=1, actors_per_device=2, learner_devices=1,
                             deterministic=False, queue_size=args.queue_size,
                             max_staleness=args.max_staleness)
    cfg = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=8, num_minibatches=1,
                        update_epochs=1, total_timesteps=4 * 8 * args.updates,
                        log_every=args.log_every, runner=runner)
    watch = Watch()
    start = time.perf_counter()
    result = jra.train(cfg, seed=0, progress=False, callbacks=[watch])
    wall = time.perf_counter() - start
    rows = watch.rows
    tenth = max(1, len(rows) // 10)
    first, last = rows[:tenth], rows[-tenth:]

    def med(part, key):
        return float(np.median([r[key] for r in part]))

    half = rows[len(rows) // 2:]
    slope = (np.polyfit([r["update"] for r in half], [r["rss_mb"] for r in half], 1)[0] * 1000
             if len(half) > 1 else float("nan"))
    out = {
        "updates": int(result.state.update), "streams": runner.num_streams,
        "wall_s": round(wall, 1), "updates_per_s": round(int(result.state.update) / wall, 1),
        "rss_mb": {"start": round(med(first, "rss_mb"), 1), "end": round(med(last, "rss_mb"), 1),
                   "max": round(max(r["rss_mb"] for r in rows), 1)},
        "rss_growth_mb": round(med(last, "rss_mb") - med(first, "rss_mb"), 1),
        "rss_mb_per_1k_updates": round(float(slope), 3),
        "live_buffers": {"start": med(first, "live_buffers"), "end": med(last, "live_buffers"),
                         "max": max(r["live_buffers"] for r in rows)},
        "live_mb": {"start": round(med(first, "live_mb"), 3),
                    "end": round(med(last, "live_mb"), 3)},
        "queue_depth_max": max(r["queue_depth"] for r in rows),
        "staleness_max": max(r["staleness"] for r in rows),
        "dropped_batches": rows[-1]["dropped"],
        "queue_size": args.queue_size, "max_staleness": args.max_staleness,
    }
    out["within_bounds"] = bool(
        out["rss_growth_mb"] <= args.rss_bound_mb
        and out["live_buffers"]["end"] <= out["live_buffers"]["start"] + args.buffer_slack
        and out["queue_depth_max"] <= args.queue_size
        and out["staleness_max"] <= args.max_staleness)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
