"""Cold and warm compile with the persistent compilation cache
(``jaxrl_async/run/compile_cache.py``).

    python experiments/bench/bench_compile_cache.py [--workloads train sweep reproduce]

Each workload runs twice, each time in a fresh process, with ``JAXRL_ASYNC_COMPILE_CACHE`` at
one new temporary folder: the first process compiles (cold), the second reads the programs
back (warm). The compile time is what the library reports (``timing["compile_s"]``: tracing,
lowering and XLA's compile, or the cache read). Workloads:

- ``train``: ``make train`` (the CLI, PPO on CartPole-v1, the defaults) at 100 updates
  (``--total-timesteps 51200``; the programs are those of the default budget, less a constant);
- ``sweep``: ``jra.sweep`` of ``bench_peers``'s 16 configs x 2 seeds, 195 updates, one device;
- ``reproduce``: ``make reproduce SUITE=classic`` row ``cleanrl_ppo_cartpole`` (3 seeds) at a
  budget of 51,200 steps instead of the published 500k (the same programs, less a constant).

One JSON line per workload: cold and warm compile seconds and each process's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SWEEP = """
import json, jaxrl_async as jra
cfg = jra.PPOConfig(env="CartPole-v1", num_envs=4, num_steps=128, total_timesteps=195 * 512,
                    anneal_lr=False)
grid = {"lr": [1e-4, 3e-4, 1e-3, 3e-3], "ent_coef": [0.0, 0.003, 0.01, 0.03]}
result = jra.sweep(cfg, grid=grid, seeds=2, num_devices=1, progress=False)
print(json.dumps({"compile_s": result.timing["compile_s"]}))
"""


def command(name: str, scratch: Path) -> list[str]:
    if name == "train":
        return [sys.executable, "-m", "jaxrl_async.cli", "train", "--algo", "ppo", "--env",
                "CartPole-v1", "--runner", "sync", "--total-timesteps", "51200",
                "--no-progress", "--eval-episodes", "0", "--run-dir", str(scratch / "run")]
    if name == "sweep":
        return [sys.executable, "-c", SWEEP]
    return [sys.executable, "-m", "experiments.reproduce", "--suite", "classic", "--only",
            "cleanrl_ppo_cartpole", "--budget", "51200", "--out", str(scratch / "reproduce")]


def compile_seconds(name: str, stdout: str, scratch: Path) -> float:
    if name == "train":
        return json.loads((scratch / "run" / "summary.json").read_text())["compile_s"]
    line = [x for x in stdout.splitlines() if x.startswith("{") and "compile_s" in x][-1]
    return json.loads(line)["compile_s"]


def measure(name: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="jra_compile_cache_") as tmp:
        cache, out = Path(tmp) / "cache", {"workload": name}
        env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
        env["JAXRL_ASYNC_COMPILE_CACHE"] = str(cache)
        for phase in ("cold", "warm"):
            scratch = Path(tmp) / phase
            scratch.mkdir()
            start = time.perf_counter()
            proc = subprocess.run(command(name, scratch), cwd=ROOT, env=env, text=True,
                                  capture_output=True)
            wall = time.perf_counter() - start
            if proc.returncode:
                raise SystemExit(f"{name} ({phase}) failed:\n{proc.stderr[-3000:]}")
            out[f"{phase}_compile_s"] = round(compile_seconds(name, proc.stdout, scratch), 2)
            out[f"{phase}_wall_s"] = round(wall, 1)
        out["cache_mb"] = round(sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
                                / 2**20, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=("train", "sweep", "reproduce"),
                        default=["train", "sweep", "reproduce"])
    args = parser.parse_args()
    for name in args.workloads:
        print(json.dumps({**measure(name), "load": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
