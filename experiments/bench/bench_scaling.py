"""How cost grows: sync PPO's SPS and compile time over ``num_envs``, hidden size and forced CPU
devices; the async runner's iteration time over the rollout-to-update ratio against its floor;
compile times of the reference config.

    python experiments/bench/bench_scaling.py [--full] [--plots DIR] [--only SECTION ...]

Default grids are reduced (a few minutes on a shared 2-core machine); ``--full`` runs the whole
grids (``num_envs`` 4..8192 in powers of 2 or 4, hidden 64..1024, R/U ~0.25..4 in 7 shapes).
PPO on gymnax CartPole-v1, ``num_steps`` 32 unless stated. Sections:

- ``sync``: ``num_envs`` 4 -> 8192 (hidden 64x64, 4 epochs x 4 minibatches): compile time and
  SPS; a least-squares fit of the time per update ``T = a + b * num_envs`` says where the fixed
  per-step cost ``a`` (the scan's sequential steps: small kernels, loop and key overheads)
  dominates and where the per-transition cost ``b`` does: ``crossover_envs = a / b``.
- ``hidden``: hidden size 64 -> 1024 (two layers, 64 envs): SPS, compile, and the GFLOP/s the
  matmuls reach (``2 * params`` flops per forward, x3 for a backward).
- ``devices``: ``SyncConfig(num_devices=N)`` for N forced CPU devices (a subprocess each, with
  ``XLA_FLAGS=--xla_force_host_platform_device_count=N``), 256 envs.
- ``async``: 2 forced devices (1 actor, 1 learner), a fixed batch of 10240 transitions shaped as
  envs x steps from 4 x 2560 (rollout-bound: 2560 sequential steps) to 128 x 80 (update-bound),
  plus more epochs: ``R``, ``U``, ``T_async`` (lag 1), the floor ``T_parallel`` (rollouts and
  updates in two threads exchanging nothing), ``T_async / T_parallel``, and what one hand-over
  costs alone (``handover_s``: the pieces to the learner plus the params back, blocked).
- ``compile``: the default compiler and ``fast_compile`` on ``cartpole-ref`` (4 envs x 128,
  sync runner) against the 5 s target; the async runner's two programs against the sync
  runner's one (target: within +20%).

One JSON line per point, then one summary JSON line. The machine's load average is recorded:
on a shared machine compare points of one run, not absolute figures across runs.
"""

from __future__ import annotations

import os
import sys

if "--child-devices" not in sys.argv:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=2").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

import jaxrl_async as jra  # noqa: E402
from jaxrl_async.runners import actor_learner, placement, sync  # noqa: E402
from jaxrl_async.runners.common import compiler_options  # noqa: E402

jra.use_compile_cache("off")  # compile times here are cold ones (docs/results.md)

GRIDS = {  # reduced, full
    "num_envs": ([4, 64, 1024, 8192], [4, 16, 64, 256, 1024, 2048, 4096, 8192]),
    "hidden": ([64, 128, 256], [64, 128, 256, 512, 1024]),
    "devices": ([1, 2], [1, 2]),
    "async": ([(4, 2560, 1), (16, 640, 1), (64, 160, 1), (16, 640, 4)],
              [(4, 2560, 1), (8, 1280, 1), (16, 640, 1), (32, 320, 1), (64, 160, 1),
               (128, 80, 1), (16, 640, 2), (16, 640, 4)]),
}
SECTIONS = ("sync", "hidden", "devices", "async", "compile")


def emit(line: dict) -> dict:
    print(json.dumps(line), flush=True)
    return line


def sync_point(steps_target: float, repeats: int = 2, devices: int = 1, **kw) -> dict:
    """Compile ``jra.make_train`` of one sync config and time ``repeats`` warm runs."""
    kw = dict(env="CartPole-v1", num_steps=32, log_every=1_000_000, **kw)
    per_update = kw["num_envs"] * kw["num_steps"]
    updates = int(max(2, np.ceil(steps_target / per_update)))
    cfg = jra.PPOConfig(**kw, total_timesteps=updates * per_update,
                        runner=jra.SyncConfig(num_devices=devices))
    start = time.perf_counter()
    run = jax.jit(jra.make_train(cfg)).lower(jax.random.key(0)).compile(compiler_options(cfg))
    compile_s = time.perf_counter() - start
    times = []
    for seed in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.key(seed)))
        times.append(time.perf_counter() - start)
    train_s = float(np.median(times))
    return {"num_envs": cfg.num_envs, "num_steps": cfg.num_steps,
            "hidden": list(cfg.hidden_sizes), "devices": devices, "updates": updates,
            "compile_s": compile_s, "sps": updates * cfg.steps_per_update / train_s,
            "t_update_s": train_s / updates}


