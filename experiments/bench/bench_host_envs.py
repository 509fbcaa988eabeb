"""Host envs at their own speed: per case, the envs' own limit against the actors' collection
rate alone, the learner's rate alone, a fair blocking loop and the pipeline (``jra.train`` with
``AsyncConfig(lag=1)``), on 2 XLA host devices (1 actor, 1 learner). One JSON line per case.

    python experiments/bench/bench_host_envs.py [--cases sleep:1:64 sleep:5:64 sleep:20:64 \\
        sleep:20:256 spin:2:64 envpool:Pong-v5:64] [--budget-s 5] [--max-updates 200] \\
        [--groups 0] [--workers 0] [--one-line]

A case is ``sleep:<ms>:<envs>`` (gymnasium CartPole whose step waits ``ms``, releasing the GIL,
``jaxrl_async/envs/latency.py``), ``spin:<ms>:<envs>`` (the step computes in Python for ``ms``,
CPU-bound: host worker threads 1) or ``envpool:<id>:<envs>`` (EnvPool, needs the extra). Gymnasium
cases train PPO (MLP, 1 epoch, 1 minibatch: the update is cheap, the envs are the slower side),
EnvPool Atari cases IMPALA with the Nature CNN (on a CPU the update is the slower side), EnvPool
MuJoCo cases CleanRL's continuous PPO (``ppo_continuous_action.py``: 2048-step batches of
``envs x 2048 / envs`` steps, 10 epochs of 32 minibatches, observations and rewards
normalised). Every case uses the default host path (workers by ``host_streams.stream_workers``'
rule: the cores, at least one per 16 env lanes; groups by ``host_batcher.groups``'; one policy
call per group per step) unless ``--groups``/``--workers`` set them.

Figures per case (SPS: env steps per second):

- ``env_limit_sps`` and ``limit``: the envs' own ceiling: ``num_envs / latency`` for waiting envs,
  ``cores / latency`` for CPU-bound ones, EnvPool's raw rate (one pool of ``num_envs``, its default
  threads, random actions, no policy, ``step`` in a loop) measured in the same run;
- ``collect_sps``: the actors alone (rollouts with fixed params: envs, policy, trajectory, packing,
  copy to the learner device), and ``collect_sps_no_policy`` the same with the policy call replaced
  by a constant (the host path's own ceiling); ``policy_ms``: wall time of one policy call (one
  group); CPU time per env step of the actor thread (``actor_cpu_us_per_step``, what holds its
  GIL), of this whole process (``process_cpu_us_per_step``: with XLA's threads) and of the worker
  processes (``worker_cpu_us_per_step``, the envs' own work included), and ``cpu_bound_sps`` =
  cores / (process + workers): the most the cores allow for this path, even on an idle machine;
- ``policy_alone_sps``: the policy calls alone (one group's observations, no envs stepping);
  ``shared_cores_sps`` = 1 / (1 / limit + 1 / policy_alone_sps) for envs that use the cores
  (EnvPool, spin; ``null`` for waiting envs): the most collection reaches where the envs and
  the policy take the same cores one after another (EnvPool's raw rate already uses every core,
  and on a CPU the Nature CNN's forward takes them too), and ``collect_of_shared_cores``
  collection against it;
- ``learner_sps``: updates alone on one fixed batch;
- ``blocking_sps``: rollout, update, params copy, one after another, the envs stepped the same
  parallel way (so ``speedup`` = pipeline / blocking measures the overlap alone);
- ``sps``, ``learner_busy``, ``actor_busy``: the pipeline; ``of_limit`` = sps / env limit,
  ``of_collect`` = sps / collect_sps, ``collect_of_limit`` = collect_sps / env limit.

The machine is shared and noisy: compare ratios from one run; ``load_avg`` is the 1-minute load
at the start and the end of the case. ``--one-line`` prints one JSON line with every case instead
(experiments/checks/accelerator_check.sh).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2").strip()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.algos import make_algorithm  # noqa: E402
from jaxrl_async.envs import env_spec  # noqa: E402
from jaxrl_async.envs.host_workers import default_workers  # noqa: E402
from jaxrl_async.runners import host_actors, host_streams, placement  # noqa: E402
from jaxrl_async.runners.host_trajectory import pack_numpy  # noqa: E402

jra.use_compile_cache("off")  # compile times here are cold ones (docs/results.md)

DEFAULT_CASES = ["sleep:1:64", "sleep:5:64", "sleep:20:64", "sleep:20:256", "spin:2:64",
                 "envpool:Pong-v5:64", "envpool:HalfCheetah-v4:1", "envpool:HalfCheetah-v4:8"]


def case_config(case: str, args: argparse.Namespace) -> tuple[Any, dict]:
    """The config of a case, and what describes it."""
    kind, value, envs = case.split(":")
    num_envs = int(envs)
    if kind == "envpool" and env_spec(f"envpool:{value}").discrete:
        cfg = jra.ImpalaConfig(env=f"envpool:{value}", num_envs=num_envs,
                               num_steps=args.atari_steps, log_every=10,
                               total_timesteps=num_envs * args.atari_steps,
                               runner=jra.AsyncConfig(lag=1, host_groups=args.groups))
        return cfg, {"case": case, "env": cfg.env, "algo": "impala", "torso": "nature"}
    if kind == "envpool":  # MuJoCo: CleanRL's continuous PPO, 2048-step batches
        steps = max(1, 2048 // num_envs)
        cfg = jra.PPOConfig(env=f"envpool:{value}", num_envs=num_envs, num_steps=steps,
                            num_minibatches=32 if steps % 32 == 0 else 1, update_epochs=10,
                            ent_coef=0.0, lr=3e-4, normalize_obs=True, normalize_reward=True,
                            minibatch_layout="sample", log_every=10,
                            total_timesteps=num_envs * steps,
                            runner=jra.AsyncConfig(lag=1, host_groups=args.groups))
        return cfg, {"case": case, "env": cfg.env, "algo": "ppo", "torso": "mlp",
                     "normalized": True}
    if kind not in ("sleep", "spin"):
        raise SystemExit(f"--cases: {case!r}: the kind must be sleep, spin or envpool")
    from jaxrl_async.envs.latency import waiting_cartpole_id

    latency = float(value)
    cfg = jra.PPOConfig(env=waiting_cartpole_id(latency, kind), num_envs=num_envs,
                        num_steps=args.num_steps, update_epochs=1, num_minibatches=1,
                        log_every=10, total_timesteps=num_envs * args.num_steps,
                        runner=jra.AsyncConfig(lag=1, host_threads=1 if kind == "spin" else 0,
                                               host_groups=args.groups,
                                               host_workers=args.workers))
    return cfg, {"case": case, "env": cfg.env, "algo": "ppo", "latency_ms": latency}


def cache_compiled() -> None:
    """Compile once per case: the rig and every ``jra.train`` of the case share the programs."""
    cache, compile_host_programs = {}, host_actors.compile_host_programs

    def cached(cfg, host, algo, where):
        key = (cfg.env, cfg.num_envs, cfg.num_steps, cfg.runner.num_streams)
        if key not in cache:
            cache[key] = compile_host_programs(cfg, host, algo, where)
        return cache[key]

    host_actors.compile_host_programs = cached


def timed(fn, budget_s: float, least: int = 2, most: int = 10**6) -> tuple[float, int]:
    """Seconds per call of ``fn(i)``, called until ``budget_s`` has passed (``least`` to
    ``most`` times)."""
    start, n = time.perf_counter(), 0
    while n < least or (n < most and time.perf_counter() - start < budget_s):
        fn(n)
        n += 1
    return (time.perf_counter() - start) / n, n


class Rig:
    """A case's programs, envs (the default host path) and one batch: the parts measured alone
    and the blocking loop."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.where = placement.layout(cfg, jax.local_devices())
        host = host_streams.host_plan(cfg)
        self.programs = host_actors.compile_host_programs(
            cfg, host, make_algorithm(cfg, host.policy_spec), self.where)
        state = self.programs.learner.init(jax.random.key(0))
        self.state = jax.device_put(state._replace(env=()), self.where.replicated)
        self.actor_device = self.where.actor_devices[0]
        self.run_key = jax.device_put(state.key, self.actor_device)
        self.env = host_streams.make_envs(cfg.runner, host, self.where)
        self.batcher = host_actors.make_batcher(cfg, host, self.env, self.programs,
                                                self.where.streams[0],
                                                host.fresh_normalizer(self.env.num_envs))
        self.batcher.reset(np.asarray(state.env))
        self.params = self.to_actor(self.programs.learner.pack_params(self.state))
        self.batch = jax.block_until_ready(self.rollout(0))

    def to_actor(self, params: jax.Array) -> jax.Array:
        return jax.block_until_ready(jax.device_put(params, self.actor_device))

    def rollout(self, k: int) -> jax.Array:
        traj, sums = self.batcher.rollout(self.params, self.run_key, k, k)
        pieces = [pack_numpy(self.programs.piece, p)
                  for p in placement.split_for_learners(traj, sums, 1)]
        batch = placement.to_learner(pieces, self.where)
        self.batcher.next_rollout()
        return batch

    def collect(self, budget_s: float) -> dict:
        """The actors alone: SPS, the policy call's wall time, the actor thread's CPU time."""
        policy, calls = self.batcher.policy, [0, 0.0]

        def timed_policy(*a):
            start = time.perf_counter()
            out = np.asarray(policy(*a))
            calls[0], calls[1] = calls[0] + 1, calls[1] + time.perf_counter() - start
            return out

        self.batcher.policy = timed_policy
        cpu, workers, process = time.thread_time(), worker_cpu(self.env), time.process_time()
        try:
            t, n = timed(lambda k: jax.block_until_ready(self.rollout(k)), budget_s)
        finally:
            self.batcher.policy = policy
        per_step = 1e6 / (n * self.cfg.steps_per_update)
        actor = (time.thread_time() - cpu) * per_step
        workers = (worker_cpu(self.env) - workers) * per_step
        process = (time.process_time() - process) * per_step
        return {"collect_sps": self.cfg.steps_per_update / t,
                "policy_ms": 1000 * calls[1] / max(calls[0], 1),
                "actor_cpu_us_per_step": actor, "process_cpu_us_per_step": process,
                "worker_cpu_us_per_step": workers,
                "cpu_bound_sps": default_workers() * 1e6 / (process + workers)}

    def collect_no_policy(self, budget_s: float) -> float:
        """The actors alone with a constant policy: the envs and the host path."""
        policy, constant = self.batcher.policy, np.zeros(self.batcher.acted.size, np.uint32)
        self.batcher.policy = lambda *a: constant
        try:
            t, _ = timed(lambda k: jax.block_until_ready(self.rollout(k)), budget_s)
        finally:
            self.batcher.policy = policy
        return self.cfg.steps_per_update / t

    def policy_alone(self, budget_s: float) -> float:
        """SPS of the policy calls alone (one group's observations, no env stepping)."""
        b, part = self.batcher, self.env.group(0)
        keys = np.asarray(b.keys(self.run_key, np.int32(0), b.stream.env_id))[0, part]
        obs = b.builder.obs[0, part]
        t, _ = timed(lambda _: np.asarray(b.policy(self.params, obs, keys)), budget_s, least=5)
        return self.env.group_size / t

    def update(self, _: int) -> None:
        jax.block_until_ready(self.programs.learner.learner(self.state, (self.batch,))[0])

    def blocking(self, k: int) -> None:
        batch = jax.block_until_ready(self.rollout(k))
        self.state, _, params = jax.block_until_ready(
            self.programs.learner.learner(self.state, (batch,)))
        self.params = self.to_actor(params)


