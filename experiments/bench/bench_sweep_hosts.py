"""A sweep over two processes (``jax.distributed``, each pinned to its own core) against one
process training all the runs on one core: each process trains only its half.

    python experiments/bench/bench_sweep_hosts.py [--total-timesteps 19968] [--configs 16]
        [--repeats 2]

Grid: ``--configs`` learning rates × 2 seeds, PPO on CartPole-v1 (4 envs × 128 steps). "One
process": ``taskset -c C``, one XLA:CPU device, ``jra.sweep`` of every run, once on each core
C. "Two processes": ``taskset -c 0`` and ``taskset -c 1``, one device each, joined on
127.0.0.1 (gloo): the same ``jra.sweep`` over both processes' devices, half the runs on each.
The phases run one after the other, ``--repeats`` times (the best of each is kept: the
machine may be shared), compiled programs kept between them in a temporary cache. Each
process sweeps twice: the first compiles, the second (after a barrier, so both processes
train at the same time) is timed: ``train_s``, measured inside each process until its own
devices are done; ``ratio_core_C``: process C's ``train_s`` over one process's
on the same core, and ``train_s_ratio`` the slower process's over the slower single core;
``gather_s`` is the gathering of every process's runs into each (``process_allgather``). The
ideal ratio is 0.5. The last line printed is one JSON object.
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

    jra.use_compile_cache(args.cache)
    cfg = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=128,
                        total_timesteps=int(args.total_timesteps), fast_compile=True)
    grid = {"lr": list(np.geomspace(1e-4, 3e-3, args.configs).round(6))}
    first = jra.sweep(cfg, grid, seeds=2, progress=False)  # compiles (and trains once)
    if args.process_id is not None:  # both processes start the timed sweep together
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("timed sweep")
    result = jra.sweep(cfg, grid, seeds=2, progress=False)  # the same program: no compile
    t = {**result.timing, "compile_s": first.timing["compile_s"]}
    print(json.dumps({k: t[k] for k in ("compile_s", "train_s", "gather_s", "runs", "devices",
                                        "processes", "local_runs")}
                     | {"final_return": float(np.nanmean(result.final_return))}))
    if args.process_id is not None:
        jra.distributed.shutdown()


def launch(args: argparse.Namespace, core: int, extra: list[str]) -> subprocess.Popen:
    command = ["taskset", "-c", str(core), sys.executable, __file__, "--child",
               "--total-timesteps", str(args.total_timesteps), "--configs", str(args.configs),
               "--cache", args.cache, *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def last_json(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=3600)
    if proc.returncode:
        raise SystemExit(f"a child failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=float, default=19_968)  # 39 updates
    parser.add_argument("--configs", type=int, default=16)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    import tempfile

    rounded = {}
    with tempfile.TemporaryDirectory() as cache:
        args.cache = cache
        singles, hosts = {0: [], 1: []}, {0: [], 1: []}
        for _ in range(args.repeats):
            for core in (0, 1):
                singles[core].append(last_json(launch(args, core, [])))
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            procs = [launch(args, i, ["--process-id", str(i), "--port", str(port)])
                     for i in range(2)]
            for i, p in enumerate(procs):
                hosts[i].append(last_json(p))
    for name, runs in (("one_process_core", singles), ("two_processes_process", hosts)):
        for core, repeats in runs.items():
            best = min(repeats, key=lambda r: r["train_s"])
            rounded[f"{name}_{core}"] = {k: round(v, 2) if isinstance(v, float) else v
                                         for k, v in best.items()}
    single = {c: rounded[f"one_process_core_{c}"]["train_s"] for c in (0, 1)}
    two = {c: rounded[f"two_processes_process_{c}"]["train_s"] for c in (0, 1)}
    print(json.dumps({
        "runs": rounded["one_process_core_0"]["runs"],
        "total_timesteps_per_run": int(args.total_timesteps), "repeats": args.repeats,
        **rounded, **{f"ratio_core_{c}": round(two[c] / single[c], 3) for c in (0, 1)},
        "train_s_ratio": round(max(two.values()) / max(single.values()), 3),
        "ideal_ratio": 0.5,  # both processes hold the same result (the gathered runs):
        "same_result_in_both_processes":
            hosts[0][0]["final_return"] == hosts[1][0]["final_return"]}))


if __name__ == "__main__":
    main()