def fit_sync(points: list[dict]) -> dict:
    """``t_update = a + b * num_envs`` fitted to the points by least relative error."""
    envs = np.array([p["num_envs"] for p in points], float)
    t = np.array([p["t_update_s"] for p in points])
    rows = np.stack([envs, np.ones_like(envs)], 1) / t[:, None]
    (b, a), *_ = np.linalg.lstsq(rows, np.ones_like(t), rcond=None)
    return {"points": points, "fixed_s_per_update": float(a), "per_env_s_per_update": float(b),
            "crossover_envs": float(a / b) if b > 0 else None}


def sync_section(grid: list[int], steps: float) -> dict:
    return fit_sync([emit({"section": "sync", **sync_point(steps, num_envs=e)}) for e in grid])


def hidden_section(grid: list[int], steps: float) -> dict:
    points = []
    for h in grid:
        p = sync_point(steps, num_envs=64, hidden_sizes=(h, h))
        params = 2 * (4 * h + h * h + h * 2)  # actor and critic matmuls (critic: h -> 1 ~ h -> 2)
        epochs = 4  # PPOConfig's default update_epochs: each a forward and a backward
        flops = 2 * params * (1 + 3 * epochs)  # per transition: acting + epochs x (fwd + bwd)
        p["gflops"] = p["sps"] * flops / 1e9
        points.append(emit({"section": "hidden", **p}))
    return {"points": points}


def devices_section(grid: list[int], steps: float) -> dict:
    points = []
    for n in grid:
        env = {**os.environ, "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "").replace(
            "--xla_force_host_platform_device_count=2", "")
            + f" --xla_force_host_platform_device_count={n}").strip()}
        out = subprocess.run([sys.executable, __file__, "--child-devices", str(n),
                              "--steps", str(steps)], env=env, capture_output=True, text=True,
                             check=True)
        points.append(emit({"section": "devices", **json.loads(out.stdout.splitlines()[-1])}))
    return {"points": points, "speedup_2_vs_1": points[-1]["sps"] / points[0]["sps"]}


def per_iteration(fn, n: int) -> float:
    start = time.perf_counter()
    fn(n)
    return (time.perf_counter() - start) / n


