"""Speed of the async runner on 2 devices (1 actor, 1 learner) against the blocking loop and
against the sync runner data-parallel over the same 2 devices.

    python experiments/bench/bench_async.py [--num-envs 16 --num-steps 640 --updates 100 --rounds 5]

Figures (the words defined in docs/results.md), seconds per iteration, warm:

- ``R``, ``U``: the rollout alone, the update alone, each blocked until ready;
- ``T_sync``: the blocking loop on the same devices (rollout, wait, update, wait, params copy);
- ``T_async``: ``jra.train`` with ``AsyncConfig(actor_devices=1, learner_devices=1, lag=1)``
  (``train_s / updates``: threads, pipeline and metrics included);
- ``T_async_free``: the same, free-running (``deterministic=False``, ``queue_size=2``,
  ``max_staleness=2``, ``stale_policy="correct"``): a little slack absorbs timing noise;
- ``T_async_one_thread``: the same lag-1 schedule dispatched by one thread, no pipeline
  threads (the other way to arrange the same schedule);
- ``T_parallel``: rollouts and updates in two threads exchanging nothing: what the machine
  allows in parallel right now, so ``pipeline_overhead = T_async / T_parallel - 1`` is the
  pipeline's own cost (on a loaded machine T_parallel, not the pipeline, sets the limit);
- ``T_anakin2``: the sync runner with ``SyncConfig(num_devices=2)``, same config, the whole
  run as one program (``jax.jit(jra.make_train(cfg))``);
- ``handover_s``: one iteration's copies alone (the rollout to the learner device, the
  params back), blocked; ``handover_dispatch_s``: the host time to dispatch them;
- ``breakdown``: where ``T_async - T_parallel`` goes: fill and drain, the hand-over, the
  learner's busy fraction inside the pipeline run and its idle time per iteration;
- ``speedup = T_sync / T_async``, ``ideal = (R+U) / max(R,U)``,
  ``overlap_efficiency = (R+U-T_async) / (R+U-max(R,U))``, ``learner_busy = U / T_async``,
  ``speedup_vs_anakin2 = T_anakin2 / T_async``.

Each round measures every time one after the other; the figures are medians over
``--rounds`` rounds and the ratios are taken between those medians (the machine is shared and
noisy: only ratios inside one run mean anything). ``per_round_median`` takes each ratio inside
every round first (noisier: three noisy times per ratio); ``spread`` gives min and max.
The last line printed is one JSON object.
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
from jaxrl_async.runners import actor_learner, placement  # noqa: E402

jra.use_compile_cache("off")  # compile times here are cold ones (docs/results.md)


def per_iteration(fn, n: int) -> float:
    start = time.perf_counter()
    fn(n)
    return (time.perf_counter() - start) / n


def figures(t: dict) -> dict:
    """The ratios defined in docs/results.md from times (floats, or arrays of rounds)."""
    R, U, t_async = t["R"], t["U"], t["T_async"]
    return {
        "speedup": t["T_sync"] / t_async,
        "ideal": (R + U) / np.maximum(R, U),
        "overlap_efficiency": (R + U - t_async) / (R + U - np.maximum(R, U)),
        "learner_busy": U / t_async,
        "speedup_vs_anakin2": t["T_anakin2"] / t_async,
        "speedup_free": t["T_sync"] / t["T_async_free"],
        "speedup_one_thread": t["T_sync"] / t["T_async_one_thread"],
        "pipeline_overhead": t_async / t["T_parallel"] - 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=640)
    parser.add_argument("--update-epochs", type=int, default=1)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--updates", type=int, default=100, help="iterations per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    base = dict(env="CartPole-v1", num_envs=args.num_envs, num_steps=args.num_steps,
                update_epochs=args.update_epochs, num_minibatches=args.num_minibatches,
                total_timesteps=args.num_envs * args.num_steps * args.updates,
                log_every=10)
    cfg = jra.PPOConfig(**base, runner=jra.AsyncConfig(actor_devices=1, learner_devices=1))
    # the sync runner over the same devices (one, where there is one: a single GPU)
    anakin = jra.PPOConfig(**base, runner=jra.SyncConfig(
        num_devices=min(2, jax.local_device_count())))
    setup = actor_learner.prepare(cfg, jax.random.key(0))
    actor, learner = setup.programs.actor[0], setup.programs.learner
    where, stream = setup.where, setup.where.streams[0]
    state, carry, run_key = setup.learner_state, setup.carries[0], setup.run_keys[0]
    params = jax.device_put(setup.programs.pack_params(state), where.actor_devices[0])

    def rollout(k):
        nonlocal carry
        carry, pieces = actor(params, carry, run_key, np.int32(k), stream.env_id, np.int32(k))
        last_pieces[0] = pieces  # (the actor program donates its carry: keep what it made)
        return placement.to_learner(pieces, where)

    last_pieces: list = [None]

    batch = jax.block_until_ready(rollout(0))

    def rollouts(n):
        for k in range(n):
            jax.block_until_ready(rollout(k))

    def updates(n):
        s = state
        for _ in range(n):
            s = jax.block_until_ready(learner(s, (batch,))[0])

    def blocking_loop(n):
        nonlocal params
        s = state
        for k in range(n):
            batch = jax.block_until_ready(rollout(k))
            s, _, new_params = jax.block_until_ready(learner(s, (batch,)))
            params = jax.block_until_ready(jax.device_put(new_params, where.actor_devices[0]))

    def one_thread(n):
        nonlocal params
        s, pending = state, rollout(0)
        for k in range(n):
            nxt = rollout(k + 1)  # dispatched with the params of update k - 1 (lag 1)
            s, _, new_params = learner(s, (pending,))
            params = jax.device_put(new_params, where.actor_devices[0])
            jax.block_until_ready((nxt, params))
            pending = nxt

    def unsynchronised(n):  # two threads, rollouts and updates, no data or params exchanged
        threads = [threading.Thread(target=f, args=(n,)) for f in (rollouts, updates)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    compiled = setup.programs  # the pipeline reuses the programs timed above
    actor_learner.compile_programs = lambda *args: compiled

    in_run: dict[str, list[float]] = {"learner_busy": [], "actor_busy": []}

    def pipeline(n, config=cfg):
        timing = jra.train(config, seed=0, progress=False).timing
        if config is cfg:  # the lag-1 pipeline: what its threads did inside the run
            for name in in_run:
                in_run[name].append(timing[name])
        return timing["train_s"] / config.num_updates

    new_params = learner(state, (batch,))[2]

    def handovers(n):  # what the pipeline moves per iteration, alone and blocked
        for _ in range(n):
            jax.block_until_ready((placement.to_learner(last_pieces[0], where),
                                   jax.device_put(new_params, where.actor_devices[0])))

    def handover_dispatch(n):  # the host's share of it: dispatching the two copies
        host = 0.0
        for _ in range(n):
            start = time.perf_counter()
            copies = (placement.to_learner(last_pieces[0], where),
                      jax.device_put(new_params, where.actor_devices[0]))
            host += time.perf_counter() - start
            jax.block_until_ready(copies)
        return host / n

    free = dataclasses.replace(cfg, runner=jra.AsyncConfig(
        deterministic=False, queue_size=2, max_staleness=2, stale_policy="correct"))

    whole_run = jax.jit(jra.make_train(anakin)).lower(jax.random.key(0)).compile()

    def anakin2(n):  # the whole run fused in one program: the sync runner at its fastest
        start = time.perf_counter()
        jax.block_until_ready(whole_run(jax.random.key(0)))
        return (time.perf_counter() - start) / anakin.num_updates

    names = ["R", "U", "T_sync", "T_async_one_thread", "T_async", "T_async_free", "T_anakin2",
             "T_parallel", "handover_s", "handover_dispatch_s"]
    rounds: dict[str, list[float]] = {name: [] for name in names}
    n = args.updates
    for _ in range(args.rounds):
        rounds["R"].append(per_iteration(rollouts, n))
        rounds["U"].append(per_iteration(updates, n))
        rounds["T_sync"].append(per_iteration(blocking_loop, n))
        rounds["T_async_one_thread"].append(per_iteration(one_thread, n))
        rounds["T_async"].append(pipeline(n))
        rounds["T_async_free"].append(pipeline(n, free))
        rounds["T_anakin2"].append(anakin2(n))
        rounds["T_parallel"].append(per_iteration(unsynchronised, n))
        rounds["handover_s"].append(per_iteration(handovers, n))
        rounds["handover_dispatch_s"].append(handover_dispatch(n))
    times = {name: np.array(v) for name, v in rounds.items()}
    fig = {name: float(np.median(v)) for name, v in times.items()}
    fig.update(figures({name: float(np.median(v)) for name, v in times.items()}))
    # Where T_async - T_parallel goes: the pipeline's fill and drain (one rollout before the
    # first update, one update after the last rollout, spread over n), the hand-over's copies
    # and host dispatch, and the learner's idle time inside the run.
    busy = {name: float(np.median(v)) for name, v in in_run.items()}
    fig.update({
        "T_async_over_T_parallel": fig["T_async"] / fig["T_parallel"],
        "per_round_T_async_over_T_parallel": [
            round(a / b, 3) for a, b in zip(rounds["T_async"], rounds["T_parallel"])],
        "breakdown": {
            "rest_s": fig["T_async"] - fig["T_parallel"],
            "fill_drain_s": (fig["R"] + fig["U"]) / n,
            "handover_s": fig["handover_s"],
            "handover_dispatch_s": fig["handover_dispatch_s"],
            "learner_busy_in_run": busy["learner_busy"],
            "actor_busy_in_run": busy["actor_busy"],
            "learner_idle_s": fig["T_async"] * (1.0 - busy["learner_busy"]),
            "learner_compute_in_run_s": fig["T_async"] * busy["learner_busy"],
        },
    })
    per_round = figures(times)  # the same ratios inside each round: a noisier view
    fig.update({
        "per_round_median": {k: float(np.median(v)) for k, v in per_round.items()},
        "spread": {name: [round(float(v.min()), 4), round(float(v.max()), 4)]
                   for name, v in {**times, **per_round}.items()},
        "config": {k: v for k, v in base.items() if k != "total_timesteps"},
        "updates": n, "rounds": args.rounds, "load_avg": os.getloadavg()[0],
        "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
    })
    print(json.dumps(fig))


if __name__ == "__main__":
    main()
