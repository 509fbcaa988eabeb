"""How a population scales (``bench_pbt.py --scaling`` and ``--populations``).

``--scaling``: one PBT population on 1 and 2 forced CPU devices of one process, on 2
processes of 1 device each (gloo on 127.0.0.1), and pinned (``taskset -c i``): 1 process on
core 0 against 2 processes on cores 0 and 1. Every layout runs in fresh subprocesses; one JSON
line each (the last of ``--repeats`` populations in each process, the compiled programs
reused): members x updates per second of training (``members_per_s``), env steps per second
(``sps``), ``train_s`` and ``compile_s``; the pinned pair last, with ``train_s`` of 1 process
over that of 2 (the ceiling: 2.0, two cores).

``--populations 64,256,1024``: one device, PBT populations of growing size: members per second
and the device's peak memory (``memory_stats()['peak_bytes_in_use']`` where the device reports
it, else null; the peak since the process started, so sizes run smallest first); one JSON line
with every size (the accelerator check's step).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPACE = {"lr": ("log", 1e-4, 1e-2), "gamma": ("uniform", 0.9, 0.999)}


def base_config(total_timesteps: int, num_envs: int, num_steps: int):
    import jaxrl_async as jra

    return jra.PPOConfig(env="CartPole-v1", num_envs=num_envs, num_steps=num_steps,
                         num_minibatches=2, update_epochs=2, hidden_sizes=(64, 64),
                         total_timesteps=total_timesteps, log_every=10, fast_compile=True)


def space():
    import jaxrl_async as jra

    kinds = {"log": jra.LogUniform, "uniform": jra.Uniform}
    return {k: kinds[kind](lo, hi) for k, (kind, lo, hi) in SPACE.items()}


def train(args, population: int, num_devices: int | None = None) -> dict:
    """One PBT population; its figures."""
    import jax

    import jaxrl_async as jra

    cfg = base_config(args.total_timesteps, args.num_envs, args.num_steps)
    start = time.perf_counter()
    result = jra.pbt(cfg, space(), population=population, ready_every=args.ready_every,
                     seeds=1, num_devices=num_devices, progress=False)
    wall = time.perf_counter() - start
    t = result.timing
    members = t["runs"]
    return {"members": members, "devices": t["devices"], "processes": t["processes"],
            "members_per_device": t["runs_per_device"], "updates": cfg.num_updates,
            "train_s": round(t["train_s"], 3), "gather_s": round(t["gather_s"], 3),
            "compile_s": round(t["compile_s"], 2),
            "wall_s": round(wall, 2),
            "members_per_s": round(members * cfg.num_updates / max(t["train_s"], 1e-9), 1),
            "sps": round(t["sps"]), "device": jax.devices()[0].platform,
            "exploits": t["exploits"]}


def child(args) -> None:
    """One process of a layout (this file run as a script, before anything imports jax):
    prints its figures as one JSON line."""
    if args.processes > 1:
        from jaxrl_async.run import distributed

        distributed.initialize(f"127.0.0.1:{args.port}", num_processes=args.processes,
                               process_id=args.process_id)
    first = train(args, args.population)
    for _ in range(args.repeats - 1):  # the first runs pay for the first collectives too
        last = train(args, args.population)
    last = last if args.repeats > 1 else first
    print(json.dumps({**last, "compile_s": first["compile_s"],
                      "first_train_s": first["train_s"]}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def layout(args, devices: int, processes: int, cores: list[str] | None = None) -> dict:
    """Run a layout in fresh processes (``devices`` per process; pinned to ``cores``); the
    figures of process 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    port = free_port()
    flags = {"--population": args.population, "--total-timesteps": args.total_timesteps,
             "--ready-every": args.ready_every, "--num-envs": args.num_envs,
             "--num-steps": args.num_steps, "--processes": processes, "--port": port,
             "--repeats": args.repeats}
    common = [sys.executable, str(Path(__file__)),
              *(x for item in flags.items() for x in map(str, item))]
    procs = []
    for i in range(processes):
        pin = ["taskset", "-c", cores[i]] if cores else []
        procs.append(subprocess.Popen([*pin, *common, "--process-id", str(i)], env=env,
                                      cwd=ROOT, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a layout failed ({devices} devices x {processes} processes): "
                         f"{outs}")
    figures = json.loads(outs[0].strip().splitlines()[-1])
    return {"devices_per_process": devices, **figures, **({"cores": cores} if cores else {})}


def scaling(args) -> None:
    rows = {}
    for name, devices, processes in (("1 device", 1, 1), ("2 devices", 2, 1),
                                     ("2 processes", 1, 2)):
        rows[name] = layout(args, devices, processes)
        print(json.dumps({"layout": name, **rows[name]}), flush=True)
    one = layout(args, 1, 1, ["0"])
    print(json.dumps({"layout": "1 process on core 0", **one}), flush=True)
    two = layout(args, 1, 2, ["0", "1"])
    print(json.dumps({"layout": "2 processes on cores 0, 1", **two,
                      "speedup_over_1_core": round(one["train_s"] / two["train_s"], 2),
                      "ceiling": 2.0}), flush=True)


def populations(args) -> None:
    import jax

    sizes = sorted(int(x) for x in args.populations.split(","))
    rows = []
    for size in sizes:
        row = train(args, size, num_devices=1)
        stats = jax.devices()[0].memory_stats() or {}
        row["peak_bytes"] = stats.get("peak_bytes_in_use")
        rows.append(row)
    print(json.dumps({"populations": sizes, "rows": rows, "device": str(jax.devices()[0]),
                      "members_per_s": {r["members"]: r["members_per_s"] for r in rows}}))


def add_arguments(parser) -> None:
    group = parser.add_argument_group("population scaling (pbt_scaling.py)")
    group.add_argument("--scaling", action="store_true",
                       help="1 and 2 CPU devices, 1 and 2 processes, pinned to cores")
    group.add_argument("--populations", default=None, metavar="N,N,...",
                       help="one device, PBT populations of these sizes: members/s, memory")
    group.add_argument("--num-envs", type=int, default=16)
    group.add_argument("--num-steps", type=int, default=32)
    group.add_argument("--timeout", type=float, default=600)
    group.add_argument("--repeats", type=int, default=2,
                       help="populations trained per layout, the last one reported (the "
                            "compiled programs reused)")


def run(args) -> bool:
    """The scaling modes, when asked for; False when none is."""
    if args.total_timesteps is None:
        args.total_timesteps = args.num_envs * args.num_steps * 40  # 40 updates
    if args.scaling:
        scaling(args)
    elif args.populations:
        populations(args)
    else:
        return False
    return True



if __name__ == "__main__":  # one process of a layout
    import argparse

    parser = argparse.ArgumentParser(description="one process of a population layout")
    for flag in ("--population", "--total-timesteps", "--ready-every", "--num-envs",
                 "--num-steps", "--processes", "--process-id", "--port", "--repeats"):
        parser.add_argument(flag, type=int, required=True)
    child(parser.parse_args())
