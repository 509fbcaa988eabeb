"""A sweep over two processes (``jax.distributed``, each pinned to its own core) against one
process training all the runs on one core: each process trains only its half.

    python experiments/bench/bench_sweep_hosts.py [--total-timesteps 20000] [--configs 16]

Grid: ``--configs`` learning rates × 2 seeds, PPO on CartPole-v1 (4 envs × 128 steps). "One
process": ``taskset -c 0``, one XLA:CPU device, ``jra.sweep`` of every run. "Two processes":
``taskset -c 0`` and ``taskset -c 1``, one device each, joined on 127.0.0.1 (gloo): the same
``jra.sweep`` over both processes' devices, half the runs on each. The phases run one after
the other; ``train_s`` is the sweep's training time (after its compile), measured inside
each process (the two-process figure: the slower process). The ideal ratio is 0.5. The last
line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child(args: argparse.Namespace) -> None:
    """One process of a phase: the sweep, its timing as one JSON line."""
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jaxrl_async as jra

    if args.process_id is not None:
        jra.distributed.initialize(f"127.0.0.1:{args.port}", num_processes=2,
                                   process_id=args.process_id)
    import numpy as np

    jra.use_compile_cache("off")
    cfg = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=128,
                        total_timesteps=int(args.total_timesteps), fast_compile=True)
    grid = {"lr": list(np.geomspace(1e-4, 3e-3, args.configs).round(6))}
    result = jra.sweep(cfg, grid, seeds=2, progress=False)
    t = result.timing
    print(json.dumps({k: t[k] for k in ("compile_s", "train_s", "runs", "devices", "processes",
                                        "local_runs")}
                     | {"final_return": float(np.nanmean(result.final_return))}))
    if args.process_id is not None:
        jra.distributed.shutdown()


def launch(args: argparse.Namespace, core: int, extra: list[str]) -> subprocess.Popen:
    command = ["taskset", "-c", str(core), sys.executable, __file__, "--child",
               "--total-timesteps", str(args.total_timesteps), "--configs", str(args.configs),
               *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def last_json(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=3600)
    if proc.returncode:
        raise SystemExit(f"a child failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=float, default=20_000)
    parser.add_argument("--configs", type=int, default=16)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    single = last_json(launch(args, 0, []))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [launch(args, i, ["--process-id", str(i), "--port", str(port)]) for i in range(2)]
    hosts = [last_json(p) for p in procs]
    two = max(h["train_s"] for h in hosts)
    print(json.dumps({
        "runs": single["runs"], "total_timesteps_per_run": int(args.total_timesteps),
        "one_process": {k: round(v, 2) if isinstance(v, float) else v
                        for k, v in single.items()},
        "two_processes": [{k: round(v, 2) if isinstance(v, float) else v for k, v in h.items()}
                          for h in hosts],
        "train_s_ratio": round(two / single["train_s"], 3), "ideal_ratio": 0.5,
        "same_final_return": hosts[0]["final_return"] == hosts[1]["final_return"]}))


if __name__ == "__main__":
    main()