def async_point(num_envs: int, num_steps: int, epochs: int, n: int, rounds: int) -> dict:
    """One shape of the async runner: R, U, T_parallel, T_async and one hand-over, medians."""
    cfg = jra.PPOConfig(env="CartPole-v1", num_envs=num_envs, num_steps=num_steps,
                        update_epochs=epochs, num_minibatches=4, log_every=10,
                        total_timesteps=num_envs * num_steps * n,
                        runner=jra.AsyncConfig(actor_devices=1, learner_devices=1, lag=1))
    start = time.perf_counter()
    setup = actor_learner.prepare(cfg, jax.random.key(0))
    compile_s = time.perf_counter() - start
    actor, learner, where = setup.programs.actor[0], setup.programs.learner, setup.where
    stream, state, run_key = where.streams[0], setup.learner_state, setup.run_keys[0]
    carry = setup.carries[0]
    params = jax.device_put(setup.programs.pack_params(state), where.actor_devices[0])

    def rollout(k):
        nonlocal carry
        carry, pieces = actor(params, carry, run_key, np.int32(k), stream.env_id, np.int32(k))
        return pieces

    pieces = jax.block_until_ready(rollout(0))
    batch = jax.block_until_ready(placement.to_learner(pieces, where))

    def rollouts(k):
        for i in range(k):
            jax.block_until_ready(rollout(i))

    def updates(k):
        s = state
        for _ in range(k):
            s = jax.block_until_ready(learner(s, (batch,))[0])

    def parallel(k):
        threads = [threading.Thread(target=f, args=(k,)) for f in (rollouts, updates)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def handovers(k):  # what the pipeline moves per iteration, alone
        new_params = learner(state, (batch,))[2]
        for _ in range(k):
            jax.block_until_ready((placement.to_learner(pieces, where),
                                   jax.device_put(new_params, where.actor_devices[0])))

    actor_learner.compile_programs = lambda *args: setup.programs  # the pipeline reuses them
    figs: dict[str, list[float]] = {k: [] for k in ("R", "U", "T_parallel", "T_async",
                                                    "handover_s", "learner_busy")}
    for _ in range(rounds):
        figs["R"].append(per_iteration(rollouts, n))
        figs["U"].append(per_iteration(updates, n))
        figs["T_parallel"].append(per_iteration(parallel, n))
        figs["handover_s"].append(per_iteration(handovers, n))
        timing = jra.train(cfg, seed=0, progress=False).timing
        figs["T_async"].append(timing["train_s"] / cfg.num_updates)
        figs["learner_busy"].append(timing["learner_busy"])
    actor_learner.compile_programs = COMPILE_PROGRAMS
    m = {k: float(np.median(v)) for k, v in figs.items()}
    return {"num_envs": num_envs, "num_steps": num_steps, "update_epochs": epochs,
            "compile_s": compile_s, **m, "R_over_U": m["R"] / m["U"],
            "T_floor_ideal": max(m["R"], m["U"]),
            "T_async_over_T_parallel": m["T_async"] / m["T_parallel"],
            "T_parallel_over_max_RU": m["T_parallel"] / max(m["R"], m["U"]),
            "rest_s": m["T_async"] - m["T_parallel"],
            "per_round_T_async_over_T_parallel": [
                round(a / b, 3) for a, b in zip(figs["T_async"], figs["T_parallel"])]}


COMPILE_PROGRAMS = actor_learner.compile_programs


def async_section(grid: list[tuple[int, int, int]], n: int, rounds: int) -> dict:
    points = [emit({"section": "async", **async_point(*shape, n, rounds)}) for shape in grid]
    ratios = [p["T_async_over_T_parallel"] for p in points]
    return {"points": points, "median_T_async_over_T_parallel": float(np.median(ratios))}


def compile_section(rounds: int = 1) -> dict:
    """cartpole-ref (4 envs x 128, 5e5 steps): the sync runner's one program (``make_train``)
    with the default compiler and with fast_compile, the sync runner's host loop (init + chunk)
    and the async runner's two programs (+ init), both as ``jra.train`` times them; ``rounds``
    times each, interleaved, medians."""
    ref = dict(env="CartPole-v1", num_envs=4, num_steps=128, total_timesteps=499_712)
    configs = {
        "sync_default": jra.PPOConfig(**ref),
        "sync_fast_compile": jra.PPOConfig(**ref, fast_compile=True),
        "sync_train": jra.PPOConfig(**{**ref, "total_timesteps": 4 * 128 * 2}),
        "async_default": jra.PPOConfig(**{**ref, "total_timesteps": 4 * 128 * 2},
                                       runner=jra.AsyncConfig(lag=1)),
    }
    runs: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(rounds):
        for name, cfg in configs.items():
            if name in ("sync_default", "sync_fast_compile"):  # a fresh trace and compile
                start = time.perf_counter()
                jax.jit(jra.make_train(cfg)).lower(jax.random.key(0)).compile(
                    compiler_options(cfg))
                runs[name].append(time.perf_counter() - start)
            else:
                sync._PROGRAMS.clear()  # the sync host loop's jitted functions
                runs[name].append(jra.train(cfg, seed=0, progress=False).timing["compile_s"])
    figs = {name: float(np.median(times)) for name, times in runs.items()}
    return emit({"section": "compile", **figs, "runs": runs, "target_s": 5.0,
                 "async_over_sync": figs["async_default"] / figs["sync_default"],
                 "async_over_sync_train": figs["async_default"] / figs["sync_train"]})


def plot(summary: dict, folder: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, key, xlabel in (("sync", "num_envs", "num_envs (x 32 steps)"),
                              ("hidden", "hidden", "hidden size (2 layers, 64 envs)")):
        if name not in summary:
            continue
        points = summary[name]["points"]
        x = [p[key][0] if isinstance(p[key], list) else p[key] for p in points]
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
        left.loglog(x, [p["sps"] for p in points], "o-")
        left.set(xlabel=xlabel, ylabel="SPS", title=f"sync PPO: SPS over {key}")
        right.semilogx(x, [p["compile_s"] for p in points], "o-")
        right.set(xlabel=xlabel, ylabel="compile, s", title="compile time")
        fig.tight_layout()
        fig.savefig(folder / f"scaling_{name}.png", dpi=90)
        plt.close(fig)
        written.append(str(folder / f"scaling_{name}.png"))
    if "async" in summary:
        points = sorted(summary["async"]["points"], key=lambda p: p["R_over_U"])
        x = [p["R_over_U"] for p in points]
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        for key, label in (("T_async", "T_async (pipeline, lag 1)"),
                           ("T_parallel", "T_parallel (floor: two threads, no exchange)"),
                           ("T_floor_ideal", "max(R, U)")):
            ax.loglog(x, [1000 * p[key] for p in points], "o-", label=label)
        ax.set(xlabel="R / U", ylabel="ms per iteration", title="async runner against its floor")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(folder / "scaling_async.png", dpi=90)
        plt.close(fig)
        written.append(str(folder / "scaling_async.png"))
    return written


def summarise_lines(files: list[Path], folder: Path | None) -> None:
    """The summary (and plots) of the point lines in ``files``, as a run would print them."""
    points: dict[str, list[dict]] = {}
    for file in files:
        for line in file.read_text().splitlines():
            point = json.loads(line) if line.startswith("{") else {}
            if "section" in point and point["section"] != "compile":
                points.setdefault(point["section"], []).append(point)
    summary = {name: {"points": p} for name, p in points.items()}
    if "sync" in points:
        summary["sync"] = fit_sync(points["sync"])
    plots = plot(summary, folder) if folder else []
    print(json.dumps({**{name: {k: v for k, v in part.items() if k != "points"}
                         for name, part in summary.items()}, "plots": plots}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the whole grids (slow)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--steps", type=float, default=2e5,
                        help="env steps per timed sync run (at least 2 updates)")
    parser.add_argument("--updates", type=int, default=20, help="async iterations per figure")
    parser.add_argument("--rounds", type=int, default=3,
                        help="async rounds and compile repeats (medians)")
    parser.add_argument("--plots", type=Path, default=None, help="write PNG plots here")
    parser.add_argument("--from-lines", type=Path, nargs="+", default=[],
                        help="measure nothing: plot and summarise the point lines of earlier "
                             "runs (their stdout)")
    parser.add_argument("--child-devices", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.from_lines:
        return summarise_lines(args.from_lines, args.plots)
    if args.child_devices:  # one point of the devices section, in its own process
        print(json.dumps(sync_point(args.steps, devices=args.child_devices, num_envs=256)))
        return
    full = int(args.full)
    load = [os.getloadavg()[0]]
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()
    summary: dict = {}
    start = time.perf_counter()
    if "sync" in args.only:
        summary["sync"] = sync_section(GRIDS["num_envs"][full], args.steps)
    if "hidden" in args.only:
        summary["hidden"] = hidden_section(GRIDS["hidden"][full], args.steps / 10)
    if "devices" in args.only:
        summary["devices"] = devices_section(GRIDS["devices"][full], args.steps)
    if "async" in args.only:
        summary["async"] = async_section(GRIDS["async"][full], args.updates, args.rounds)
    if "compile" in args.only:
        summary["compile"] = compile_section(args.rounds)
    plots = plot(summary, args.plots) if args.plots else []
    load.append(os.getloadavg()[0])
    brief = {name: {k: v for k, v in part.items() if k != "points"}
             for name, part in summary.items()}
    print(json.dumps({**brief, "plots": plots, "full": args.full, "wall_s":
                      time.perf_counter() - start, "load_avg": load,
                      "cores": len(os.sched_getaffinity(0)), "jax": jax.__version__}))


if __name__ == "__main__":
    main()
