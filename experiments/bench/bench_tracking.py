"""Does experiment tracking slow training? PPO on CartPole-v1 (the README's settings, sync
runner) trained with and without ``WandbSink`` (offline: no network), alternating, same seeds:
SPS of each, the time the host loop spends in the sink's ``on_metrics`` (a queue put) and the
time its writer thread spends in ``wandb.log`` (while the device works: the sync runner
dispatches chunk k+1 before it hands over chunk k).

    WANDB_MODE=offline python experiments/bench/bench_tracking.py [--repeats 3] [--log-every 10]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

import jaxrl_async as jra  # noqa: E402

jra.use_compile_cache("off")  # compile times here are cold ones (docs/results.md)


class TimedWandbSink(jra.WandbSink):
    """``WandbSink`` that adds up the seconds its ``on_metrics`` takes in the host loop and
    the seconds its writer thread spends in ``wandb.log``."""

    host_s = writer_s = 0.0

    def on_metrics(self, first_update, rows):
        start = time.perf_counter()
        super().on_metrics(first_update, rows)
        self.host_s += time.perf_counter() - start

    def _write(self, first_update, rows):
        start = time.perf_counter()
        super()._write(first_update, rows)
        self.writer_s += time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args()
    cfg = jra.load_config("cartpole_ppo")  # jaxrl_async/presets/cartpole_ppo.yaml
    cfg = dataclasses.replace(cfg, log_every=args.log_every)
    jra.train(cfg, progress=False)  # compile once (the host programs are cached)
    sps = {"plain": [], "wandb": []}
    host_s, writer_s = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.repeats):
            sps["plain"].append(jra.train(cfg, seed=seed, progress=False).timing["sps"])
            sink = TimedWandbSink(project="bench", dir=tmp)
            sps["wandb"].append(jra.train(cfg, seed=seed, progress=False,
                                          callbacks=[sink]).timing["sps"])
            host_s.append(sink.host_s)
            writer_s.append(sink.writer_s)
    plain, tracked = statistics.median(sps["plain"]), statistics.median(sps["wandb"])
    print(json.dumps({"config": "jaxrl_async/presets/cartpole_ppo.yaml",
                      "log_every": args.log_every, "updates": cfg.num_updates,
                      "sps_plain": sps["plain"], "sps_wandb": sps["wandb"],
                      "median_ratio": tracked / plain, "sink_host_loop_s": host_s,
                      "sink_writer_thread_s": writer_s}))


if __name__ == "__main__":
    main()
