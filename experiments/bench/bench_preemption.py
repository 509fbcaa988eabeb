"""What stopping together and checkpointing cost a 2-process run (127.0.0.1, gloo, 2 CPU
devices each, the sync runner): the stop check every process makes at each chunk boundary
(``StopOnInterrupt.agreed``: a flag to the coordination service, a barrier, a read) against
the time of a chunk, and a run with a checkpoint after every chunk against the same run with
one at the end.

    python experiments/bench/bench_preemption.py [--checks 200] [--updates 40]

Prints one JSON line (process 0's figures). On a shared machine, compare the figures of one
run (ratios), not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child(process_id: int, port: int, checks: int, updates: int, out: str) -> None:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    os.environ["JAX_PLATFORMS"] = "cpu"
    sys.path.insert(0, str(ROOT))
    from jaxrl_async import distributed

    distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import jaxrl_async as jra
    from jaxrl_async.runners.stopping import StopOnInterrupt

    with StopOnInterrupt() as stop:
        stop.agreed(-1)  # the first meets the other process's start
        start = time.perf_counter()
        for i in range(checks):
            stop.agreed(i)
        check_s = (time.perf_counter() - start) / checks
    cfg = jra.PPOConfig(env="CartPole-v1", num_envs=8, num_steps=16, num_minibatches=2,
                        update_epochs=2, total_timesteps=8 * 16 * updates, log_every=2,
                        fast_compile=True, runner=jra.SyncConfig(num_devices=4))
    times = {}
    for name, every in (("warm", 0), ("end_only", 0), ("every_chunk", 2)):
        run = os.path.join(out, name)
        result = jra.train(dataclasses.replace(cfg, checkpoint_every=every),
                           run_dir=run, progress=False)
        times[name] = result.timing["train_s"]
    if process_id == 0:
        chunk_s = times["end_only"] / (updates / cfg.log_every)
        print(json.dumps({
            "stop_check_ms": round(check_s * 1e3, 3),
            "chunk_ms": round(chunk_s * 1e3, 2),
            "stop_check_per_chunk": round(check_s / chunk_s, 4),
            "train_s_checkpoint_at_end": round(times["end_only"], 3),
            "train_s_checkpoint_every_chunk": round(times["every_chunk"], 3),
            "checkpoints": updates // cfg.log_every,
            "checkpoint_ms_each": round((times["every_chunk"] - times["end_only"])
                                        / (updates // cfg.log_every) * 1e3, 1),
            "load_avg": os.getloadavg()[0],
        }), flush=True)
    distributed.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checks", type=int, default=200)
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--child", type=int, nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.checks, args.updates, args.out)
        return
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        procs = [subprocess.Popen([sys.executable, __file__, "--child", str(i), str(port),
                                   "--checks", str(args.checks), "--updates",
                                   str(args.updates), "--out", out], env=env)
                 for i in range(2)]
        codes = [p.wait() for p in procs]
    if codes != [0, 0]:
        raise SystemExit(f"the processes exited with {codes}")


if __name__ == "__main__":
    main()