def worker_cpu(env: Any) -> float:
    """CPU seconds the env's worker processes have used (0 for envs without workers)."""
    total = 0.0
    for pid in getattr(env, "pids", []):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def envpool_raw(cfg: Any, budget_s: float) -> float:
    """EnvPool's own rate: one pool of ``num_envs``, its default threads, random actions."""
    import envpool

    name = cfg.env.partition(":")[2]
    pool = envpool.make(name, env_type="gymnasium", num_envs=cfg.num_envs, seed=0)
    try:
        pool.reset()
        rng, space = np.random.default_rng(0), pool.action_space
        if hasattr(space, "n"):  # discrete (Atari)
            def act():
                return rng.integers(0, space.n, cfg.num_envs).astype(np.int32)
        else:  # continuous (MuJoCo): uniform in the bounds
            def act():
                return rng.uniform(space.low, space.high,
                                   (cfg.num_envs, *space.shape)).astype(np.float32)
        t, _ = timed(lambda _: pool.step(act()), budget_s, least=5)
    finally:
        pool.close()
    return cfg.num_envs / t


def run_case(case: str, args: argparse.Namespace) -> dict:
    cfg, row = case_config(case, args)
    cores = default_workers()
    load = os.getloadavg()[0]
    start = time.perf_counter()
    rig = Rig(cfg)
    compile_s = time.perf_counter() - start
    try:
        if case.startswith("envpool:"):
            limit, kind = envpool_raw(cfg, args.budget_s), "envpool raw, same num_envs"
        elif case.startswith("spin:"):
            limit, kind = cores / (row["latency_ms"] / 1000), "cores / latency"
        else:
            limit, kind = cfg.num_envs / (row["latency_ms"] / 1000), "num_envs / latency"
        collect = rig.collect(args.budget_s)
        no_policy = rig.collect_no_policy(args.budget_s)
        policy_alone = rig.policy_alone(args.budget_s / 2)
        t_update, _ = timed(rig.update, args.budget_s, most=args.max_updates)
        t_block, _ = timed(rig.blocking, args.budget_s, most=args.max_updates)
    finally:
        rig.env.close()
    # envs that use the cores (EnvPool, spin) and the policy share them; waiting envs do not
    shared = None if case.startswith("sleep:") else 1 / (1 / limit + 1 / policy_alone)
    batch = cfg.steps_per_update
    per_update = max(batch / collect["collect_sps"], t_update)
    n = int(np.clip(args.budget_s / per_update, 4, args.max_updates))
    timing = jra.train(dataclasses.replace(cfg, total_timesteps=batch * n), seed=0,
                       progress=False).timing
    sps = timing["sps"]
    return {
        **row, "num_envs": cfg.num_envs, "num_steps": cfg.num_steps,
        "groups": rig.env.groups, "workers": len(getattr(rig.env, "owned", [])) or None,
        "cores": cores, "env_limit_sps": limit, "limit": kind,
        **collect, "collect_sps_no_policy": no_policy, "policy_alone_sps": policy_alone,
        "shared_cores_sps": shared,
        "collect_of_shared_cores": shared and collect["collect_sps"] / shared,
        "collect_of_limit": collect["collect_sps"] / limit,
        "learner_sps": batch / t_update, "blocking_sps": batch / t_block,
        "sps": sps, "of_limit": sps / limit, "of_collect": sps / collect["collect_sps"],
        "speedup": sps / (batch / t_block), "learner_busy": timing["learner_busy"],
        "actor_busy": timing["actor_busy"], "updates": n, "compile_s": compile_s,
        "load_avg": [round(load, 2), round(os.getloadavg()[0], 2)],
    }


