"""Where a host env step's time goes: ``WorkerVecEnv`` round trips without any policy or JAX.

    python experiments/bench/bench_host_roundtrip.py [--cases sleep:5:64] [--workers 0 2] \\
        [--threads 0] [--groups 2 4] [--main-ms 0.5] [--budget-s 3]
    python experiments/bench/bench_host_roundtrip.py --chain 5:16 5:32 20:128

For each case and setting, steps ``num_envs`` waiting envs (``envs/latency.py``) in ``groups``
groups the way the batcher does (recv a group, the main side's work, send it, the next group),
the main side's work a busy loop of ``--main-ms`` per group (what the policy call and the
trajectory cost there; 0: nothing). Prints one JSON line per setting:

- ``sps`` and ``of_limit``: env steps per second and its ratio to ``num_envs / latency``;
- ``period_ms``: one group's send-to-send period, ``overhead_ms`` = period - latency - main side;
- ``roundtrip_ms`` (median, p90): one group's send -> recv return, ``wait_ms``: the part of it the
  main thread spends blocked in ``recv``;
- ``worker_cpu_us_per_step`` and ``main_cpu_us_per_step``: CPU time per env step in the worker
  processes and in this one.

``--chain`` instead measures one worker's inside, in this process (no pipes, no shared memory):
``n`` threads each stepping one waiting env per round, dispatched through one ``SimpleQueue``
each as the worker does, and prints when (ms after the dispatch, medians) the first and the last
thread started and ended their step, the round's length, the CPU per env step, and CartPole's
own step (``step_same_step`` on gymnasium's CartPole-v1: the Python work, no wait).

The machine is shared: compare settings from one run (``load_avg`` at start and end).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_host_envs import worker_cpu  # noqa: E402

from jaxrl_async.envs import make_host_env  # noqa: E402
from jaxrl_async.envs.host import make_gymnasium_env, step_same_step  # noqa: E402
from jaxrl_async.envs.latency import waiting_cartpole_id  # noqa: E402


def spin(ms: float) -> None:
    deadline = time.perf_counter() + ms / 1000
    while time.perf_counter() < deadline:
        pass


def measure(case: str, workers: int, threads: int, groups: int, main_ms: float,
            budget_s: float) -> dict:
    kind, latency, envs = case.split(":")
    latency, num_envs = float(latency), int(envs)
    env = make_host_env(waiting_cartpole_id(latency, kind), num_envs, groups=groups,
                        workers=workers, threads=threads if kind == "sleep" else 1)
    load = os.getloadavg()[0]
    try:
        env.reset(list(range(num_envs)))
        size = env.group_size
        action = np.zeros(size, np.int64)
        for g in range(groups):
            env.send(g, action)
        sent = [time.perf_counter()] * groups
        trips, waits, steps = [], [], 0
        cpu, main_cpu = worker_cpu(env), time.process_time()
        start = time.perf_counter()
        warm = 20 * groups
        while True:
            for g in range(groups):
                before = time.perf_counter()
                env.recv(g)
                now = time.perf_counter()
                if steps >= warm * size:
                    trips.append(now - sent[g])
                    waits.append(now - before)
                spin(main_ms)
                sent[g] = time.perf_counter()
                env.send(g, action)
                steps += size
                if steps == warm * size:
                    cpu, main_cpu = worker_cpu(env), time.process_time()
                    start = time.perf_counter()
            if steps > warm * size and time.perf_counter() - start > budget_s:
                break
        elapsed = time.perf_counter() - start
        measured = steps - warm * size
        worker_us = (worker_cpu(env) - cpu) * 1e6 / measured
        main_us = (time.process_time() - main_cpu) * 1e6 / measured
        for g in range(groups):
            env.recv(g)
    finally:
        env.close()
    sps = measured / elapsed
    return {"case": case, "workers": len(env.owned) if hasattr(env, "owned") else None,
            "threads": threads, "groups": groups, "main_ms": main_ms, "sps": round(sps),
            "of_limit": round(sps / (num_envs / (latency / 1000)), 3),
            "period_ms": round(1000 * num_envs / sps, 3),
            "overhead_ms": round(1000 * num_envs / sps - latency - main_ms, 3),
            "roundtrip_ms": [round(1000 * float(np.median(trips)), 3),
                             round(1000 * float(np.percentile(trips, 90)), 3)],
            "wait_ms": round(1000 * float(np.median(waits)), 3),
            "worker_cpu_us_per_step": round(worker_us, 1),
            "main_cpu_us_per_step": round(main_us, 1),
            "load_avg": [round(load, 2), round(os.getloadavg()[0], 2)]}


def chain(latency: float, n: int, rounds: int = 200) -> dict:
    """One worker's threads, in this process: when they start and end a round's steps."""
    import threading
    from queue import SimpleQueue

    envs = [make_gymnasium_env(waiting_cartpole_id(latency).partition(":")[2]) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    queues, done, lock = [SimpleQueue() for _ in range(n)], SimpleQueue(), threading.Lock()
    pending, times = [0], []

    def thread(i: int) -> None:
        while True:
            if queues[i].get() is None:
                return
            start = time.perf_counter()
            step_same_step(envs[i], 0)
            end = time.perf_counter()
            with lock:
                times.append((start, end))
                pending[0] -= 1
                last = pending[0] == 0
            if last:
                done.put(time.perf_counter())

    for i in range(n):
        threading.Thread(target=thread, args=(i,), daemon=True).start()
    rows, cpu = [], time.process_time()
    for _ in range(rounds):
        times.clear()
        pending[0], sent = n, time.perf_counter()
        for q in queues:
            q.put(1)
        finished = done.get()
        starts, ends = sorted(t[0] for t in times), sorted(t[1] for t in times)
        rows.append([starts[0], starts[-1], ends[0], ends[-1], finished])
        rows[-1] = [1000 * (x - sent) for x in rows[-1]]
    cpu = (time.process_time() - cpu) * 1e6 / (rounds * n)
    for q in queues:
        q.put(None)
    plain = make_gymnasium_env("CartPole-v1")
    plain.reset(seed=0)
    python = time.process_time()
    for i in range(20000):
        step_same_step(plain, i % 2)
    python = (time.process_time() - python) * 1e6 / 20000
    med = np.median(np.array(rows), axis=0)
    return {"chain": f"sleep:{latency:g}:{n}", "first_start_ms": round(med[0], 3),
            "last_start_ms": round(med[1], 3), "first_end_ms": round(med[2], 3),
            "last_end_ms": round(med[3], 3), "round_ms": round(med[4], 3),
            "cpu_us_per_step": round(cpu, 1), "cartpole_step_cpu_us": round(python, 1),
            "load_avg": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["sleep:5:64"])
    parser.add_argument("--workers", nargs="+", type=int, default=[0])
    parser.add_argument("--threads", nargs="+", type=int, default=[0])
    parser.add_argument("--groups", nargs="+", type=int, default=[2])
    parser.add_argument("--main-ms", type=float, default=0.0)
    parser.add_argument("--budget-s", type=float, default=3.0)
    parser.add_argument("--chain", nargs="+", default=None, metavar="MS:N",
                        help="measure one worker's threads in this process instead (e.g. 5:16)")
    args = parser.parse_args()
    if args.chain:
        for item in args.chain:
            latency, n = item.split(":")
            print(json.dumps(chain(float(latency), int(n))), flush=True)
        return
    for case in args.cases:
        for workers in args.workers:
            for threads in args.threads:
                for groups in args.groups:
                    row = measure(case, workers, threads, groups, args.main_ms, args.budget_s)
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
