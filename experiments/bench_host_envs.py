"""Speed of host actors (gymnasium CartPole, or EnvPool's Atari, stepped on host threads) on 2
devices (1 actor, 1 learner) with 1, 2 and 4 actor threads, against the blocking loop on one
thread.

    python experiments/bench_host_envs.py [--num-envs 16 --num-steps 64 --update-epochs 20
                                          --updates 40 --rounds 3]
    python experiments/bench_host_envs.py --env envpool:Pong-v5 --num-steps 16 \
        --update-epochs 1 --num-minibatches 1 --updates 4 --rounds 1   # Atari, Nature CNN

(``--env envpool:<Atari id>`` needs the ``envpool`` extra; the torso follows the env: the
Nature-DQN CNN for Atari's ``[4, 84, 84]`` frames, whose dense layer is ``--hidden``.)

(``--update-epochs 20``, the default, makes the update take about as long as the host
rollout; the saved runs are in ``results/bench_host_envs.jsonl``.)

Figures (the words defined in docs/results.md), per configuration, medians over ``--rounds``:

- ``R``, ``U``: seconds per iteration of the host rollout alone (one thread stepping all the
  envs, acting, packing, copying to the learner) and of the update alone;
- ``blocking``: the blocking loop on one thread (host rollout, update, wait, params copy);
- ``threads=k``: ``jra.train`` with ``AsyncConfig(actors_per_device=k, lag=1)`` (k host threads
  of ``num_envs / k`` envs each); its SPS and the learner's busy fraction (learner compute time /
  wall time, measured inside the run);
- ``speedup`` = SPS(pipeline) / SPS(blocking), inside each round; ``ideal = (R+U)/max(R,U)``;
- ``T_parallel``: host rollouts and updates in two threads exchanging nothing, so
  ``machine_limit = T(blocking) / T_parallel`` is the most any pipeline can gain here now (on
  2 cores the Python env loop and XLA's update compete for them).

The machine is shared and noisy: compare ratios from one run. One JSON line per configuration,
and as the last line one JSON object summarising them.

Envs whose step takes time (``jaxrl_async/envs/latency.py``; ``latency_main`` below):

    python experiments/bench_host_envs.py --latency-ms 1 5 20 [--mode sleep|spin]
                                          [--vectorization sync|async] [--threads 1 2 4 8]

measures the blocking loop against 1..8 actor threads per step latency instead of CartPole.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2").strip()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.envs import make_host_env  # noqa: E402
from jaxrl_async.runners import host_actors, placement  # noqa: E402

jra.use_compile_cache("off")  # compile times here are cold ones (docs/results.md)

THREADS = (1, 2, 4)


def config(args: argparse.Namespace, threads: int) -> jra.PPOConfig:
    return jra.PPOConfig(
        env=args.env, num_envs=args.num_envs, num_steps=args.num_steps,
        update_epochs=args.update_epochs, num_minibatches=args.num_minibatches,
        hidden_sizes=tuple(args.hidden), log_every=10,
        total_timesteps=args.num_envs * args.num_steps * args.updates,
        runner=jra.AsyncConfig(actors_per_device=threads, lag=1))


def cache_compiled() -> None:
    """Compile once per thread count: every round reuses the programs."""
    cache, compile_host_programs = {}, host_actors.compile_host_programs

    def cached(cfg, algo, spec, where):
        key = cfg.runner.num_streams
        if key not in cache:
            cache[key] = compile_host_programs(cfg, algo, spec, where)
        return cache[key]

    host_actors.compile_host_programs = cached


class Blocking:
    """The blocking loop on one thread, from the programs of the 1-thread pipeline."""

    def __init__(self, cfg: jra.PPOConfig, vectorization: str = "sync"):
        from jaxrl_async.algos import make_algorithm
        from jaxrl_async.envs import env_spec

        self.where = placement.layout(cfg, jax.local_devices())
        spec = env_spec(cfg.env, flatten_obs=cfg.flatten_obs)
        self.programs = host_actors.compile_host_programs(cfg, make_algorithm(cfg, spec), spec,
                                                          self.where)
        state = self.programs.learner.init(jax.random.key(0))
        self.seeds = np.asarray(state.env)
        self.state = jax.device_put(state._replace(env=()), self.where.replicated)
        self.actor_device = self.where.actor_devices[0]
        self.run_key = jax.device_put(state.key, self.actor_device)
        self.env = make_host_env(cfg.env, cfg.num_envs, vectorization=vectorization)
        self.actor = host_actors.HostActor(self.env, self.programs, self.where.streams[0],
                                           cfg.num_steps)
        self.actor.reset(self.seeds)
        self.params = self.to_actor(self.programs.learner.pack_params(self.state))
        self.batch = jax.block_until_ready(self.rollout(0))

    def to_actor(self, params: jax.Array) -> jax.Array:
        return jax.block_until_ready(jax.device_put(params, self.actor_device))

    def rollout(self, k: int) -> jax.Array:
        traj, sums = self.actor.rollout(self.params, self.run_key, k, k)
        pieces = [host_actors.pack_numpy(self.programs.piece, p)
                  for p in host_actors.split_for_learners(traj, sums, 1)]
        return placement.to_learner(pieces, self.where)

    def rollouts(self, n: int) -> None:
        for k in range(n):
            jax.block_until_ready(self.rollout(k))

    def updates(self, n: int) -> None:
        state = self.state
        for _ in range(n):
            state = jax.block_until_ready(self.programs.learner.learner(state, (self.batch,))[0])

    def parallel(self, n: int) -> None:
        """Rollouts and updates in two threads exchanging nothing: what the machine allows."""
        threads = [threading.Thread(target=f, args=(n,)) for f in (self.rollouts, self.updates)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def loop(self, n: int) -> None:
        state = self.state
        for k in range(n):
            batch = jax.block_until_ready(self.rollout(k))
            state, _, params = jax.block_until_ready(self.programs.learner.learner(state,
                                                                                   (batch,)))
            self.params = self.to_actor(params)


def per_iteration(fn, n: int) -> float:
    start = time.perf_counter()
    fn(n)
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="gymnasium:CartPole-v1",
                        help="a host env id (gymnasium:<id> or envpool:<id>)")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--update-epochs", type=int, default=20)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--updates", type=int, default=40, help="iterations per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    add_latency_args(parser)
    args = parser.parse_args()
    if args.latency_ms:
        return latency_main(args)
    cache_compiled()
    configs = {k: config(args, k) for k in THREADS}
    batch = args.num_envs * args.num_steps
    n = args.updates

    start = time.perf_counter()
    blocking = Blocking(configs[1])
    for k in THREADS[1:]:  # compile the other layouts up front
        jra.train(dataclasses.replace(configs[k], total_timesteps=batch), progress=False)
    compile_s = time.perf_counter() - start

    rounds: dict[str, list[float]] = {"R": [], "U": [], "blocking": [], "parallel": []}
    runs: dict[int, list[dict]] = {k: [] for k in THREADS}
    for _ in range(args.rounds):
        rounds["R"].append(per_iteration(blocking.rollouts, n))
        rounds["U"].append(per_iteration(blocking.updates, n))
        rounds["blocking"].append(per_iteration(blocking.loop, n))
        rounds["parallel"].append(per_iteration(blocking.parallel, n))
        for k in THREADS:
            runs[k].append(jra.train(configs[k], seed=0, progress=False).timing)
    blocking.env.close()

    R, U = float(np.median(rounds["R"])), float(np.median(rounds["U"]))
    blocking_sps = [batch / t for t in rounds["blocking"]]
    t_block, t_parallel = (float(np.median(rounds[k])) for k in ("blocking", "parallel"))
    lines = [{"config": "blocking", "sps": float(np.median(blocking_sps)), "R": R, "U": U,
              "T": t_block, "ideal": (R + U) / max(R, U), "T_parallel": t_parallel,
              "machine_limit": t_block / t_parallel}]
    for k in THREADS:
        sps = [t["sps"] for t in runs[k]]
        lines.append({
            "config": f"threads={k}", "sps": float(np.median(sps)),
            "speedup": float(np.median([a / b for a, b in zip(sps, blocking_sps)])),
            "learner_busy": float(np.median([t["learner_busy"] for t in runs[k]])),
            "actor_busy": float(np.median([t["actor_busy"] for t in runs[k]])),
            "spread_sps": [round(min(sps)), round(max(sps))],
        })
    for line in lines:
        print(json.dumps(line))
    print(json.dumps({
        "sps": {str(k): line["sps"] for k, line in zip(THREADS, lines[1:])},
        "blocking_sps": lines[0]["sps"],
        "speedup": {str(k): line["speedup"] for k, line in zip(THREADS, lines[1:])},
        "learner_busy": {str(k): line["learner_busy"] for k, line in zip(THREADS, lines[1:])},
        "R": R, "U": U, "ideal": lines[0]["ideal"], "T_parallel": t_parallel,
        "machine_limit": t_block / t_parallel, "compile_s": compile_s,
        "config": {"env": args.env, "torso": configs[1].resolved_torso, "num_envs": args.num_envs,
                   "num_steps": args.num_steps, "update_epochs": args.update_epochs,
                   "num_minibatches": args.num_minibatches, "hidden_sizes": args.hidden,
                   "lag": 1},
        "updates": n, "rounds": args.rounds, "load_avg": os.getloadavg()[0],
        "jax": jax.__version__, "gymnasium": __import__("gymnasium").__version__,
        **({"envpool": __import__("envpool").__version__} if args.env.startswith("envpool:")
           else {}),
    }))



# --------------------------------------------------------------------------- envs that wait
def add_latency_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "envs whose step takes a fixed time (jaxrl_async/envs/latency.py); given --latency-ms, "
        "the benchmark measures those instead of CartPole")
    group.add_argument("--latency-ms", type=float, nargs="+", default=[],
                       help="step latency of each env, ms (e.g. 1 5 20)")
    group.add_argument("--mode", choices=("sleep", "spin"), default="sleep",
                       help="sleep: the step waits, releasing the GIL (a simulator behind a "
                            "socket); spin: it computes in Python, holding the GIL (CPU-bound)")
    group.add_argument("--vectorization", choices=("sync", "async"), default="sync",
                       help="the pipeline's AsyncConfig.host_vectorization (async: one "
                            "subprocess per env); the blocking loop steps the envs in-thread")
    group.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8])
    group.add_argument("--budget-s", type=float, default=8.0,
                       help="about this many seconds of blocking loop per measurement (the "
                            "number of iterations is at least 4 and at most --updates)")


def latency_main(args: argparse.Namespace) -> None:
    """The blocking loop against the pipeline with k actor threads, per step latency: one JSON
    line per (latency, configuration), then one summary line.

    Each thread steps ``num_envs / k`` envs one after another, so k threads overlap k waits:
    with the 'sleep' mode the pipeline's env throughput is at most ``k / latency`` (and
    ``num_envs / latency`` with one env per thread); with 'spin' at most ``free cores /
    latency``, and only in subprocesses (``--vectorization async``). ``bound_sps`` is that
    limit, ``learner_busy_bound`` = U / (batch / bound_sps) the learner's busy fraction at it.
    """
    from jaxrl_async.envs.latency import waiting_cartpole_id

    cache_compiled()
    batch = args.num_envs * args.num_steps
    threads = [k for k in args.threads if args.num_envs % k == 0]
    lines, summary = [], {}
    start_load = os.getloadavg()[0]
    compile_s = 0.0
    for latency in args.latency_ms:
        env_id = waiting_cartpole_id(latency, args.mode)
        base = config(args, 1)
        configs = {k: dataclasses.replace(
            base, env=env_id, runner=dataclasses.replace(
                base.runner, actors_per_device=k, host_vectorization=args.vectorization))
            for k in threads}
        t_env = batch * latency / 1000  # the blocking loop's waits per iteration
        n = int(min(args.updates, max(4, np.ceil(args.budget_s / max(t_env, 1e-9)))))
        start = time.perf_counter()
        blocking = Blocking(configs[threads[0]])
        for k in threads:  # compile every layout (and start every env) once before timing
            jra.train(dataclasses.replace(configs[k], total_timesteps=batch), progress=False)
        compile_s += time.perf_counter() - start
        rounds: dict[str, list[float]] = {"R": [], "U": [], "blocking": []}
        runs: dict[int, list[dict]] = {k: [] for k in threads}
        for _ in range(args.rounds):
            rounds["R"].append(per_iteration(blocking.rollouts, max(2, n // 2)))
            rounds["U"].append(per_iteration(blocking.updates, n))
            rounds["blocking"].append(per_iteration(blocking.loop, n))
            for k in threads:
                cfg = dataclasses.replace(configs[k], total_timesteps=batch * n)
                runs[k].append(jra.train(cfg, seed=0, progress=False).timing)
        blocking.env.close()
        R, U, t_block = (float(np.median(rounds[k])) for k in ("R", "U", "blocking"))
        blocking_sps = [batch / t for t in rounds["blocking"]]
        cores = len(os.sched_getaffinity(0))
        row = {"latency_ms": latency, "mode": args.mode, "vectorization": args.vectorization,
               "iterations": n}
        lines.append({**row, "config": "blocking", "sps": float(np.median(blocking_sps)),
                      "R": R, "U": U, "T": t_block, "ideal": (R + U) / max(R, U)})
        for k in threads:
            sps = [t["sps"] for t in runs[k]]
            parallel = min(k, args.num_envs) if args.mode == "sleep" else cores
            if args.mode == "spin" and args.vectorization == "sync":
                parallel = 1  # the GIL: one env computes at a time
            bound = parallel / (latency / 1000) if latency else float("inf")
            lines.append({
                **row, "config": f"threads={k}", "sps": float(np.median(sps)),
                "speedup": float(np.median([a / b for a, b in zip(sps, blocking_sps)])),
                "learner_busy": float(np.median([t["learner_busy"] for t in runs[k]])),
                "actor_busy": float(np.median([t["actor_busy"] for t in runs[k]])),
                "bound_sps": bound, "learner_busy_bound": min(1.0, U * bound / batch),
                "spread_sps": [round(min(sps)), round(max(sps))],
            })
        summary[f"{latency:g}ms"] = {
            "blocking_sps": lines[-len(threads) - 1]["sps"], "R": R, "U": U,
            **{f"threads={line['config'][8:]}": {
                key: round(line[key], 3) for key in ("sps", "speedup", "learner_busy",
                                                     "bound_sps", "learner_busy_bound")}
               for line in lines[-len(threads):]}}
    for line in lines:
        print(json.dumps(line))
    print(json.dumps({
        "latency": summary, "mode": args.mode, "vectorization": args.vectorization,
        "compile_s": compile_s,
        "config": {"env": "jaxrl/CartPole-<mode><latency>ms-v1", "num_envs": args.num_envs,
                   "num_steps": args.num_steps, "update_epochs": args.update_epochs,
                   "num_minibatches": args.num_minibatches, "hidden_sizes": args.hidden,
                   "lag": 1},
        "rounds": args.rounds, "cores": len(os.sched_getaffinity(0)),
        "load_avg": [start_load, os.getloadavg()[0]], "jax": jax.__version__,
        "gymnasium": __import__("gymnasium").__version__,
    }))


if __name__ == "__main__":
    main()