def envpool_installed() -> bool:
    try:
        import envpool  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=None,
                        help="sleep:<ms>:<envs>, spin:<ms>:<envs>, envpool:<id>:<envs> (default: "
                             f"{' '.join(DEFAULT_CASES)}; EnvPool cases are skipped where it is "
                             "not installed)")
    parser.add_argument("--budget-s", type=float, default=5.0,
                        help="about this many seconds per measurement")
    parser.add_argument("--max-updates", type=int, default=200,
                        help="at most this many updates per measurement")
    parser.add_argument("--num-steps", type=int, default=32, help="gymnasium cases' rollout")
    parser.add_argument("--atari-steps", type=int, default=16, help="EnvPool cases' rollout")
    parser.add_argument("--groups", type=int, default=0,
                        help="AsyncConfig.host_groups (0: the default rule)")
    parser.add_argument("--workers", type=int, default=0,
                        help="AsyncConfig.host_workers for gymnasium cases (0: the cores)")
    parser.add_argument("--one-line", action="store_true",
                        help="print one JSON line with every case, not one per case")
    args = parser.parse_args()
    cases = args.cases or DEFAULT_CASES
    cache_compiled()
    rows = []
    for case in cases:
        if case.startswith("envpool:") and not envpool_installed():
            rows.append({"case": case, "skipped": "envpool is not installed"})
        else:
            rows.append(run_case(case, args))
        if not args.one_line:
            print(json.dumps(rows[-1]), flush=True)
    if args.one_line:
        keys = ("env_limit_sps", "collect_sps", "sps", "of_limit", "collect_of_limit",
                "learner_busy", "actor_busy", "speedup", "groups", "workers")
        print(json.dumps({
            "cases": {r["case"]: {k: round(r[k], 3) if isinstance(r[k], float) else r[k]
                                  for k in keys} if "sps" in r else r
                      for r in rows},
            "cores": default_workers(), "jax": jax.__version__,
            "devices": [str(d) for d in jax.devices()][:2]}))


if __name__ == "__main__":
    main()
