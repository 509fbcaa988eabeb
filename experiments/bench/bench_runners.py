"""Which runner: the same PPO run on CartPole-v1 (the cartpole_ppo preset, PureJaxRL's
settings) under the sync runner, the deterministic async runner (lag 1, the default) and the
free-running one, one after another in one process on 2 XLA host devices. One JSON line: per
runner, env steps trained on per second, collected per second, the final return and the
compile time (docs/design.md, "Which runner").

    python experiments/bench/bench_runners.py [--total-timesteps 499712] [--seed 0]
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2").strip()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.run.sinks import final_return  # noqa: E402
from jaxrl_async.run.train import collected_steps  # noqa: E402

RUNNERS = {
    "sync": jra.SyncConfig(),
    "async_deterministic": jra.AsyncConfig(),
    "async_free_running": jra.AsyncConfig(deterministic=False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=499_712)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    jra.use_compile_cache("off")  # every runner's compile a cold one
    base = dataclasses.replace(jra.load_config("cartpole_ppo"),
                               total_timesteps=args.total_timesteps)
    rows, load = {}, os.getloadavg()[0]
    for name, runner in RUNNERS.items():
        cfg = dataclasses.replace(base, runner=runner)
        start = time.perf_counter()
        result = jra.train(cfg, seed=args.seed, progress=False)
        t = result.timing
        rows[name] = {"sps": round(t["sps"]), "sps_collected": round(t.get("sps_collected",
                                                                             t["sps"])),
                      "compile_s": round(t["compile_s"], 2), "wall_s": round(
                          time.perf_counter() - start, 1),
                      "final_return": round(final_return(result.metrics), 1),
                      **collected_steps(cfg, result)}
    print(json.dumps({"bench": "runners", "env": base.env, "total_timesteps": base.num_updates
                      * base.steps_per_update, "seed": args.seed, "runners": rows,
                      "jax": jax.__version__, "devices": len(jax.devices()),
                      "load_avg": [round(load, 2), round(os.getloadavg()[0], 2)]}))


if __name__ == "__main__":
    main()
