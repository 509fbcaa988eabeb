"""Published results reproduced side by side: ``python -m experiments.reproduce --suite classic``.

Runs every row of a suite (``suites.py``) at its published settings
(``jaxrl_async/presets/published/<row>.json``) for ``--seeds`` seeds vmapped in one compiled
program (``jra.sweep``'s ``run_points``, spread over the CPU cores; a host env's row, MuJoCo
through EnvPool: ``jra.train`` per seed under the async runner, then ``jra.evaluate``), then
writes beside each other in ``--out``: ``table.md`` (env, algorithm, budget, published figure
with its source, ours as mean ± std over seeds, wall time, SPS), ``results.json`` and a
learning-curve PNG per row. Ours is given both ways: the training return (episodes that ended
in the last 1% of the updates, at least 10; CleanRL reports training returns) and the final
evaluation (``eval_every``: fresh envs after the last update, as RL Zoo and gymnax-blines
report); the column matching the published protocol comes first.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import sys
import time
import warnings
from pathlib import Path

import jax

from jaxrl_async.search.sweep import use_cpu_cores

use_cpu_cores()  # before anything runs: one XLA device per core, the seeds spread over them

import numpy as np  # noqa: E402

import jaxrl_async as jra  # noqa: E402
from experiments.reproduce.suites import SUITES, Row  # noqa: E402
from jaxrl_async.algos import from_dict  # noqa: E402
from jaxrl_async.envs import is_host_env  # noqa: E402
from jaxrl_async.run.config_files import PRESETS  # noqa: E402
from jaxrl_async.run.sinks import to_json, window_returns  # noqa: E402
from jaxrl_async.search.sweep import run_points  # noqa: E402

CONFIGS = PRESETS / "published"
TRAIN_CURVES = ("episode_return", "episode_return_sum", "episodes")


def load(name: str):
    """The config of a published-settings file (a run directory's config.json)."""
    return from_dict(json.loads((CONFIGS / f"{name}.json").read_text()), ignore=("seed",))


def train_window(cfg) -> int:
    """Training return: the episodes that ended in the last 1% of the updates (at least 10):
    with one env and 10-step updates (CleanRL's DQN) 10 updates are 100 env steps, shorter
    than one 500-step CartPole episode."""
    return max(10, cfg.num_updates // 100)


def run_host_seeds(cfg, seeds: int, first_seed: int = 0) -> tuple[dict, np.ndarray, dict]:
    """A host env's row: one ``jra.train`` per seed (the async runner, envs on the host), then
    a greedy evaluation on fresh envs: (curves [seeds, updates], final evals [seeds], timing
    averaged over the runs, ``wall_per_run`` each one's)."""
    curves: dict[str, list] = {}
    evals, walls, timings = [], [], []
    for seed in range(first_seed, first_seed + seeds):
        start = time.perf_counter()
        result = jra.train(cfg, seed=seed, progress=False)
        walls.append(time.perf_counter() - start)
        evaluation = jra.evaluate(result, cfg, cfg.eval_episodes, greedy=cfg.eval_greedy,
                                  seed=seed)
        evals.append(evaluation["mean_return"])
        timings.append(result.timing)
        for k in (*TRAIN_CURVES, "env_steps"):
            curves.setdefault(k, []).append(result.metrics[k])
        print(f"  seed {seed}: {walls[-1]:.0f} s, final eval {evals[-1]:.1f}", file=sys.stderr,
              flush=True)
    curves = {k: np.stack(v) for k, v in curves.items()}
    curves["eval_return"] = np.full_like(curves["episode_return"], np.nan)
    timing = {k: float(np.mean([t[k] for t in timings])) for k in ("compile_s", "sps")}
    return curves, np.asarray(evals), {**timing, "wall_per_run": walls}


def run_row(row: Row, seeds: int, budget: int | None) -> dict:
    cfg = load(row.config)
    if budget:
        cfg = dataclasses.replace(cfg, total_timesteps=budget)
    start = time.perf_counter()
    if is_host_env(cfg.env):
        curves, evals, timing = run_host_seeds(cfg, seeds)
    else:
        result = run_points(cfg, [{}], seeds, progress=False)
        curves = {k: v[0] for k, v in result.curves.items()}
        evals, timing = result.final_eval_return[0], result.timing
    wall = time.perf_counter() - start
    window = train_window(cfg)
    train = window_returns({k: curves[k] for k in TRAIN_CURVES if k in curves}, window)
    return {
        "config": row.config, "env": cfg.env, "algo": cfg.name,
        "budget": cfg.num_updates * cfg.steps_per_update, "seeds": seeds,
        "published": row.published, "published_std": row.published_std,
        "source": row.source.cite(), "protocol": row.protocol, "note": row.note,
        "train_window_updates": window,
        "train_mean": float(np.nanmean(train)), "train_std": float(np.nanstd(train)),
        "eval_mean": float(np.nanmean(evals)), "eval_std": float(np.nanstd(evals)),
        "train_per_seed": train.tolist(), "eval_per_seed": evals.tolist(),
        "eval_episodes": cfg.eval_episodes, "eval_greedy": cfg.eval_greedy,
        "wall_s": wall, "compile_s": timing["compile_s"], "sps": timing["sps"],
        **({"wall_per_run": timing["wall_per_run"]} if "wall_per_run" in timing else {}),
        "curves": {k: np.asarray(curves[k]).tolist() for k in ("env_steps", "episode_return",
                                                                 "eval_return")},
    }


def _pm(mean: float | None, std: float | None) -> str:
    if mean is None or not math.isfinite(mean):  # results.json writes NaN as null
        return "n/a"
    return f"{mean:.1f}" if std is None else f"{mean:.1f} ± {std:.1f}"


def _wall(row: dict) -> str:
    """The row's wall time: all seeds at once (vmapped), or per run (host envs: one by one)."""
    if "wall_per_run" not in row:
        return f"{row['wall_s']:.0f} s"
    runs = row["wall_per_run"]
    return f"{np.mean(runs) / 60:.1f} min per run ({min(runs) / 60:.1f}-{max(runs) / 60:.1f})"


def table(rows: list[dict]) -> str:
    lines = ["| env | algo | budget | published | source | ours (train return) | "
             "ours (final eval) | seeds | wall | SPS |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        greedy = "greedy" if r["eval_greedy"] else "sampled"
        lines.append(
            f"| {r['env']} | {r['algo']} | {r['budget']:,} | "
            f"{_pm(r['published'], r['published_std'])} ({r['protocol']}) | {r['source']} | "
            f"{_pm(r['train_mean'], r['train_std'])} | "
            f"{_pm(r['eval_mean'], r['eval_std'])} ({r['eval_episodes']} {greedy}) | "
            f"{r['seeds']} | {_wall(r)} | {r['sps']:,.0f} |")
    notes = [f"- **{r['env']} {r['algo']}**: {r['note']}" for r in rows if r["note"]]
    return "\n".join(lines + [""] + notes) + "\n"


def plot(row: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.asarray(row["curves"]["env_steps"])[0]
    train = np.asarray(row["curves"]["episode_return"], float)  # [seeds, updates]
    width = max(1, train.shape[1] // 100)  # training returns: means over windows of updates
    n = train.shape[1] // width * width
    evals = np.asarray(row["curves"]["eval_return"], float)
    due = np.isfinite(evals).all(0)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # windows without a finished episode
        windows = np.nanmean(train[:, :n].reshape(len(train), -1, width), -1)
        for x, values, label, style in (
                (steps[width - 1:n:width], windows, "training episodes", "-"),
                (steps[due], evals[:, due], "evaluation", "o-"))[:1 + bool(due.any())]:
            line, = ax.plot(x, np.nanmean(values, 0), style, lw=1.2, ms=3, label=label)
            ax.fill_between(x, np.nanmin(values, 0), np.nanmax(values, 0), alpha=0.2,
                            color=line.get_color())
    finals = np.asarray(row.get("eval_per_seed", []), float)
    if not due.any() and np.isfinite(finals).any():  # a host row: one evaluation, after training
        mean = float(np.nanmean(finals))
        ax.errorbar([steps[-1]], [mean], yerr=[[mean - np.nanmin(finals)],
                                               [np.nanmax(finals) - mean]], fmt="o", ms=4,
                    capsize=3, label="final evaluation")
    if math.isfinite(row["published"]):
        ax.axhline(row["published"], color="k", ls="--", lw=1, label="published")
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.set_title(f"{row['algo'].upper()} on {row['env']} ({row['seeds']} seeds, band: min-max)",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.reproduce",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, choices=sorted(SUITES))
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds per row, vmapped (default: 3 classic and mujoco, 2 minatar)")
    parser.add_argument("--budget", type=int, default=None,
                        help="env steps per run instead of the published budget")
    parser.add_argument("--only", nargs="*", default=None, help="config names of rows to run")
    parser.add_argument("--out", default=None, help="default: docs/reproduce/<suite>")
    parser.add_argument("--replot", action="store_true",
                        help="only redraw the PNGs and table.md from --out's results.json")
    args = parser.parse_args(argv)
    seeds = args.seeds or (3 if args.suite in ("classic", "mujoco") else 2)
    out = Path(args.out or Path("docs/reproduce") / args.suite)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        rows = json.loads((out / "results.json").read_text())
        for row in rows:
            plot(row, out / f"{row['config']}.png")
        print(table(rows))
        return 0
    # --only keeps the other rows of --out's results.json (a row run again replaces its own)
    saved = out / "results.json"
    kept = {r["config"]: r for r in json.loads(saved.read_text())} if (
        args.only and saved.exists()) else {}
    order = [row.config for row in SUITES[args.suite]]
    rank = lambda r: order.index(r["config"]) if r["config"] in order else len(order)
    for row in SUITES[args.suite]:
        if args.only and row.config not in args.only:
            continue
        print(f"running {row.config} ({seeds} seeds) ...", file=sys.stderr, flush=True)
        result = run_row(row, seeds, args.budget)
        plot(result, out / f"{row.config}.png")
        kept[row.config] = result
        rows = sorted(kept.values(), key=rank)
        saved.write_text(to_json(rows) + "\n")  # after every row; strict JSON (NaN: null)
        print(to_json({k: v for k, v in result.items() if k != "curves"}), flush=True)
    rows = sorted(kept.values(), key=rank)
    text = table(rows)
    command = " ".join(["python -m experiments.reproduce", *(argv if argv is not None
                                                                else sys.argv[1:])])
    (out / "table.md").write_text(
        f"`{command}`, {datetime.date.today()}, {jax.device_count()} CPU device(s), JAX "
        f"{jax.__version__}" + (" (rows not run by it: from an earlier run, see "
                                "results.json)" if args.only else "") + "\n\n" + text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
